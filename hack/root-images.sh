#!/usr/bin/env bash
# hack/root-images.sh: copy devaipod's images from the test user's rootless storage into root's, for
# the rootful end-to-end pass of `make test` (limits are enforced only there). Run as root, after
# `hack/as-test-user make images`. An image whose id already matches is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "root-images: run as root" >&2; exit 1; }
for img in localhost/devaipod-helper:latest localhost/devaipod-default:latest; do
	want=$(hack/as-test-user podman image inspect --format '{{.Id}}' "$img")
	have=$(podman image inspect --format '{{.Id}}' "$img" 2>/dev/null || true)
	if [ "$want" != "$have" ]; then
		echo "root-images: copying $img into root's storage"
		hack/as-test-user podman save "$img" | podman load -q
	fi
done

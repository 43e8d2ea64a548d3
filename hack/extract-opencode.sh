#!/usr/bin/env bash
# hack/extract-opencode.sh OUT: copy the opencode executable out of the default image to OUT, so that
# fakellm's host-level test (TestOpencodeDrivenByScript) runs the very opencode the pods run.
# `make test` runs it as the test user and passes OUT as DEVAIPOD_OPENCODE_BIN.
set -euo pipefail
out=${1:?usage: hack/extract-opencode.sh OUT}
image=localhost/devaipod-default:latest
mkdir -p "$(dirname "$out")"
cid=$(podman create --quiet "$image" true)
trap 'podman rm -f "$cid" >/dev/null' EXIT
podman cp "$cid:/usr/local/bin/opencode" "$out" ||
	{ echo "extract-opencode: $image has no /usr/local/bin/opencode (see hack/build-images.sh)" >&2; exit 1; }
chmod 0755 "$out"

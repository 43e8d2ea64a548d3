#!/usr/bin/env bash
# hack/install-devcontainer-cli.sh DIR: install the devcontainer CLI (the spec's reference
# implementation, which builds features) from the npm registry into DIR, and print its path.
# `make test` runs it as the test user and passes the path as DEVAIPOD_DEVCONTAINER_CLI_BIN to the
# e2e test of a local feature (TestE2ELocalFeature). The version is pinned: its build output and
# the metadata label it writes are what the test reads.
set -euo pipefail
dir=${1:?usage: hack/install-devcontainer-cli.sh DIR}
version=0.89.0
bin=$dir/node_modules/.bin/devcontainer
if [ ! -x "$bin" ] || [ "$("$bin" --version 2>/dev/null)" != "$version" ]; then
	command -v npm >/dev/null 2>&1 || { echo "install-devcontainer-cli: npm is not installed (apt-get install npm)" >&2; exit 1; }
	mkdir -p "$dir"
	npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "@devcontainers/cli@$version" >&2
fi
echo "$bin"

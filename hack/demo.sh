#!/usr/bin/env bash
# hack/demo.sh: the README's first command (`make demo`). Sets the host up,
# builds devaipod and its images, makes a git repository of examples/hello and
# runs `devaipod up` on it with the default image and agent (opencode), then
# says how to get in.
#
# As root on a bare Debian 12 machine it installs what is missing and runs
# rootless podman as the unprivileged user devaipod-test (the agent never runs
# under rootful podman here). As a normal user with podman it runs rootless as
# that user.
set -euo pipefail
cd "$(dirname "$0")/.."
repo_root=$(pwd -P)
name=${DEVAIPOD_DEMO_NAME:-hello}

hack/setup-host.sh
make build
hack/as-test-user make images

devaipod=(hack/as-test-user "$repo_root/bin/devaipod")
runner=$(hack/as-test-user id -un)
# One example repository per user, made afresh on each run: no run leaves another behind.
work=${TMPDIR:-/tmp}/devaipod-demo-$runner

# A pod of that name from an earlier run goes only if its agent did nothing.
DEVAIPOD="${devaipod[*]}" hack/demo-replace.sh "$name" "$work/hello"

# The example becomes a repository of its own, owned by whoever runs devaipod.
hack/as-test-user rm -rf "$work"
hack/as-test-user mkdir -p "$work"
hack/as-test-user cp -r examples/hello "$work/hello"
hack/as-test-user sh -c '
	cd "$1" && git init -q -b main && git add . &&
	git -c user.name=devaipod -c user.email=demo@devaipod.invalid commit -q -m "hello example"
' sh "$work/hello"

# The example is devaipod's own, so trusted: its workspace gets your
# [trusted.env] (an untrusted repository's gets none: devaipod trust --help).
"${devaipod[@]}" up "$work/hello" --name "$name" --quiet --trust

if [ "$(id -u)" = 0 ]; then
	prefix="hack/as-test-user bin/devaipod"
	who="rootless podman, as the unprivileged user devaipod-test"
else
	prefix="bin/devaipod"
	who="rootless podman, as $(id -un)"
fi
cat <<MSG

The example runs in pod '$name' ($who).
Get in:
  $prefix exec $name              # a shell in the workspace (git, your trusted env)
  $prefix attach $name            # opencode's UI, attached to the sandboxed agent
  $prefix exec $name -c agent     # look around inside the agent's sandbox
  $prefix verify $name            # attack the sandbox from inside: which protections hold here
  $prefix diff $name              # what the agent changed, committed or not
  $prefix fetch $name --repo $work/hello   # its commits, as devaipod-$name/* in the example's repository
  $prefix status $name
  $prefix delete $name            # remove everything it created
MSG

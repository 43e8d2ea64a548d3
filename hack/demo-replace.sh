#!/usr/bin/env bash
# hack/demo-replace.sh NAME REPO: remove the pod NAME of an earlier `make demo`, but only if its
# agent did nothing: its work is not thrown away without a word. Exits 1, saying how to see and keep
# the work, when there is some, or when the pod's work cannot be looked at. $DEVAIPOD is the
# devaipod command (default: devaipod); REPO is the example's repository, for the fetch hint.
set -euo pipefail
name=$1 repo=$2
read -r -a devaipod <<<"${DEVAIPOD:-devaipod}"

names=$("${devaipod[@]}" list -q) # fails loudly when podman does not answer
grep -qxF -- "$name" <<<"$names" || exit 0
if ! stat=$("${devaipod[@]}" diff "$name" --stat 2>&1); then
	printf 'demo: pod %s exists, and its work cannot be looked at (%s): start it (%s start %s) or delete it, then run the demo again\n' \
		"$name" "$(tail -n 1 <<<"$stat")" "${devaipod[*]}" "$name" >&2
	exit 1
fi
# A diffstat line, of HEAD's work, a branch or a hidden file, has " | ".
if grep -q ' | ' <<<"$stat"; then
	cat >&2 <<MSG
demo: pod '$name' has work of its agent's that a new demo would throw away:
  ${devaipod[*]} diff $name              # see it
  ${devaipod[*]} fetch $name --repo $repo   # keep its commits
then delete the pod (${devaipod[*]} delete $name), or run the demo under another name:
  DEVAIPOD_DEMO_NAME=hello2 make demo
MSG
	exit 1
fi
"${devaipod[@]}" delete --wait "$name" >/dev/null

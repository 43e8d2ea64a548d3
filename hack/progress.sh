#!/usr/bin/env bash
# hack/progress.sh [--log FILE] LABEL CMD...: run CMD, saying LABEL first, then every 20 seconds
# that it still runs, and how long it took: a first `go build` (modules to download) or a rootfs
# build can take minutes without a line of output. With --log, CMD's output is appended to FILE
# (the progress lines still go to standard error). PROGRESS_EVERY changes the 20 seconds.
set -euo pipefail
every=${PROGRESS_EVERY:-20}
log=""
if [ "${1:-}" = --log ]; then
	log=$2
	shift 2
fi
if [ $# -lt 2 ]; then
	echo "usage: hack/progress.sh [--log FILE] LABEL CMD..." >&2
	exit 2
fi
label=$1
shift
start=$SECONDS
printf '%s...\n' "$label" >&2
# The ticker in the background, CMD in the foreground: Ctrl-C reaches CMD as from the shell.
(
	# sleep holds none of this script's outputs: killed, the ticker leaves none open.
	while sleep "$every" </dev/null >/dev/null 2>&1; do
		printf '%s: still running (%ds)\n' "$label" $((SECONDS - start)) >&2
	done
) &
ticker=$!
trap 'kill "$ticker" 2>/dev/null || true' EXIT
status=0
if [ -n "$log" ]; then
	"$@" >>"$log" 2>&1 || status=$?
else
	"$@" || status=$?
fi
kill "$ticker" 2>/dev/null || true
if [ "$status" -eq 0 ] && [ $((SECONDS - start)) -ge 5 ]; then
	printf '%s: done in %ds\n' "$label" $((SECONDS - start)) >&2
fi
exit "$status"

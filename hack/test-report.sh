#!/usr/bin/env bash
# hack/test-report.sh: pass `go test -v` output through as it comes and, at its end, print the
# slowest top-level tests (make test; the suite must stay under 15 minutes on a fresh machine).
set -euo pipefail
awk '
	{ print; fflush() }
	/^--- (PASS|FAIL): [^ ]+ \([0-9.]+s\)$/ {
		t = $4; gsub(/[()s]/, "", t)
		n++; name[n] = $3; secs[n] = t + 0
	}
	END {
		if (n == 0) exit
		# selection of the 15 slowest, highest first
		printf "\nslowest tests (of %d):\n", n
		for (k = 0; k < 15 && k < n; k++) {
			best = 0
			for (i = 1; i <= n; i++) if (!done[i] && (best == 0 || secs[i] > secs[best])) best = i
			done[best] = 1
			printf "  %7.1fs  %s\n", secs[best], name[best]
		}
	}'

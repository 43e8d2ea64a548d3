#!/usr/bin/env bash
# hack/bench.sh: time `devaipod up` and `devaipod delete` against the same pod built and removed by
# hack/cli-pod.sh (plain podman CLI commands, the Rust devaipod's way), on warm images, and write
# docs/benchmarks.md. `make bench` runs it.
#
#   hack/bench.sh            as root: measures as the test user (hack/as-test-user), writes the doc
#                            as root; as any other user: measures and writes the doc itself
#
# One hyperfine run measures, each from nothing (hyperfine's --prepare removes the previous pod):
#   devaipod up / cli-pod up        with a stand-in agent (busybox httpd), so that the agent's own
#                                   start-up does not hide the cost of building the pod
#   devaipod delete / cli-pod delete of a pod that the same tool has just built (--prepare)
#   devaipod up / cli-pod up        with the real default agent (opencode serve), unless
#                                   DEVAIPOD_BENCH_OPENCODE=0
# then, outside hyperfine, a few instrumented runs that time each step of both, and the start-up
# cost of the podman CLI and of the devaipod binary. Everything it creates is named
# devaipod-bench-* and removed on exit.
#
# Environment (DEVAIPOD_* variables pass through hack/as-test-user):
#   DEVAIPOD_BENCH_RUNS       timed runs per variant (default 9, at least 7)
#   DEVAIPOD_BENCH_OPENCODE   1 (default) to add the rows with opencode as the agent, 0 to skip them
#   DEVAIPOD_BENCH_FILES      files in the fixture repository (default 400, about 1.6 MB)
#   DEVAIPOD_BENCH_DOC        where to write the report (default docs/benchmarks.md)
#   DEVAIPOD_BENCH_KEEP       1 to keep the raw results directory (its path is printed)
set -euo pipefail

SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)/$(basename "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SELF")/.." && pwd -P)
BIN=$REPO/bin/devaipod
CLI=$REPO/hack/cli-pod.sh
TEST_USER=devaipod-test
IMAGE=localhost/devaipod-default:latest
HELPER_IMAGE=localhost/devaipod-helper:latest
STANDIN_CMD='busybox httpd -f -p 127.0.0.1:4096 -h /tmp'
RUNS=${DEVAIPOD_BENCH_RUNS:-9}
OPENCODE=${DEVAIPOD_BENCH_OPENCODE:-1}
FILES=${DEVAIPOD_BENCH_FILES:-400}
DOC=${DEVAIPOD_BENCH_DOC:-$REPO/docs/benchmarks.md}
TARGET=0.6
# Pod names (devaipod-NAME). Only these are ever created or removed.
DP=bench-dp
CP=bench-cli
DP_OC=bench-dp-oc
CP_OC=bench-cli-oc

die() {
	printf 'bench: error: %s\n' "$*" >&2
	exit 1
}
say() { printf 'bench: %s\n' "$*" >&2; }

# ---------------------------------------------------------------------------------------------
# helpers run by hyperfine (--prepare, --cleanup) and by the instrumented runs
# ---------------------------------------------------------------------------------------------

# reset KIND NAME: make sure pod devaipod-NAME and its volumes do not exist.
reset() {
	local kind=$1 name=$2 pod=devaipod-$2
	case $kind in
	dp)
		"$BIN" delete -q "$name" >/dev/null 2>&1 || true
		;;
	cli)
		podman pod rm -f -t 0 --ignore "$pod" >/dev/null
		podman rm -f -t 0 --ignore "$pod-workspace-init" >/dev/null
		local v
		for v in workspace agent-home agent-sock; do
			if podman volume exists "$pod-$v"; then
				podman volume rm -f "$pod-$v" >/dev/null
			fi
		done
		;;
	*) die "reset: unknown kind $kind" ;;
	esac
	if podman pod exists "$pod"; then
		die "could not remove pod $pod"
	fi
}

# build KIND NAME AGENT: reset, then build pod devaipod-NAME with the stand-in or opencode agent.
build() {
	local kind=$1 name=$2 agent=$3
	reset "$kind" "$name"
	case $kind/$agent in
	dp/standin) "$BIN" --config "$BENCH_WORK/standin.toml" up -q --name "$name" "$BENCH_FIXTURE" >/dev/null ;;
	dp/opencode) "$BIN" --config "$BENCH_WORK/default.toml" up -q --name "$name" "$BENCH_FIXTURE" >/dev/null ;;
	cli/standin) CLI_POD_AGENT_CMD=$STANDIN_CMD "$CLI" up "$BENCH_FIXTURE" "$name" >/dev/null ;;
	cli/opencode) "$CLI" up "$BENCH_FIXTURE" "$name" >/dev/null ;;
	*) die "build: unknown $kind/$agent" ;;
	esac
}

reset_all() {
	local n
	for n in "$DP" "$DP_OC"; do reset dp "$n"; done
	for n in "$CP" "$CP_OC"; do reset cli "$n"; done
}

# ---------------------------------------------------------------------------------------------
# measure DIR: everything that runs podman, as the user whose podman is measured
# ---------------------------------------------------------------------------------------------

check_prereqs() {
	local missing=()
	local t
	for t in hyperfine podman jq git awk; do
		command -v "$t" >/dev/null || missing+=("$t")
	done
	[ ${#missing[@]} -eq 0 ] ||
		die "missing tools: ${missing[*]} (Debian: apt-get install ${missing[*]})"
	[ -x "$BIN" ] || die "$BIN is missing: run 'make build' first"
	[ -x "$CLI" ] || die "$CLI is missing or not executable"
	if ! [[ "$RUNS" =~ ^[0-9]+$ ]] || [ "$RUNS" -lt 7 ]; then
		die "DEVAIPOD_BENCH_RUNS must be a number >= 7, not $RUNS"
	fi
	podman info >/dev/null 2>&1 || die "podman does not work for $(id -un): see 'podman info'"
	local img
	for img in "$IMAGE" "$HELPER_IMAGE"; do
		podman image exists "$img" ||
			die "image $img is not in $(id -un)'s podman storage: run 'make images' (as root: hack/as-test-user make images)"
	done
}

# make_fixture DIR: a git repository of $FILES small text files in three commits, with an origin
# remote (never contacted) so that both tools set it in the workspace copy.
make_fixture() {
	local dir=$1 i
	mkdir -p "$dir"
	git -C "$dir" init -q -b main
	git -C "$dir" remote add origin https://git.example.test/bench/fixture.git
	local gitc=(git -C "$dir" -c user.name=bench -c user.email=bench@example.test -c commit.gpgsign=false)
	for ((i = 0; i < 40; i++)); do mkdir -p "$dir/src/pkg$i"; done
	# files [from, to): 60 lines of about 65 bytes each
	gen() {
		awk -v dir="$dir" -v from="$1" -v to="$2" 'BEGIN {
			for (i = from; i < to; i++) {
				f = dir "/src/pkg" (i % 40) "/f" i ".txt"
				for (l = 1; l <= 60; l++) printf "file %d line %d: the quick brown fox jumps over the dog\n", i, l > f
				close(f)
			}
		}'
	}
	gen 0 $((FILES / 2))
	"${gitc[@]}" add -A
	"${gitc[@]}" commit -q -m "first half"
	gen $((FILES / 2)) "$FILES"
	printf '# fixture\nA repository for hack/bench.sh.\n' >"$dir/README.md"
	"${gitc[@]}" add -A
	"${gitc[@]}" commit -q -m "second half"
	printf 'changed\n' >>"$dir/README.md"
	"${gitc[@]}" commit -q -am "third"
}

# machine_facts: key=value lines about the host, podman and the tools.
machine_facts() {
	printf 'date=%s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
	printf 'uname=%s\n' "$(uname -srmo)"
	printf 'cpu=%s\n' "$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
	printf 'nproc=%s\n' "$(nproc)"
	printf 'mem=%s\n' "$(awk '/^MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
	printf 'podman=%s\n' "$(podman version --format '{{.Client.Version}}')"
	podman info --format 'rootless={{.Host.Security.Rootless}}
driver={{.Store.GraphDriverName}}
runtime={{.Host.OCIRuntime.Name}}
cgroups={{.Host.CgroupsVersion}}
network={{.Host.NetworkBackend}}'
	printf 'hyperfine=%s\n' "$(hyperfine --version | awk '{print $2}')"
	printf 'devaipod=%s\n' "$("$BIN" version)"
	printf 'user=%s\n' "$(id -un)"
}

# api_service: make sure devaipod talks to an already running podman service, as it does on a
# host with podman.socket; start one for this run if there is none (devaipod would otherwise
# start and stop one inside every command, which is not what is being compared).
api_service() {
	local sock=${XDG_RUNTIME_DIR:-/run/user/$(id -u)}/podman/podman.sock
	if [ -n "${CONTAINER_HOST:-}" ]; then
		BENCH_SERVICE_DESC="the podman service at CONTAINER_HOST ($CONTAINER_HOST), already running"
		return
	fi
	if [ -S "$sock" ] && "$BIN" list -q >/dev/null 2>&1; then
		BENCH_SERVICE_DESC="the user's podman service ($sock), already running, as with podman.socket"
		return
	fi
	local dir
	dir=$(mktemp -d "${TMPDIR:-/tmp}/bench-podman.XXXXXX")
	podman system service --time=0 "unix://$dir/podman.sock" >/dev/null 2>&1 &
	BENCH_SERVICE_PID=$!
	BENCH_SERVICE_DIR=$dir
	export CONTAINER_HOST=unix://$dir/podman.sock
	local i
	for ((i = 0; i < 100; i++)); do
		[ -S "$dir/podman.sock" ] && break
		sleep 0.1
	done
	[ -S "$dir/podman.sock" ] || die "podman system service did not start"
	BENCH_SERVICE_DESC="a podman service that bench.sh started for this run (none was running)"
}

# phases_dp OUT: one instrumented devaipod up: ms from start to each progress line, and to exit.
phases_dp() {
	local t0 line
	reset dp "$DP"
	t0=$EPOCHREALTIME
	{
		"$BIN" --config "$BENCH_WORK/standin.toml" up --name "$DP" "$BENCH_FIXTURE" 2>&1 >/dev/null |
			while IFS= read -r line; do
				printf '%s\t%s\n' "$EPOCHREALTIME" "$line"
			done
		printf '%s\t%s\n' "$EPOCHREALTIME" "exit"
	} | awk -F'\t' -v t0="$t0" -v fx="$BENCH_FIXTURE" '
		{
			t = ($1 - t0) * 1000; s = $2
			sub(/\.\.\.$/, "", s)
			if (index(s, fx)) s = substr(s, 1, index(s, fx) - 1) "FIXTURE" substr(s, index(s, fx) + length(fx))
			print int(t + 0.5) "\t" s
		}' >"$1"
}

# phases_cli OUT: one instrumented cli-pod up: the start time of every command it runs (xtrace).
phases_cli() {
	local t0 t1 trace
	reset cli "$CP"
	trace=$(mktemp)
	t0=$EPOCHREALTIME
	CLI_POD_AGENT_CMD=$STANDIN_CMD PS4='+	${EPOCHREALTIME}	' bash -x "$CLI" up "$BENCH_FIXTURE" "$CP" >/dev/null 2>"$trace"
	t1=$EPOCHREALTIME
	printf '+\t%s\texit\n' "$t1" >>"$trace"
	# The podman commands (top level) and the host git ones (in $(...)), as "ms<TAB>step".
	awk -F'\t' -v t0="$t0" '
		($1 == "+" || ($1 == "++" && $3 ~ /^git /)) && NF >= 3 {
			t = ($2 - t0) * 1000
			split($3, w, " ")
			step = ""
			if (w[1] == "podman") {
				step = "podman " w[2]
				if (w[2] == "volume" || w[2] == "pod") step = step " " w[3]
			} else if (w[1] == "git") step = "git (host)"
			else if ($3 == "exit") step = "exit"
			if (step != "") print int(t + 0.5) "\t" step
		}' "$trace" >"$1"
	rm -f "$trace"
}

# q ARGS: one command line for hyperfine -N (which splits it like a shell would).
q() { printf '%q ' "$@"; }

measure() {
	local out=$1
	check_prereqs
	BENCH_WORK=$(mktemp -d "${TMPDIR:-/tmp}/devaipod-bench.XXXXXX")
	export BENCH_WORK BENCH_FIXTURE=$BENCH_WORK/fixture
	BENCH_SERVICE_PID=
	BENCH_SERVICE_DIR=
	BENCH_SERVICE_DESC=
	local start=$SECONDS
	cleanup() {
		local rc=$?
		trap - EXIT INT TERM
		reset_all 2>/dev/null || rc=1
		if [ -n "$BENCH_SERVICE_PID" ]; then
			kill "$BENCH_SERVICE_PID" 2>/dev/null || true
			wait "$BENCH_SERVICE_PID" 2>/dev/null || true
			rm -rf "$BENCH_SERVICE_DIR"
		fi
		rm -rf "$BENCH_WORK"
		exit "$rc"
	}
	trap cleanup EXIT
	trap 'exit 130' INT TERM

	printf '[agent]\ncommand = ["busybox", "httpd", "-f", "-p", "127.0.0.1:4096", "-h", "/tmp"]\n' >"$BENCH_WORK/standin.toml"
	: >"$BENCH_WORK/default.toml"
	say "making the fixture repository ($FILES files)..."
	make_fixture "$BENCH_FIXTURE"
	api_service
	{
		machine_facts
		printf 'service=%s\n' "$BENCH_SERVICE_DESC"
		printf 'fixture=%s files, %s, %s commits\n' "$FILES" \
			"$(du -sh --exclude=.git "$BENCH_FIXTURE" | awk '{print $1}')" \
			"$(git -C "$BENCH_FIXTURE" rev-list --count HEAD)"
		printf 'runs=%s\n' "$RUNS"
		printf 'load_before=%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
	} >"$out/machine.txt"
	reset_all

	local fx=$BENCH_FIXTURE st=$BENCH_WORK/standin.toml df=$BENCH_WORK/default.toml
	local -a args=(
		-N --runs "$RUNS" --warmup 1 --export-json "$out/hyperfine.json" --style basic
		--cleanup "$(q "$SELF" _reset-all)"
		-n "devaipod up" --prepare "$(q "$SELF" _reset dp "$DP")"
		"$(q "$BIN" --config "$st" up -q --name "$DP" "$fx")"
		-n "cli-pod up" --prepare "$(q "$SELF" _reset cli "$CP")"
		"$(q env "CLI_POD_AGENT_CMD=$STANDIN_CMD" "$CLI" up "$fx" "$CP")"
		-n "devaipod delete" --prepare "$(q "$SELF" _build dp "$DP" standin)"
		"$(q "$BIN" delete -q "$DP")"
		-n "cli-pod delete" --prepare "$(q "$SELF" _build cli "$CP" standin)"
		"$(q "$CLI" delete "$CP")"
	)
	if [ "$OPENCODE" = 1 ]; then
		args+=(
			-n "devaipod up (opencode)" --prepare "$(q "$SELF" _reset dp "$DP_OC")"
			"$(q "$BIN" --config "$df" up -q --name "$DP_OC" "$fx")"
			-n "cli-pod up (opencode)" --prepare "$(q "$SELF" _reset cli "$CP_OC")"
			"$(q "$CLI" up "$fx" "$CP_OC")"
		)
	fi
	say "hyperfine: $RUNS runs per variant, 1 warm-up..."
	timeout 480 hyperfine "${args[@]}" >&2 || die "hyperfine failed (see above)"

	say "instrumented runs (3 of each) for the per-step times..."
	local i
	for i in 1 2 3; do
		phases_dp "$out/phases-dp-$i.tsv"
		phases_cli "$out/phases-cli-$i.tsv"
	done
	reset_all

	say "start-up cost of the CLIs..."
	timeout 120 hyperfine -N --runs 15 --warmup 2 --style basic --export-json "$out/startup.json" \
		-n "podman version" "podman version" \
		-n "podman pod exists (a missing pod)" -i "$(q podman pod exists devaipod-bench-none)" \
		-n "devaipod version" "$(q "$BIN" version)" >&2 || die "hyperfine (start-up) failed"
	printf 'load_after=%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
	printf 'elapsed=%s\n' "$((SECONDS - start))" >>"$out/machine.txt"
}

# ---------------------------------------------------------------------------------------------
# render DIR DOC: docs/benchmarks.md from the results
# ---------------------------------------------------------------------------------------------

fact() { sed -n "s/^$1=//p" "$DIR/machine.txt" | head -n 1; }

# stat NAME FIELD: a hyperfine statistic in seconds ("" if that variant was not run).
stat() { jq -r --arg n "$1" --arg f "$2" '.results[] | select(.command == $n) | .[$f]' "$DIR/hyperfine.json"; }
ms() { awk -v s="$1" 'BEGIN { printf "%.0f", s * 1000 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# rows: one table row per variant that was run.
rows() {
	jq -r '.results[] | "| \(.command) | \(.median * 1000 | round) | \(.min * 1000 | round) | \(.max * 1000 | round) | \(.times | length) |"' "$DIR/hyperfine.json"
}

# phase_table KIND: median over the instrumented runs of the time each step took (from its start
# to the next step's start); a step that occurs several times in a run is added up.
phase_table() {
	awk -F'\t' '
		function median(a, n,    i, j, x) {
			for (i = 2; i <= n; i++) {
				x = a[i]
				for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]
				a[j + 1] = x
			}
			return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
		}
		function add(r, key, ms) {
			if (!(key in seen)) { seen[key] = 1; order[++k] = key }
			d[r, key] += ms
		}
		FNR == 1 { run++; prev = "(start-up, before the first step)"; pt = 0 }
		{
			add(run, prev, $1 - pt)
			prev = $2; pt = $1
			if ($2 == "exit") total[run] = $1
		}
		END {
			for (i = 1; i <= k; i++) {
				if (order[i] == "exit") continue
				for (r = 1; r <= run; r++) v[r] = d[r, order[i]] + 0
				printf "| %s | %d |\n", order[i], median(v, run) + 0.5
			}
			for (r = 1; r <= run; r++) v[r] = total[r]
			printf "| **total, to exit** | **%d** |\n", median(v, run) + 0.5
		}' "$DIR"/phases-"$1"-*.tsv
}

startup_ms() { ms "$(jq -r --arg n "$1" '.results[] | select(.command == $n) | .median' "$DIR/startup.json")"; }

render() {
	DIR=$1
	local doc=$2
	local up_dp up_cli del_dp del_cli up_ratio del_ratio verdict oc_dp oc_cli oc_line=""
	up_dp=$(stat "devaipod up" median)
	up_cli=$(stat "cli-pod up" median)
	del_dp=$(stat "devaipod delete" median)
	del_cli=$(stat "cli-pod delete" median)
	up_ratio=$(ratio "$up_dp" "$up_cli")
	del_ratio=$(ratio "$del_dp" "$del_cli")
	if awk -v r="$up_ratio" -v t="$TARGET" 'BEGIN { exit !(r <= t) }'; then
		verdict="**met**: devaipod's \`up\` takes ${up_ratio}× the CLI script's time (target ≤ ${TARGET}×)"
	else
		verdict="**not met**: devaipod's \`up\` takes ${up_ratio}× the CLI script's time (target ≤ ${TARGET}×)"
	fi
	oc_dp=$(stat "devaipod up (opencode)" median)
	oc_cli=$(stat "cli-pod up (opencode)" median)
	if [ -n "$oc_dp" ] && [ -n "$oc_cli" ]; then
		oc_line="| \`up\`, opencode as the agent | $(ms "$oc_dp") | $(ms "$oc_cli") | $(ratio "$oc_dp" "$oc_cli")× | (not the target: opencode's own start-up dominates) |"
	fi
	local pv pe dv
	pv=$(startup_ms "podman version")
	pe=$(startup_ms "podman pod exists (a missing pod)")
	dv=$(startup_ms "devaipod version")

	mkdir -p "$(dirname "$doc")"
	cat >"$doc" <<EOF
# Benchmarks

<!-- Written by hack/bench.sh (make bench). Do not edit by hand: rerun it. -->

devaipod drives podman through its REST API (the Go bindings). The Rust devaipod drives it by
running one \`podman\` process per step. This page measures what that choice is worth: the time of
\`devaipod up\` (to the agent answering) and \`devaipod delete\` against the **same pod** built and
removed by [hack/cli-pod.sh](../hack/cli-pod.sh), a script of plain \`podman\` CLI commands written
the Rust devaipod's way. **Target: \`up\` at most ${TARGET}× the CLI script's time.**

## Result

| | devaipod (ms, median) | CLI script (ms, median) | ratio | target |
|---|---:|---:|---:|---|
| \`up\`, stand-in agent | $(ms "$up_dp") | $(ms "$up_cli") | **${up_ratio}×** | ≤ ${TARGET}× |
| \`delete\` | $(ms "$del_dp") | $(ms "$del_cli") | ${del_ratio}× | |
$oc_line

Target: ${verdict}.

All variants (milliseconds, wall clock, $(fact runs) timed runs each after one warm-up):

| variant | median | min | max | runs |
|---|---:|---:|---:|---:|
$(rows)

## What is measured

- **The same pod on both sides.** cli-pod.sh creates what \`devaipod up --dry-run\` plans, flag for
  flag: pod \`devaipod-NAME\` sharing net, uts and ipc; volumes \`-workspace\`, \`-agent-home\` and
  \`-agent-sock\` (the last two owned by 1000:1000); a workspace container whose init is the helper
  (\`--forward\` to the agent's socket) and an agent container with \`--network none\`, a private ipc,
  \`--cap-drop ALL\`, \`no-new-privileges\`, \`--read-only\`, a 512 MB tmpfs on /tmp, user 1000:1000 and
  the helper as init (\`--expose\`); both mount the helper image at /opt/devaipod.
- **The repository gets in each tool's own way.** devaipod clones the checkout on the host and
  streams a tar archive into the workspace volume through the API. cli-pod.sh does what the Rust
  devaipod does: \`podman volume create\`, then an init container (\`podman run --rm\` of the default
  image with the checkout's \`.git\` mounted read-only) that runs \`git clone\`, \`git checkout\`,
  sets origin and \`chown -R 1000:1000\`. The fixture is a generated repository: $(fact fixture).
- **\`up\` ends when the agent answers through the workspace.** Both run one \`exec\` of
  \`devaipod-helper wait-http\` in the workspace (it polls every 200 ms inside the container), so
  both pay the same for readiness and the comparison is about driving podman. The Rust devaipod
  instead runs \`podman exec WORKSPACE sh -c 'curl ...'\` every 500 ms; that loop is in cli-pod.sh
  (\`CLI_POD_READY=poll\`) but not timed here, since it would only make the CLI side slower.
- **The agent is a stand-in** (\`busybox httpd\` on 127.0.0.1:4096, the same command on both sides)
  so that the agent's own start-up does not hide the cost of building the pod. The opencode rows
  use the real default agent (\`opencode serve\`) for both.
- **\`delete\`** removes a pod that the same tool has just built and whose agent answers:
  \`devaipod delete NAME\` (everything labelled for the pod, volumes included) against the Rust
  devaipod's \`podman pod rm -f\`, given \`-t 0\`, plus \`podman volume rm\` of the three volumes
  (which the Rust devaipod leaks).
- **Warm images, each run from nothing.** The images are in local storage; hyperfine's
  \`--prepare\` removes the previous run's pod (or, for \`delete\`, builds the pod) outside the
  timed part. devaipod talks to $(fact service).

## Machine

| | |
|---|---|
| date | $(fact date) |
| kernel | $(fact uname) |
| CPU | $(fact cpu), $(fact nproc) cores, $(fact mem) |
| podman | $(fact podman), rootless: $(fact rootless), storage driver: $(fact driver), runtime: $(fact runtime), cgroups $(fact cgroups), network: $(fact network) |
| devaipod | $(fact devaipod) |
| hyperfine | $(fact hyperfine) |
| load average (1, 5, 15 min) | before: $(fact load_before); after: $(fact load_after) |

The machine may be shared (other users' containers and tests): the load average says how busy it
was. Medians are used because they ignore the odd slow run.

## Where the time goes

Start-up cost of one process, before it does any work (median of 15 runs):

| command | ms |
|---|---:|
| \`podman version\` | $pv |
| \`podman pod exists\` (a pod that does not exist) | $pe |
| \`devaipod version\` | $dv |

Every step of the CLI script is a new \`podman\` process that pays this start-up (reading the
configuration, joining the rootless user namespace, opening the storage and its locks) before it
does anything; devaipod pays its own start-up once and then sends HTTP requests to a service
that is already running.

Each step of \`up\` with the stand-in agent, median of 3 instrumented runs (ms from the start of
the step to the start of the next; steps that occur several times are added up):

devaipod (the steps are its progress lines on stderr):

| step | ms |
|---|---:|
$(phase_table dp)

cli-pod.sh (the steps are the commands it runs):

| step | ms |
|---|---:|
$(phase_table cli)

## Reproduce

\`\`\`
make bench
\`\`\`

It needs hyperfine, jq, podman and the images (\`make images\`); this run took $(fact elapsed) s.
As root it measures as the unprivileged test user (hack/as-test-user). Knobs:
\`DEVAIPOD_BENCH_RUNS\` (default 9), \`DEVAIPOD_BENCH_OPENCODE=0\` (skip the opencode rows),
\`DEVAIPOD_BENCH_FILES\` (fixture size), \`DEVAIPOD_BENCH_DOC\` (where this page goes).
EOF
	say "wrote $doc"
	say "up: devaipod $(ms "$up_dp") ms, cli-pod $(ms "$up_cli") ms, ratio ${up_ratio} (target <= ${TARGET}); delete ratio ${del_ratio}"
}

# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------

main() {
	local dir rc=0
	if [ "$(id -u)" -eq 0 ]; then
		getent passwd "$TEST_USER" >/dev/null ||
			die "as root this measures as $TEST_USER, who does not exist: run hack/setup-host.sh"
		dir=$(mktemp -d "${TMPDIR:-/tmp}/devaipod-bench-results.XXXXXX")
		chown "$TEST_USER:" "$dir"
		"$REPO/hack/as-test-user" "$SELF" _measure "$dir" || rc=$?
	else
		dir=$(mktemp -d "${TMPDIR:-/tmp}/devaipod-bench-results.XXXXXX")
		"$SELF" _measure "$dir" || rc=$?
	fi
	if [ "$rc" -ne 0 ]; then
		[ "${DEVAIPOD_BENCH_KEEP:-0}" = 1 ] || rm -rf "$dir"
		die "measuring failed (exit $rc); $DOC is unchanged"
	fi
	local out=$DOC
	if ! { [ -e "$DOC" ] && [ -w "$DOC" ]; } && ! { [ ! -e "$DOC" ] && [ -w "$(dirname "$DOC")" ]; }; then
		out=$dir/benchmarks.md
		DEVAIPOD_BENCH_KEEP=1
	fi
	render "$dir" "$out"
	if [ "$out" != "$DOC" ]; then
		die "$(id -un) cannot write $DOC; the report is in $out (run hack/bench.sh as root, which measures as $TEST_USER and writes the doc itself, or set DEVAIPOD_BENCH_DOC)"
	fi
	if [ "${DEVAIPOD_BENCH_KEEP:-0}" = 1 ]; then
		say "raw results kept in $dir"
	else
		rm -rf "$dir"
	fi
}

case ${1:-} in
"") main ;;
_measure) measure "$2" ;;
_reset) reset "$2" "$3" ;;
_build) build "$2" "$3" "$4" ;;
_reset-all) reset_all ;;
-h | --help) sed -n '2,25p' "$SELF" | sed 's/^# \{0,1\}//' ;;
*) die "unknown argument $1 (see hack/bench.sh --help)" ;;
esac

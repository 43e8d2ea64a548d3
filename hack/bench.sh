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
# then, outside hyperfine, a few instrumented runs that time each step of both, the start-up
# cost of the podman CLI and of the devaipod binary, and last a second hyperfine run (7 runs;
# see DEVAIPOD_BENCH_OPENCODE):
#   devaipod up / cli-pod up        with the real default agent (opencode serve)
# and last hack/bench-devcontainer.sh: devaipod against the devcontainer CLI (@devcontainers/cli,
# pinned, installed with npm when missing), interleaved rounds of `up` with the stand-in agent,
# time to a ready opencode, and `delete` (see that script); BENCH_DEVCONTAINER=0 skips it.
# Everything it creates is named devaipod-bench-* (or is the devcontainer CLI's container of the
# fixture) and removed on exit.
#
# Environment (DEVAIPOD_* variables pass through hack/as-test-user):
#   DEVAIPOD_BENCH_RUNS       timed runs per variant (default 9, at least 7; the opencode rows: 7)
#   DEVAIPOD_BENCH_OPENCODE   1: add the rows with opencode as the agent; 0: skip them; auto (default):
#                             add them if the rest took under 170 s, to stay under 5 minutes
#   DEVAIPOD_BENCH_FILES      files in the fixture repository (default 400, about 1.6 MB)
#   DEVAIPOD_BENCH_DOC        where to write the report (default docs/benchmarks.md)
#   DEVAIPOD_BENCH_BIN        the devaipod binary to measure (default bin/devaipod)
#   DEVAIPOD_BENCH_KEEP       1 to keep the raw results directory (its path is printed)
#   BENCH_DEVCONTAINER        0: skip the comparison with the devcontainer CLI (default 1; also
#                             DEVAIPOD_BENCH_DEVCONTAINER)
#   DEVAIPOD_BENCH_DC_RUNS    its interleaved rounds (default 5)
set -euo pipefail

SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)/$(basename "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SELF")/.." && pwd -P)
BIN=${DEVAIPOD_BENCH_BIN:-$REPO/bin/devaipod}
CLI=$REPO/hack/cli-pod.sh
DCB=$REPO/hack/bench-devcontainer.sh
DEVCONTAINER=${DEVAIPOD_BENCH_DEVCONTAINER:-${BENCH_DEVCONTAINER:-1}}
TEST_USER=devaipod-test
IMAGE=localhost/devaipod-default:latest
HELPER_IMAGE=localhost/devaipod-helper:latest
STANDIN_CMD='busybox httpd -f -p 127.0.0.1:4096 -h /tmp'
RUNS=${DEVAIPOD_BENCH_RUNS:-9}
OPENCODE=${DEVAIPOD_BENCH_OPENCODE:-auto}
# With OPENCODE=auto, the opencode rows run only if the rest took at most this many seconds.
OPENCODE_BUDGET=170
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
		"$BIN" delete --wait -q "$name" >/dev/null 2>&1 || true
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
	for t in hyperfine podman jq git awk python3; do
		command -v "$t" >/dev/null || missing+=("$t")
	done
	[ ${#missing[@]} -eq 0 ] ||
		die "missing tools: ${missing[*]} (Debian: apt-get install ${missing[*]})"
	[ -x "$BIN" ] || die "$BIN is missing or not executable: run 'make build' first"
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

# The instrumented runs turn each `up` into events, one line each:
#   start_ms <TAB> duration_ms <TAB> category <TAB> what
# (ms from the command's start). For devaipod the events are its podman API requests (seen by a
# logging proxy on the socket, proxy.py), the git commands it runs (seen by a wrapper first in
# PATH) and the gaps between them; for cli-pod.sh they are its commands (bash xtrace).

write_tracers() {
	cat >"$BENCH_WORK/proxy.py" <<'PY'
# proxy.py LISTEN TARGET LOG: forward a unix socket to the podman service's and log, per
# connection, when each request starts and when its answer starts:
# "conn<TAB>unix time<TAB>REQ|RESP<TAB>first line".
import socket, sys, threading, time

listen, target, log = sys.argv[1], sys.argv[2], sys.argv[3]
lock = threading.Lock()
out = open(log, "a", buffering=1)

def pump(src, dst, conn, kind, prefixes):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if data.startswith(prefixes):
                line = data.split(b"\r\n", 1)[0].decode("latin-1")
                with lock:
                    out.write("%d\t%.6f\t%s\t%s\n" % (conn, time.time(), kind, line))
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(listen)
srv.listen(64)
n = 0
while True:
    c, _ = srv.accept()
    n += 1
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.connect(target)
    methods = (b"GET ", b"POST ", b"PUT ", b"DELETE ", b"HEAD ")
    threading.Thread(target=pump, args=(c, u, n, "REQ", methods), daemon=True).start()
    threading.Thread(target=pump, args=(u, c, n, "RESP", (b"HTTP/1.",)), daemon=True).start()
PY
	mkdir -p "$BENCH_WORK/gitwrap"
	cat >"$BENCH_WORK/gitwrap/git" <<EOF
#!/usr/bin/env bash
# Logs "start<TAB>end<TAB>git SUBCOMMAND" for each git command, then exits like git.
s=\$EPOCHREALTIME
$(command -v git) "\$@"
rc=\$?
w=()
skip=0
for a in "\$@"; do
	if [ "\$skip" = 1 ]; then skip=0; continue; fi
	case \$a in
	-c | -C | --git-dir | --work-tree | --namespace | --config-env) skip=1 ;;
	-*) ;;
	*) w+=("\$a") ;;
	esac
done
sub=\${w[0]:-}
[ "\$sub" = remote ] && sub="remote \${w[1]:-}"
printf '%s\t%s\tgit %s\n' "\$s" "\$EPOCHREALTIME" "\$sub" >>"\$BENCH_GIT_LOG"
exit \$rc
EOF
	chmod +x "$BENCH_WORK/gitwrap/git"
}

# service_socket: the socket devaipod uses in the timed runs.
service_socket() {
	if [ -n "${CONTAINER_HOST:-}" ]; then
		echo "${CONTAINER_HOST#unix://}"
	else
		echo "${XDG_RUNTIME_DIR:-/run/user/$(id -u)}/podman/podman.sock"
	fi
}

# events_dp OUT [delete]: one instrumented devaipod up (or delete, of a pod built beforehand).
events_dp() {
	local out=$1 mode=${2:-up} t0 t1 plog=$BENCH_WORK/proxy.log glog=$BENCH_WORK/git.log psock=$BENCH_WORK/proxy.sock pp
	if [ "$mode" = delete ]; then
		build dp "$DP" standin
	else
		reset dp "$DP"
	fi
	: >"$plog"
	: >"$glog"
	rm -f "$psock"
	python3 "$BENCH_WORK/proxy.py" "$psock" "$(service_socket)" "$plog" &
	pp=$!
	for _ in $(seq 50); do [ -S "$psock" ] && break; sleep 0.05; done
	t0=$EPOCHREALTIME
	if [ "$mode" = delete ]; then
		"$BIN" --connection "unix://$psock" delete --wait -q "$DP" >/dev/null
	else
		BENCH_GIT_LOG=$glog PATH=$BENCH_WORK/gitwrap:$PATH \
			"$BIN" --connection "unix://$psock" --config "$BENCH_WORK/standin.toml" up -q --name "$DP" "$BENCH_FIXTURE" >/dev/null
	fi
	t1=$EPOCHREALTIME
	kill "$pp"
	wait "$pp" 2>/dev/null || true
	# Requests: pair each REQ with the next RESP on its connection. An answer "101 UPGRADED" is an
	# attached exec: it lasts until the next event starts.
	{
		awk -F'\t' '
			$3 == "REQ" { req[$1] = $2; what[$1] = $4; next }
			$3 == "RESP" && ($1 in req) {
				split($4, st, " ")
				w = what[$1]
				sub(/ HTTP\/1\..*$/, "", w)
				sub(/\?.*$/, "", w)
				sub(/\/v[0-9.]+\/libpod/, "", w)
				gsub(/\/exec\/[0-9a-f]+/, "/exec/ID", w)
				print req[$1] "\t" $2 "\t" w "\t" st[2]
				delete req[$1]
			}' "$plog"
		awk -F'\t' '{ print $1 "\t" $2 "\t" $3 "\t-" }' "$glog"
	} | sort -t"$(printf '\t')" -k1,1n | awk -F'\t' -v t0="$t0" -v t1="$t1" -v pod="devaipod-$DP" '
		function cat(w) {
			if (w ~ /^git (clone|checkout|for-each-ref|update-ref|remote set-url|remote remove)/) return "repository into the workspace volume"
			if (w ~ /^git /) return "resolve the source (host git)"
			if (w ~ /archive$/) return "repository into the workspace volume"
			if (w ~ /_ping|version|info|\/json$|exists$/ && w !~ /exec/) return "podman queries and checks"
			if (w ~ /create$/) return "create pod, volumes, containers"
			if (w ~ /^DELETE /) return "remove pod, containers, volumes"
			if (w ~ /start$/ && w ~ /pods/) return "start the pod"
			# The first exec is the wait for the agent; later ones are containment checks.
			if (w ~ /exec/) return (execs <= 1 ? "wait for the agent (exec wait-http)" : "containment checks (exec)")
			return "other podman calls"
		}
		function emit(s, e, c, w) {
			if (e - s < 0.0005 && c ~ /^devaipod itself/) return
			printf "%d\t%d\t%s\t%s\n", (s - t0) * 1000 + 0.5, (e - s) * 1000 + 0.5, c, w
		}
		{
			s = $1; e = $2; w = $3
			gsub(pod, "POD", w)
			if (n > 0) {
				if (pattached) pe = s
				emit(ps, pe, pc, pw (pattached ? " (attached)" : ""))
				if (s > pe) emit(pe, s, "devaipod itself (start-up, planning, clean-up)", "(in devaipod, no podman or git call)")
			} else if (s > t0) emit(t0, s, "devaipod itself (start-up, planning, clean-up)", "(process start, config, before the first call)")
			if (w ~ /^POST \/containers\/.*\/exec$/) execs++
			pc = cat(w)
			if (pc ~ /^containment/) w = "(check) " w
			n++; ps = s; pe = e; pw = w; pattached = ($4 == "101")
		}
		END {
			if (pattached) pe = t1
			emit(ps, pe, pc, pw)
			emit(pe, t1, "devaipod itself (start-up, planning, clean-up)", "(after the last answer, until exit)")
			printf "%d\t%d\ttotal\ttotal\n", 0, (t1 - t0) * 1000 + 0.5
		}' >"$out"
}

# events_cli OUT: one instrumented cli-pod.sh up: each command lasts until the next one starts.
events_cli() {
	local out=$1 t0 t1 trace
	reset cli "$CP"
	trace=$BENCH_WORK/xtrace.log
	t0=$EPOCHREALTIME
	CLI_POD_AGENT_CMD=$STANDIN_CMD PS4='+	${EPOCHREALTIME}	' bash -x "$CLI" up "$BENCH_FIXTURE" "$CP" >/dev/null 2>"$trace"
	t1=$EPOCHREALTIME
	# The podman commands (top level) and the host git ones (in $(...)).
	awk -F'\t' -v t0="$t0" -v t1="$t1" '
		function cat(w) {
			if (w ~ /^git/) return "resolve the source (host git)"
			if (w ~ /volume exists|podman rm/) return "podman queries and checks"
			if (w ~ /create/) return "create pod, volumes, containers"
			if (w ~ /podman run/) return "repository into the workspace volume"
			if (w ~ /pod start/) return "start the pod"
			if (w ~ /exec/) return "wait for the agent (exec wait-http)"
			return "the script itself"
		}
		function emit(s, e, c, w) { printf "%d\t%d\t%s\t%s\n", (s - t0) * 1000 + 0.5, (e - s) * 1000 + 0.5, c, w }
		($1 == "+" || ($1 == "++" && $3 ~ /^git /)) && NF >= 3 {
			split($3, a, " ")
			w = ""
			if (a[1] == "podman") {
				w = "podman " a[2]
				if (a[2] == "volume" || a[2] == "pod") w = w " " a[3]
			} else if (a[1] == "git") w = "git " (a[2] == "-C" ? a[4] : a[2])
			if (w == "") next
			if (n == 0) emit(t0, $2, "the script itself", "(bash start, before the first command)")
			else emit(ps, $2, cat(pw), pw)
			n++; ps = $2; pw = w
		}
		END {
			emit(ps, t1, cat(pw), pw)
			printf "%d\t%d\ttotal\ttotal\n", 0, (t1 - t0) * 1000 + 0.5
		}' "$trace" >"$out"
}

# q ARGS: one command line for hyperfine -N (which splits it like a shell would).
q() { printf '%q ' "$@"; }

# settle: wait until the exec sessions of earlier work are gone. podman 4.3 keeps two conmon
# processes per exec session for 300 s after it ends (--exit-delay); after a test run there are
# hundreds, and every podman call of either side then took 2 to 4 times as long.
settle() {
	local n i
	for ((i = 0; i < 70; i++)); do
		n=$(pgrep -c -u "$(id -u)" -f '^/usr/bin/conmon .*--exec ' || true)
		[ "${n:-0}" -le 20 ] && return 0
		[ "$i" -eq 0 ] && say "waiting for $n conmon processes of finished exec sessions to exit (podman keeps them for 300 s)..."
		sleep 5
	done
	say "warning: $n conmon processes of finished exec sessions are still there; the times will be slow"
}

measure() {
	local out=$1
	check_prereqs
	settle
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

	say "making the fixture repository ($FILES files)..."
	make_fixture "$BENCH_FIXTURE"
	# The pod the CLI script builds has no egress proxy: where devaipod has one, turn it off with
	# [network] mode = "none" (which gives the agent the same --network none), if this devaipod
	# knows that setting.
	local net=""
	printf '[network]\nmode = "none"\n' >"$BENCH_WORK/probe.toml"
	if "$BIN" --config "$BENCH_WORK/probe.toml" up --dry-run --name "$DP" "$BENCH_FIXTURE" >/dev/null 2>&1; then
		net=$(cat "$BENCH_WORK/probe.toml")
	fi
	printf '[agent]\nkind = "custom"\ncommand = ["busybox", "httpd", "-f", "-p", "127.0.0.1:4096", "-h", "/tmp"]\n\n%s\n' "$net" >"$BENCH_WORK/standin.toml"
	printf '%s\n' "$net" >"$BENCH_WORK/default.toml"
	"$BIN" --config "$BENCH_WORK/standin.toml" up --dry-run --name "$DP" "$BENCH_FIXTURE" >/dev/null ||
		die "devaipod rejects the benchmark's configuration (see above)"
	api_service
	{
		machine_facts
		printf 'service=%s\n' "$BENCH_SERVICE_DESC"
		printf 'fixture=%s files, %s, %s commits\n' "$FILES" \
			"$(du -sh --exclude=.git "$BENCH_FIXTURE" | awk '{print $1}')" \
			"$(git -C "$BENCH_FIXTURE" rev-list --count HEAD)"
		printf 'runs=%s\n' "$RUNS"
		if [ -n "$net" ]; then
			# shellcheck disable=SC2016 # Markdown
			printf 'dp_network=devaipod runs with `[network] mode = "none"`, so that its pod, like the CLI script'"'"'s, has no egress proxy and the agent has no network but loopback.\n'
		else
			printf 'dp_network=\n'
		fi
		printf 'load_before=%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
	} >"$out/machine.txt"
	reset_all

	local fx=$BENCH_FIXTURE st=$BENCH_WORK/standin.toml df=$BENCH_WORK/default.toml
	local -a args=(
		-N --runs "$RUNS" --warmup 1 --export-json "$out/hyperfine-main.json" --style basic
		--cleanup "$(q "$SELF" _reset-all)"
		-n "devaipod up" --prepare "$(q "$SELF" _reset dp "$DP")"
		"$(q "$BIN" --config "$st" up -q --name "$DP" "$fx")"
		-n "cli-pod up" --prepare "$(q "$SELF" _reset cli "$CP")"
		"$(q env "CLI_POD_AGENT_CMD=$STANDIN_CMD" "$CLI" up "$fx" "$CP")"
		-n "devaipod delete" --prepare "$(q "$SELF" _build dp "$DP" standin)"
		"$(q "$BIN" delete --wait -q "$DP")"
		-n "cli-pod delete" --prepare "$(q "$SELF" _build cli "$CP" standin)"
		"$(q "$CLI" delete "$CP")"
	)
	say "hyperfine: $RUNS runs per variant, 1 warm-up..."
	timeout --foreground 300 hyperfine "${args[@]}" >&2 || die "hyperfine failed (see above)"

	say "instrumented runs (3 of each) for the per-step times..."
	write_tracers
	local i
	for i in 1 2 3; do
		events_dp "$out/events-dp-$i.tsv"
		events_cli "$out/events-cli-$i.tsv"
		events_dp "$out/events-dpdel-$i.tsv" delete
	done
	reset_all

	say "start-up cost of the CLIs..."
	timeout --foreground 120 hyperfine -N --runs 15 --warmup 2 --style basic --export-json "$out/startup.json" \
		-n "podman version" "podman version" \
		-n "podman pod exists (a missing pod)" -i "$(q podman pod exists devaipod-bench-none)" \
		-n "devaipod version" "$(q "$BIN" version)" >&2 || die "hyperfine (start-up) failed"
	# The opencode rows come last and only if there is time for them (about 100 s on a busy
	# machine): the whole run stays under 5 minutes.
	local oc=$OPENCODE
	if [ "$oc" = auto ]; then
		if [ $((SECONDS - start)) -le "$OPENCODE_BUDGET" ]; then oc=1; else oc=skipped; fi
	fi
	printf 'opencode=%s\n' "$oc" >>"$out/machine.txt"
	if [ "$oc" = 1 ]; then
		say "hyperfine: opencode as the agent, 7 runs per variant, 1 warm-up..."
		timeout --foreground 200 hyperfine -N --runs 7 --warmup 1 --export-json "$out/hyperfine-opencode.json" --style basic \
			--cleanup "$(q "$SELF" _reset-all)" \
			-n "devaipod up (opencode)" --prepare "$(q "$SELF" _reset dp "$DP_OC")" \
			"$(q "$BIN" --config "$df" up -q --name "$DP_OC" "$fx")" \
			-n "cli-pod up (opencode)" --prepare "$(q "$SELF" _reset cli "$CP_OC")" \
			"$(q "$CLI" up "$fx" "$CP_OC")" >&2 || die "hyperfine (opencode) failed (see above)"
		jq -s '{results: (map(.results) | add)}' "$out/hyperfine-main.json" "$out/hyperfine-opencode.json" >"$out/hyperfine.json"
	else
		[ "$oc" = skipped ] && say "skipping the opencode rows: $((SECONDS - start)) s have passed (budget ${OPENCODE_BUDGET} s)"
		cp "$out/hyperfine-main.json" "$out/hyperfine.json"
	fi
	if [ "$DEVCONTAINER" = 0 ]; then
		say "skipping the comparison with the devcontainer CLI (BENCH_DEVCONTAINER=0)"
		mkdir -p "$out/devcontainer"
		: >"$out/devcontainer/skipped"
	else
		say "against the devcontainer CLI..."
		timeout --foreground 900 "$DCB" measure "$out/devcontainer" "$BIN" "$fx" "$st" "$df" ||
			die "the comparison with the devcontainer CLI failed (see above; BENCH_DEVCONTAINER=0 skips it)"
	fi
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

# noise_note: a sentence on variants with runs far slower than their median, if any.
noise_note() {
	local slow
	slow=$(jq -r '[.results[] | select(.max > 2 * .median) | "\(.command) (max \(.max * 1000 | round) ms)"] | join(", ")' "$DIR/hyperfine.json")
	[ -z "$slow" ] && return 0
	printf '\nSome runs took more than twice the median: %s. The median ignores them; the load\n' "$slow"
	printf 'average below says how busy the machine was.\n'
}

# rows: one table row per variant that was run.
rows() {
	jq -r '.results[] | "| \(.command) | \(.median * 1000 | round) | \(.min * 1000 | round) | \(.max * 1000 | round) | \(.times | length) |"' "$DIR/hyperfine.json"
}

# The median function for the tables below (mawk has no asort).
AWK_MEDIAN='
	function median(a, n,    i, j, x) {
		if (n == 0) return 0
		for (i = 2; i <= n; i++) {
			x = a[i]
			for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]
			a[j + 1] = x
		}
		return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}'

# step_table KIND: per step ("what"), how many times it ran and its total time, median over the
# instrumented runs; in the order of the first run.
step_table() {
	awk -F'\t' "$AWK_MEDIAN"'
		FNR == 1 { run++ }
		$3 == "total" { total[run] = $2; next }
		{
			w = $4
			if (!(w in seen)) { seen[w] = 1; order[++k] = w; catg[w] = $3 }
			d[run, w] += $2; c[run, w]++
		}
		END {
			for (i = 1; i <= k; i++) {
				w = order[i]
				for (r = 1; r <= run; r++) { v[r] = d[r, w] + 0; u[r] = c[r, w] + 0 }
				m = median(v, run); n = median(u, run)
				if (m < 3 && w ~ /^\(in devaipod/) continue
				printf "| %s | %s | %d |\n", w, (n == 1 ? "" : "×" n), m + 0.5
			}
			for (r = 1; r <= run; r++) v[r] = total[r]
			printf "| **total** | | **%d** |\n", median(v, run) + 0.5
		}' "$DIR"/events-"$1"-*.tsv
}

# category_table: both tools side by side, per category, median over the instrumented runs.
category_table() {
	awk -F'\t' "$AWK_MEDIAN"'
		FNR == 1 { if (FILENAME ~ /events-dp-/) { t = "dp"; r = ++runs["dp"] } else { t = "cli"; r = ++runs["cli"] } }
		$3 == "total" { total[t, r] = $2; next }
		{
			cg = $3
			if (cg ~ /^devaipod itself|^the script itself/) cg = "the tool itself (start-up, work between podman calls, clean-up)"
			if (!(cg in seen)) { seen[cg] = 1; order[++k] = cg }
			d[t, r, cg] += $2
		}
		END {
			for (i = 1; i <= k; i++) {
				cg = order[i]
				for (r = 1; r <= runs["dp"]; r++) v[r] = d["dp", r, cg] + 0
				a = median(v, runs["dp"])
				for (r = 1; r <= runs["cli"]; r++) v[r] = d["cli", r, cg] + 0
				b = median(v, runs["cli"])
				printf "| %s | %d | %d |\n", cg, a + 0.5, b + 0.5
			}
			for (r = 1; r <= runs["dp"]; r++) v[r] = total["dp", r]
			a = median(v, runs["dp"])
			for (r = 1; r <= runs["cli"]; r++) v[r] = total["cli", r]
			b = median(v, runs["cli"])
			printf "| **total** | **%d** | **%d** |\n", a + 0.5, b + 0.5
		}' "$DIR"/events-dp-*.tsv "$DIR"/events-cli-*.tsv
}

# step_ms KIND REGEX: median over the instrumented runs of the summed time of the steps matching
# REGEX; with a third argument "count", of their number instead.
step_ms() {
	awk -F'\t' -v re="$2" -v what="${3:-ms}" "$AWK_MEDIAN"'
		FNR == 1 { run++ }
		$3 != "total" && $4 ~ re { d[run] += $2; c[run]++ }
		END {
			for (r = 1; r <= run; r++) v[r] = (what == "count" ? c[r] : d[r]) + 0
			printf "%d", median(v, run) + 0.5
		}' "$DIR"/events-"$1"-*.tsv
}

# top_steps KIND N: the N slowest steps (medians), as "what (ms ms)" joined by commas.
top_steps() {
	step_table "$1" | grep -v '\*\*total' | awk -F' [|] ' '{ gsub(/^[|] /, "", $1); gsub(/ [|]$/, "", $3); print $3 "\t" $1 }' |
		sort -t"$(printf '\t')" -k1,1nr | head -n "$2" | awk -F'\t' '{ printf "%s`%s` (%d ms)", (NR > 1 ? ", " : ""), $2, $1 }'
}

# notes: a few sentences on where the time goes, from the numbers of this run.
# shellcheck disable=SC2016 # the backquotes are Markdown
notes() {
	local vi put run others n_others
	printf -- '- The slowest steps of devaipod'"'"'s `up`: %s.\n' "$(top_steps dp 4)"
	vi=$(step_ms dp '^GET /(version|info)$')
	if [ "$vi" -ge 100 ]; then
		printf -- '- %s ms go to `GET /version` and `GET /info`. podman 4.3'"'"'s service answers both by\n' "$vi"
		printf '  collecting host information: it runs `slirp4netns`, `runc` and `conmon` and asks `dpkg-query` for\n'
		printf '  their packages (seen with strace on the service). The service'"'"'s version is also in the\n'
		printf '  headers of `GET /_ping` (`Libpod-Api-Version`), which takes under a millisecond.\n'
	fi
	put=$(step_ms dp 'archive$')
	printf -- '- Copying the repository into the volume with `PUT .../archive` takes %s ms; the host clone\n' "$put"
	printf '  before it (`git clone` and `git checkout`) %s ms.\n' "$(step_ms dp '^git (clone|checkout)')"
	run=$(step_ms cli '^podman run$')
	others=$(step_ms cli '^podman ' )
	n_others=$(step_ms cli '^podman ' count)
	local tail checks
	checks=$(step_ms dp '^\(check\) POST /containers/.*/exec$' count)
	if [ "$checks" -gt 0 ]; then
		printf -- '- After the agent answers, devaipod runs %s containment checks (one `exec` each), %s ms in\n' \
			"$checks" "$(step_ms dp '^\(check\)')"
		printf '  all; the CLI script, like the Rust devaipod, checks nothing.\n'
	fi
	tail=$(step_ms dp '^\(after the last answer')
	if [ "$tail" -ge 30 ]; then
		printf -- '- devaipod takes %s ms from the agent'"'"'s answer to its exit, which includes deleting its\n' "$tail"
		printf '  temporary host clone.\n'
	fi
	printf -- '- In the CLI script, the init container (`podman run`: create, start, `git clone` inside,\n'
	printf '  remove) takes %s ms. Its other %s podman commands take %s ms together; each of them first\n' \
		"$run" "$((n_others - 1))" "$((others - run))"
	printf '  pays about %s ms to start the `podman` process.\n' "$(startup_ms "podman pod exists (a missing pod)")"
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
	elif [ "$(fact opencode)" = skipped ]; then
		oc_line=$'\n'"The rows with opencode as the agent were skipped: the rest of the run took over ${OPENCODE_BUDGET} s (a busy machine), and they would have taken it past 5 minutes. \`DEVAIPOD_BENCH_OPENCODE=1\` forces them."
	fi
	local pv pe dv
	pv=$(startup_ms "podman version")
	pe=$(startup_ms "podman pod exists (a missing pod)")
	dv=$(startup_ms "devaipod version")

	mkdir -p "$(dirname "$doc")"
	cat >"$doc" <<EOF
# Benchmarks

<!-- Written by hack/bench.sh (make bench). Do not edit by hand: rerun it. -->

The egress proxy against squid and no proxy (tunnels per second, bulk throughput, latency,
memory, a 10-minute soak) is on its own page: [benchmarks-proxy.md](benchmarks-proxy.md).
The gator's object reader against go-git's is on [benchmarks-gator.md](benchmarks-gator.md).

devaipod drives podman through its REST API (the Go bindings). The Rust devaipod drives it by
running one \`podman\` process per step. This page measures what that choice is worth: the time of
\`devaipod up\` (to the agent answering) and \`devaipod delete\` against the **same pod** built and
removed by [hack/cli-pod.sh](../hack/cli-pod.sh), a script of plain \`podman\` CLI commands written
the Rust devaipod's way. **Target: \`up\` at most ${TARGET}× the CLI script's time.**

## Result

| | devaipod (ms, median) | CLI script (ms, median) | ratio | target |
|---|---:|---:|---:|---|
| \`up\`, stand-in agent | $(ms "$up_dp") | $(ms "$up_cli") | **${up_ratio}×** | ≤ ${TARGET}× |
| \`delete --wait\` | $(ms "$del_dp") | $(ms "$del_cli") | ${del_ratio}× | |
$oc_line

Target: ${verdict}.

$("$DCB" render "$DIR/devcontainer")

All variants (milliseconds, wall clock; each variant had one warm-up run before the timed runs):

| variant | median | min | max | runs |
|---|---:|---:|---:|---:|
$(rows)
$(noise_note)

## What is measured

- **The same pod on both sides.** cli-pod.sh creates what \`devaipod up --dry-run\` plans, flag for
  flag: pod \`devaipod-NAME\` sharing net, uts and ipc; volumes \`-workspace\`, \`-agent-home\` and
  \`-agent-sock\` (the last two owned by 1000:1000); a workspace container whose init is the helper
  (\`--forward\` to the agent's socket) and an agent container with \`--network none\`, a private ipc,
  \`--cap-drop ALL\`, \`no-new-privileges\`, \`--read-only\`, a 512 MB tmpfs on /tmp, user 1000:1000 and
  the helper as init (\`--expose\`); both mount the helper image at /opt/devaipod.
  $(fact dp_network)
  devaipod's pod does more than the script's, and pays for it in the same run: the agent's
  protected paths and masked files are bind mounts, the agent runs under devaipod's seccomp
  profile, the repository is scanned for them first, \`up\` runs its containment checks (egress and
  the fast verify battery) in the agent before it reports ready, and the opencode rows give the
  agent's server a password that \`up\` uses to wait for \`/global/health\`.
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
  \`devaipod delete --wait NAME\` (everything labelled for the pod, volumes included) against the Rust
  devaipod's \`podman pod rm -f\`, given \`-t 0\`, plus \`podman volume rm\` of the three volumes
  (which the Rust devaipod leaks). \`--wait\`, so that both do the same work: without it
  \`delete\` returns once the agent is killed and removes the rest in the background (timed in the
  next section).
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

$(notes)

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

Each step of \`up\` with the stand-in agent, from 3 instrumented runs of each (medians). For
devaipod the steps are its podman API requests, seen by a logging proxy on the API socket, and
the git commands it runs on the host, seen by a wrapper; for cli-pod.sh they are its commands
(bash xtrace). The proxy and the wrapper add a few milliseconds, so these totals are a little
higher than the hyperfine medians above.

| where the time goes | devaipod (ms) | CLI script (ms) |
|---|---:|---:|
$(category_table)

devaipod, step by step (×N: the step ran N times; the time is their sum):

| step | | ms |
|---|---|---:|
$(step_table dp)

cli-pod.sh, step by step:

| step | | ms |
|---|---|---:|
$(step_table cli)

\`devaipod delete --wait\`, step by step (3 instrumented runs, medians):

| step | | ms |
|---|---|---:|
$(step_table dpdel)

## Reproduce

\`\`\`
make bench
\`\`\`

It needs hyperfine, jq, python3, podman and the images (\`make images\`); this run took $(fact elapsed) s.
\`hack/bench.sh\` run as root measures as the unprivileged test user (hack/as-test-user) and writes
this page as root; run as another user, it measures as that user and needs write access to
docs/. Knobs:
\`DEVAIPOD_BENCH_RUNS\` (default 9), \`DEVAIPOD_BENCH_OPENCODE\` (1: always measure the opencode
rows, 0: never; by default only when the rest took under ${OPENCODE_BUDGET} s),
\`DEVAIPOD_BENCH_FILES\` (fixture size), \`DEVAIPOD_BENCH_DOC\` (where this page goes),
\`DEVAIPOD_BENCH_BIN\` (the devaipod binary to measure), \`BENCH_DEVCONTAINER=0\` (skip the comparison
with the devcontainer CLI; it installs \`@devcontainers/cli\` with npm, pinned, into the measuring
user's \`~/.cache/devaipod-bench\` when missing), \`DEVAIPOD_BENCH_DC_RUNS\` (its rounds, default 5).
EOF
	say "wrote $doc"
	say "up: devaipod $(ms "$up_dp") ms, cli-pod $(ms "$up_cli") ms, ratio ${up_ratio} (target <= ${TARGET}); delete ratio ${del_ratio}"
	local l
	"$DCB" summary "$DIR/devcontainer" | while IFS= read -r l; do say "against the devcontainer CLI: $l"; done
}

# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------

# writable FILE: FILE can be written (created, if it does not exist) by this user.
writable() {
	if [ -e "$1" ]; then [ -w "$1" ]; else [ -w "$(dirname "$1")" ]; fi
}

main() {
	local dir rc=0
	# Fail now rather than after minutes of measuring.
	writable "$DOC" || die "$(id -un) cannot write $DOC: run hack/bench.sh as root (it measures as $TEST_USER and writes the page itself), or set DEVAIPOD_BENCH_DOC"
	dir=$(mktemp -d "${TMPDIR:-/tmp}/devaipod-bench-results.XXXXXX")
	# as-test-user passes DEVAIPOD_* variables only.
	export DEVAIPOD_BENCH_DEVCONTAINER=$DEVCONTAINER
	if [ "$(id -u)" -eq 0 ]; then
		getent passwd "$TEST_USER" >/dev/null ||
			die "as root this measures as $TEST_USER, who does not exist: run hack/setup-host.sh"
		chown "$TEST_USER:" "$dir"
		"$REPO/hack/as-test-user" "$SELF" _measure "$dir" || rc=$?
	else
		"$SELF" _measure "$dir" || rc=$?
	fi
	if [ "$rc" -ne 0 ]; then
		[ "${DEVAIPOD_BENCH_KEEP:-0}" = 1 ] || rm -rf "$dir"
		die "measuring failed (exit $rc); $DOC is unchanged"
	fi
	render "$dir" "$DOC"
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
-h | --help) sed -n '2,/^set -e/p' "$SELF" | sed '$d; s/^# \{0,1\}//' ;;
*) die "unknown argument $1 (see hack/bench.sh --help)" ;;
esac

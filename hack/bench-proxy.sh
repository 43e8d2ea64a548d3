#!/usr/bin/env bash
# hack/bench-proxy.sh: benchmark devaipod's egress proxy (devaipod-helper proxy) against squid (the
# Debian package, the Rust devaipod's choice) and against no proxy, side by side in one run on
# loopback with the same allowlist, measure what credential interception costs against a tunnel,
# then soak it; (re)write docs/benchmarks-proxy.md. `make bench` runs it.
#
#   hack/bench-proxy.sh              everything, with the 10-minute soak (about 15 minutes)
#   SOAK=30s hack/bench-proxy.sh     a quick run
#
# It builds hack/proxybench and cmd/devaipod-helper into a temporary directory, starts the test
# server (proxybench serve), devaipod's proxy and squid on 127.0.0.1, checks that both proxies
# allow and refuse the same requests, measures (proxybench run), stops squid, starts a second
# devaipod proxy with the test server's credential bound to $HOST:TLSPORT and measures an
# intercepted host against a tunnel to 127.0.0.1:TLSPORT, the same upstream (proxybench intercept,
# under a minute), soaks devaipod's proxy (proxybench soak) and writes the report (proxybench
# report). Every process it starts is stopped on exit. It talks to nothing but 127.0.0.1.
#
# squid: as root it is installed with apt-get if missing; otherwise it must be installed.
#
# Environment:
#   SOAK        soak duration, Go syntax (default 10m; 0 skips the soak)
#   CONC        concurrency levels (default 1,16,128)
#   ROUNDS      rounds per concurrency level (default 7)
#   DURATION    length of one measurement (default 1.5s), WARMUP before it (default 0.5s)
#   BULK_SIZE   bytes of the bulk transfer (default 1073741824), BULK_REPS per path (default 5)
#   INTERCEPT   0 skips the interception benchmark; INTERCEPT_CONC its keep-alive concurrency
#               levels (default 1,16), INTERCEPT_ROUNDS its rounds (default 9: a round's ratio
#               swings by 0.1 on a 2-CPU machine, and the verdict is their median)
#   DOC         the report to write (default docs/benchmarks-proxy.md)
#   KEEP        1: keep the temporary directory (raw JSON, logs) and print its path
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
SOAK=${SOAK:-10m}
CONC=${CONC:-1,16,128}
ROUNDS=${ROUNDS:-7}
DURATION=${DURATION:-1.5s}
WARMUP=${WARMUP:-0.5s}
BULK_SIZE=${BULK_SIZE:-1073741824}
BULK_REPS=${BULK_REPS:-5}
INTERCEPT=${INTERCEPT:-1}
INTERCEPT_CONC=${INTERCEPT_CONC:-1,16}
INTERCEPT_ROUNDS=${INTERCEPT_ROUNDS:-9}
DOC=${DOC:-$REPO/docs/benchmarks-proxy.md}
KEEP=${KEEP:-0}

die() {
	printf 'bench-proxy: error: %s\n' "$*" >&2
	exit 1
}
say() { printf 'bench-proxy: %s\n' "$*" >&2; }

START=$(date +%s)

# ------------------------------------------------------------------------------------------------
# prerequisites
# ------------------------------------------------------------------------------------------------
export PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || die "go not found (install Go 1.26 or newer)"
if ! command -v squid >/dev/null && [[ -x /usr/sbin/squid ]]; then
	export PATH=$PATH:/usr/sbin
fi
if ! command -v squid >/dev/null; then
	if [[ $(id -u) -eq 0 ]]; then
		say "installing squid (Debian package)"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q squid >/dev/null ||
			{ apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q squid >/dev/null; } ||
			die "apt-get install squid failed"
		# The package may start a system squid; this benchmark runs its own.
		if command -v systemctl >/dev/null && systemctl is-active --quiet squid 2>/dev/null; then
			systemctl stop squid || true
		elif [[ -x /etc/init.d/squid ]]; then
			/etc/init.d/squid stop >/dev/null 2>&1 || true
		fi
	else
		die "squid is not installed: run 'apt-get install squid' as root (or run this script as root, which installs it)"
	fi
fi
command -v squid >/dev/null || die "squid not found after installing it"
[[ $(uname -s) == Linux ]] || die "needs Linux (/proc)"

# The podman bindings' build tags, as in the Makefile.
export CGO_ENABLED=0
export GOFLAGS=${GOFLAGS:--tags=remote,exclude_graphdriver_btrfs,containers_image_openpgp -buildvcs=false}

TMP=$(mktemp -d /tmp/devaipod-bench-proxy.XXXXXX)
# squid drops root privileges to its own user: it must reach its directory.
chmod 755 "$TMP"
PIDS=()
cleanup() {
	local rc=$? pid
	for pid in "${PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	if [[ $KEEP == 1 ]]; then
		say "kept $TMP"
	else
		rm -rf "$TMP"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
trap 'say "failed: line $LINENO: $BASH_COMMAND"' ERR

# stop PID: stop one process started here, and forget it.
stop() {
	local pid=$1 keep=() p
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 50); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	for p in "${PIDS[@]}"; do
		[[ $p == "$pid" ]] || keep+=("$p")
	done
	PIDS=("${keep[@]}")
}

# wait_port PORT PID NAME: wait until 127.0.0.1:PORT accepts connections.
wait_port() {
	local port=$1 pid=$2 name=$3
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || die "$name exited; see $TMP (KEEP=1 keeps it)"
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	die "$name does not listen on 127.0.0.1:$port"
}

# ------------------------------------------------------------------------------------------------
# build
# ------------------------------------------------------------------------------------------------
# The revision of what is built and measured: taken now, since the tree may change during the
# run (and writing the report makes it dirty).
REVISION=$(git -C "$REPO" describe --tags --always --dirty 2>/dev/null || echo unknown)
say "building proxybench and devaipod-helper into $TMP"
(
	cd "$REPO"
	go build -o "$TMP/proxybench" ./hack/proxybench
	# As the Makefile builds bin/devaipod-helper.
	go build -trimpath -ldflags "-s -w" -o "$TMP/devaipod-helper" ./cmd/devaipod-helper
)
PB=$TMP/proxybench

# ------------------------------------------------------------------------------------------------
# start the test server and both proxies
# ------------------------------------------------------------------------------------------------
mkdir -p "$TMP/server"
"$PB" serve --dir "$TMP/server" 2>"$TMP/server.log" &
PIDS+=($!)
SERVER_PID=$!
for _ in $(seq 100); do
	[[ -s $TMP/server/server.json ]] && break
	kill -0 "$SERVER_PID" 2>/dev/null || die "the test server exited: $(cat "$TMP/server.log")"
	sleep 0.1
done
[[ -s $TMP/server/server.json ]] || die "the test server did not start"
json_int() { sed -n "s/.*\"$1\": *\([0-9]*\).*/\1/p" "$TMP/server/server.json"; }
json_str() { sed -n "s/.*\"$1\": *\"\([^\"]*\)\".*/\1/p" "$TMP/server/server.json"; }
TLS_PORT=$(json_int tls_port)
HTTP_PORT=$(json_int http_port)
HOST=localhost
say "test server: https 127.0.0.1:$TLS_PORT, http 127.0.0.1:$HTTP_PORT (as $HOST)"

mapfile -t PORTS < <("$PB" freeport 2)
[[ ${#PORTS[@]} -eq 2 ]] || die "no free ports"
DP_PORT=${PORTS[0]}
SQ_PORT=${PORTS[1]}

# The same allowlist for both: the two ports on localhost, and (devaipod's proxy refuses loopback
# addresses unless an address rule names them) on 127.0.0.1.
RULES=("$HOST:$TLS_PORT" "$HOST:$HTTP_PORT" "127.0.0.1:$TLS_PORT" "127.0.0.1:$HTTP_PORT")
ALLOW_ARGS=()
for r in "${RULES[@]}"; do
	ALLOW_ARGS+=(--allow "$r")
done

"$TMP/devaipod-helper" proxy --listen "tcp:127.0.0.1:$DP_PORT" --pod bench \
	--policy-file "$TMP/devaipod-policy.json" "${ALLOW_ARGS[@]}" \
	>"$TMP/devaipod-audit.log" 2>"$TMP/devaipod.log" &
PIDS+=($!)
DP_PID=$!
wait_port "$DP_PORT" "$DP_PID" "devaipod-helper proxy"
# The proxy restarts itself with proxy.RuntimeGODEBUG (see proxy/runtime.go); measure it as it runs.
grep -qz '^GODEBUG=.*schedtrace=' "/proc/$DP_PID/environ" ||
	die "devaipod's proxy runs without its GODEBUG setting (see proxy.RuntimeEnviron)"

mkdir -p "$TMP/squid"
chmod 777 "$TMP/squid"
cat >"$TMP/squid/squid.conf" <<EOF
http_port 127.0.0.1:$SQ_PORT
workers 1
pid_filename $TMP/squid/squid.pid
cache_log $TMP/squid/cache.log
access_log stdio:$TMP/squid/access.log
coredump_dir $TMP/squid
cache deny all
pinger_enable off
visible_hostname proxybench
shutdown_lifetime 1 seconds
acl bench_ports port $TLS_PORT $HTTP_PORT
acl bench_hosts dstdomain $HOST 127.0.0.1
http_access allow bench_ports bench_hosts
http_access deny all
EOF
squid -k parse -f "$TMP/squid/squid.conf" >"$TMP/squid/parse.log" 2>&1 ||
	die "squid rejects its configuration: $(tail -5 "$TMP/squid/parse.log")"
squid -N -f "$TMP/squid/squid.conf" >"$TMP/squid/stdout.log" 2>&1 &
PIDS+=($!)
SQ_PID=$!
wait_port "$SQ_PORT" "$SQ_PID" "squid"
say "devaipod's proxy: 127.0.0.1:$DP_PORT (pid $DP_PID); squid: 127.0.0.1:$SQ_PORT (pid $SQ_PID)"

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

# ------------------------------------------------------------------------------------------------
# measure
# ------------------------------------------------------------------------------------------------
say "measuring: concurrency $CONC, $ROUNDS rounds of $DURATION, bulk $BULK_SIZE bytes x $BULK_REPS"
"$PB" run --server "$TMP/server" --host "$HOST" \
	--proxy "devaipod=127.0.0.1:$DP_PORT@$DP_PID" --proxy "squid=127.0.0.1:$SQ_PORT@$SQ_PID" \
	--conc "$CONC" --rounds "$ROUNDS" --duration "$DURATION" --warmup "$WARMUP" \
	--bulk-size "$BULK_SIZE" --bulk-reps "$BULK_REPS" --out "$TMP/run.json"

SQUID_VERSION=$(squid -v | sed -n '1s/^Squid Cache: Version //p')
stop "$SQ_PID"

# The interception: a second devaipod proxy, the same rules plus the test server's credential
# bound to $HOST:$TLS_PORT (so CONNECT there is intercepted, and to 127.0.0.1:$TLS_PORT tunnelled),
# trusting the test server's CA upstream, as --upstream-ca does in a pod.
INTERCEPT_ARGS=()
CRED_ARGS=()
if [[ $INTERCEPT != 0 ]]; then
	CR_PORT=$("$PB" freeport)
	CRED_ARGS=(--credential "$(json_str credential_name)=$(json_str credential_placeholder)@$HOST:$TLS_PORT"
		--credential-dir "$(json_str credential_dir)" --upstream-ca "$TMP/server/ca.pem")
	"$TMP/devaipod-helper" proxy --listen "tcp:127.0.0.1:$CR_PORT" --pod bench-cred \
		--policy-file "$TMP/devaipod-cred-policy.json" "${ALLOW_ARGS[@]}" "${CRED_ARGS[@]}" \
		>"$TMP/devaipod-cred-audit.log" 2>"$TMP/devaipod-cred.log" &
	PIDS+=($!)
	CR_PID=$!
	wait_port "$CR_PORT" "$CR_PID" "devaipod-helper proxy with a credential"
	say "interception: devaipod's proxy with a credential on 127.0.0.1:$CR_PORT (pid $CR_PID); $HOST:$TLS_PORT intercepted, 127.0.0.1:$TLS_PORT tunnelled"
	"$PB" intercept --server "$TMP/server" --proxy "devaipod-cred=127.0.0.1:$CR_PORT@$CR_PID" \
		--intercept-host "$HOST" --tunnel-host 127.0.0.1 --conc "$INTERCEPT_CONC" --rounds "$INTERCEPT_ROUNDS" \
		--out "$TMP/intercept.json"
	stop "$CR_PID"
	INTERCEPT_ARGS=(--intercept "$TMP/intercept.json")
fi

SOAK_ARGS=()
if [[ $SOAK != 0 ]]; then
	say "soaking devaipod's proxy for $SOAK (bounded; it stops by itself)"
	"$PB" soak --server "$TMP/server" --host "$HOST" --proxy "devaipod=127.0.0.1:$DP_PORT@$DP_PID" \
		"${ALLOW_ARGS[@]}" --duration "$SOAK" --settle 95s --out "$TMP/soak.json"
	SOAK_ARGS=(--soak "$TMP/soak.json")
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ------------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------------
ELAPSED=$(($(date +%s) - START))
COMMAND="make bench"
SETTINGS=""
[[ $SOAK == 10m ]] || SETTINGS+="SOAK=$SOAK "
[[ $INTERCEPT == 1 ]] || SETTINGS+="INTERCEPT=$INTERCEPT "
[[ $INTERCEPT_CONC == 1,16 ]] || SETTINGS+="INTERCEPT_CONC=$INTERCEPT_CONC "
[[ $INTERCEPT_ROUNDS == 9 ]] || SETTINGS+="INTERCEPT_ROUNDS=$INTERCEPT_ROUNDS "
if [[ -n $SETTINGS ]]; then
	COMMAND="${SETTINGS}hack/bench-proxy.sh"
fi
mkdir -p "$(dirname "$DOC")"
# The report quotes squid's configuration with the temporary directory as $TMP.
sed "s|$TMP|\$TMP|g" "$TMP/squid/squid.conf" >"$TMP/squid.conf.shown"
"$PB" report --run "$TMP/run.json" "${SOAK_ARGS[@]}" "${INTERCEPT_ARGS[@]}" --out "$DOC" --squid-conf "$TMP/squid.conf.shown" \
	--info "date=$(date -u '+%Y-%m-%d %H:%M UTC')" \
	--info "uname=$(uname -srm)" \
	--info "nproc=$(nproc)" \
	--info "cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" \
	--info "memory=$(awk '/^MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)" \
	--info "go=$(go version | cut -d' ' -f3-)" \
	--info "squid=$SQUID_VERSION (Debian)" \
	--info "revision=$REVISION" \
	--info "command=$COMMAND" \
	--info "load_before=$LOAD_BEFORE" \
	--info "load_after=$LOAD_AFTER" \
	--info "elapsed=$((ELAPSED / 60)) min $((ELAPSED % 60)) s" \
	--info "devaipod_args=${ALLOW_ARGS[*]}" \
	--info "intercept_args=$(printf '%s' "${ALLOW_ARGS[*]} ${CRED_ARGS[*]}" | sed "s|$TMP|\$TMP|g")"
say "wrote ${DOC#"$REPO"/} in $((ELAPSED / 60)) min $((ELAPSED % 60)) s"
grep -A20 '^## Targets' "$DOC" | sed -n '3,/^$/p' >&2 || true

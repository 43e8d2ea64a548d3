#!/usr/bin/env bash
# hack/bench-scale.sh: many pods at once. Starts DEVAIPOD_SCALE_PODS (default 100) `devaipod up` of
# a stand-in agent at the same moment, waits for all of them, then deletes every pod that came up,
# again all at once, and writes docs/benchmarks-scale.md: how many succeeded, the wall time of each
# phase, the peak of the kernel key quota in use (/proc/key-users: every running container holds a
# key, runc's session keyring) and the memory the pods took. `make bench-scale` runs it; it is not
# part of `make test`.
#
#   hack/bench-scale.sh     as root: measures as the test user (hack/as-test-user), writes the
#                           page as root; as any other user: measures and writes the page itself
#
# Everything it creates is named devaipod-scale-* (pods scale-001 ...) and removed on exit, also
# on failure or ^C.
#
# Environment (DEVAIPOD_* variables pass through hack/as-test-user):
#   DEVAIPOD_SCALE_PODS   how many pods (default 100)
#   DEVAIPOD_SCALE_DOC    where to write the report (default docs/benchmarks-scale.md)
#   DEVAIPOD_BENCH_BIN    the devaipod binary to measure (default bin/devaipod)
#   DEVAIPOD_BENCH_KEEP   1 to keep the raw results directory (its path is printed)
set -euo pipefail

SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)/$(basename "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SELF")/.." && pwd -P)
BIN=${DEVAIPOD_BENCH_BIN:-$REPO/bin/devaipod}
PODS=${DEVAIPOD_SCALE_PODS:-100}
DOC=${DEVAIPOD_SCALE_DOC:-$REPO/docs/benchmarks-scale.md}
TEST_USER=devaipod-test
IMAGES=(localhost/devaipod-default:latest localhost/devaipod-helper:latest)
PREFIX=scale- # pod names: devaipod-scale-NNN; only these are ever created or removed

die() {
	printf 'bench-scale: error: %s\n' "$*" >&2
	exit 1
}
say() { printf 'bench-scale: %s\n' "$*" >&2; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# keys_in_use: "KEYS BYTES MAXKEYS MAXBYTES" of this user's key quota (/proc/key-users lists only
# users who hold keys: none is 0 0 and the sysctls).
keys_in_use() {
	awk -v uid="$(id -u)" -v mk="$(cat /proc/sys/kernel/keys/maxkeys)" -v mb="$(cat /proc/sys/kernel/keys/maxbytes)" '
		$1 == uid ":" { split($4, k, "/"); split($5, b, "/"); print k[1], b[1], k[2], b[2]; found = 1 }
		END { if (!found) print 0, 0, mk, mb }' /proc/key-users
}

mem_available_kb() { awk '$1 == "MemAvailable:" { print $2 }' /proc/meminfo; }

# pss_kb: the proportional set size of every process of this user and of its containers (uids in
# its subordinate range): the podman service, conmon, slirp4netns and what runs in the pods.
pss_kb() {
	local lo=-1 hi=-1 range
	if range=$(grep -m1 "^$(id -un):" /etc/subuid 2>/dev/null); then
		IFS=: read -r _ lo hi <<<"$range"
		hi=$((lo + hi))
	fi
	local uid total=0 p u v
	uid=$(id -u)
	for p in /proc/[0-9]*; do
		u=$(awk '$1 == "Uid:" { print $2; exit }' "$p/status" 2>/dev/null) || continue
		[ -n "$u" ] || continue
		if [ "$u" -eq "$uid" ] || { [ "$u" -ge "$lo" ] && [ "$u" -lt "$hi" ]; }; then
			v=$(awk '$1 == "Pss:" { print $2; exit }' "$p/smaps_rollup" 2>/dev/null) || continue
			total=$((total + ${v:-0}))
		fi
	done
	echo "$total"
}

pod_name() { printf '%s%03d' "$PREFIX" "$1"; }

# remove_all: delete every devaipod-scale-* pod and whatever of theirs is left.
remove_all() {
	local p
	for p in $(podman pod ps --format '{{.Name}}' --filter "name=^devaipod-$PREFIX" 2>/dev/null); do
		"$BIN" delete --wait -q "${p#devaipod-}" >/dev/null 2>&1 || podman pod rm -f -t 0 "$p" >/dev/null 2>&1 || true
	done
	leftovers | while read -r kind name; do
		case $kind in
		container) podman rm -f -t 0 "$name" ;;
		volume) podman volume rm -f "$name" ;;
		secret) podman secret rm "$name" ;;
		esac
	done >/dev/null 2>&1 || true
}

# leftovers: "KIND NAME" of every object whose name says it belongs to a devaipod-scale-* pod.
leftovers() {
	local re="^devaipod-$PREFIX"
	podman pod ps --format '{{.Name}}' | grep "$re" | sed 's/^/pod /' || true
	podman ps -a --format '{{.Names}}' | grep "$re" | sed 's/^/container /' || true
	podman volume ls --format '{{.Name}}' | grep "$re" | sed 's/^/volume /' || true
	podman secret ls --format '{{.Name}}' | grep "$re" | sed 's/^/secret /' || true
}

# sampler FILE: every 0.2 s until killed, "MS KEYS BYTES MEMAVAILABLE_KB" into FILE.
sampler() {
	while :; do
		printf '%s %s %s\n' "$(now_ms)" "$(keys_in_use | cut -d' ' -f1,2)" "$(mem_available_kb)" >>"$1"
		sleep 0.2
	done
}

# run_all VERB DIR: run VERB (up or delete) for every pod listed in DIR/pods, all at once; each
# writes DIR/VERB/NAME.rc ("RC START_MS END_MS") and its output. Prints the wall time in ms.
run_all() {
	local verb=$1 dir=$2 name start
	mkdir -p "$dir/$verb"
	start=$(now_ms)
	while read -r name; do
		(
			local s rc=0
			s=$(now_ms)
			if [ "$verb" = up ]; then
				"$BIN" --config "$dir/standin.toml" up -q --name "$name" "$dir/fixture" \
					>"$dir/$verb/$name.out" 2>"$dir/$verb/$name.err" || rc=$?
			else
				"$BIN" delete --wait -q "$name" >"$dir/$verb/$name.out" 2>"$dir/$verb/$name.err" || rc=$?
			fi
			echo "$rc $s $(now_ms)" >"$dir/$verb/$name.rc"
		) &
	done <"$dir/pods"
	wait
	echo $(($(now_ms) - start))
}

# summarize VERB DIR: "OK FAILED MEDIAN_MS MAX_MS" of one phase.
summarize() {
	cat "$2/$1"/*.rc | awk '
		{ n++; if ($1 == 0) ok++; d[n] = $3 - $2 }
		END {
			for (i = 2; i <= n; i++) { x = d[i]; for (j = i - 1; j >= 1 && d[j] > x; j--) d[j + 1] = d[j]; d[j + 1] = x }
			med = (n % 2) ? d[(n + 1) / 2] : (d[n / 2] + d[n / 2 + 1]) / 2
			printf "%d %d %d %d\n", ok, n - ok, med, d[n]
		}'
}

# errors VERB DIR: the distinct last lines of the failures' stderr (container ids made "ID", cut
# at 300 characters), with counts, the five most frequent.
errors() {
	local f
	for f in "$2/$1"/*.rc; do
		[ "$(cut -d' ' -f1 "$f")" = 0 ] && continue
		tail -n 1 "${f%.rc}.err"
		echo
	done | sed -E '/^$/d; s/[0-9a-f]{12,64}/ID/g; s/^(.{300}).+/\1.../' | sort | uniq -c | sort -rn | awk 'NR <= 5'
}

measure() {
	local dir=$1
	for t in podman git awk; do command -v "$t" >/dev/null || die "$t is missing"; done
	[ -x "$BIN" ] || die "$BIN is missing or not executable: run 'make build' first"
	podman info >/dev/null 2>&1 || die "podman does not work for $(id -un): see 'podman info'"
	local img
	for img in "${IMAGES[@]}"; do
		podman image exists "$img" || die "image $img is missing: run 'make images' (as root: hack/as-test-user make images)"
	done
	SAMPLER_PID=""
	trap 'say "removing the pods"; [ -z "$SAMPLER_PID" ] || kill "$SAMPLER_PID" 2>/dev/null; remove_all' EXIT
	trap 'exit 130' INT TERM
	remove_all

	# The fixture repository and the stand-in agent, as the e2e tests have them.
	git init -q -b main "$dir/fixture"
	echo fixture >"$dir/fixture/README.md"
	git -C "$dir/fixture" add .
	git -C "$dir/fixture" -c user.name=t -c user.email=t@t -c commit.gpgsign=false commit -q -m fixture
	git -C "$dir/fixture" remote add origin https://git.example.test/org/fixture.git
	cat >"$dir/standin.toml" <<'EOF'
[agent]
kind = "custom"
command = ["busybox", "httpd", "-f", "-p", "127.0.0.1:4096", "-h", "/tmp"]
EOF
	local i
	for ((i = 1; i <= PODS; i++)); do pod_name "$i"; echo; done >"$dir/pods"

	local f=$dir/facts
	{
		echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
		echo "uname=$(uname -sr)"
		echo "cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
		echo "nproc=$(nproc)"
		echo "mem=$(awk '$1 == "MemTotal:" { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
		echo "podman=$(podman version --format '{{.Server.Version}}' 2>/dev/null || podman --version)"
		echo "runtime=$(podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.OCIRuntime.Version}}' | head -n1 | awk '{ print $1, $NF }')"
		echo "driver=$(podman info --format '{{.Store.GraphDriverName}}')"
		echo "devaipod=$("$BIN" version 2>/dev/null | head -n1)"
		echo "keys_before=$(keys_in_use)"
		echo "doctor=$("$BIN" doctor --pods "$PODS" 2>/dev/null | grep '^keys ' | tr -s ' ' | head -n1)"
		echo "uid=$(id -u)"
		echo "load_before=$(cut -d' ' -f1-3 /proc/loadavg)"
		echo "mem_before=$(mem_available_kb)"
		echo "pss_before=$(pss_kb)"
	} >"$f"
	say "$(grep -c . "$dir/pods") pods at once; key quota before: $(keys_in_use) (keys bytes maxkeys maxbytes)"

	sampler "$dir/samples" &
	SAMPLER_PID=$!
	say "up of $PODS pods at once"
	echo "up_wall=$(run_all up "$dir")" >>"$f"
	echo "up=$(summarize up "$dir")" >>"$f"
	say "up: $(grep '^up=' "$f" | cut -d= -f2) (ok failed median_ms max_ms)"
	sleep 2
	{
		echo "running=$(podman pod ps --filter "name=^devaipod-$PREFIX" --filter status=running -q | grep -c . || true)"
		echo "containers=$(podman ps --filter "name=^devaipod-$PREFIX" -q | grep -c . || true)"
		echo "keys_up=$(keys_in_use)"
		echo "mem_up=$(mem_available_kb)"
		echo "pss_up=$(pss_kb)"
		echo "load_up=$(cut -d' ' -f1-3 /proc/loadavg)"
	} >>"$f"
	# Delete the pods that came up (a failed up removed its own).
	for rc in "$dir"/up/*.rc; do
		[ "$(cut -d' ' -f1 "$rc")" = 0 ] && basename "$rc" .rc
	done >"$dir/pods.up" || true
	mv "$dir/pods" "$dir/pods.all"
	cp "$dir/pods.up" "$dir/pods"
	if [ -s "$dir/pods" ]; then
		say "delete of $(grep -c . "$dir/pods") pods at once"
		echo "delete_wall=$(run_all delete "$dir")" >>"$f"
		echo "delete=$(summarize delete "$dir")" >>"$f"
	else
		echo "delete_wall=0" >>"$f"
		echo "delete=0 0 0 0" >>"$f"
	fi
	# Keys are freed when the kernel's garbage collector gets to them: wait a little.
	for ((i = 0; i < 20; i++)); do
		[ "$(keys_in_use | cut -d' ' -f1)" -le "$(grep '^keys_before=' "$f" | cut -d= -f2 | cut -d' ' -f1)" ] && break
		sleep 0.5
	done
	kill "$SAMPLER_PID" 2>/dev/null || true
	wait "$SAMPLER_PID" 2>/dev/null || true
	SAMPLER_PID=""
	{
		echo "keys_after=$(keys_in_use)"
		echo "peak=$(awk 'BEGIN { k = 0; b = 0 } { if ($2 > k) k = $2; if ($3 > b) b = $3 } END { print k, b }' "$dir/samples")"
		echo "mem_min=$(awk 'NR == 1 || $4 < m { m = $4 } END { print m }' "$dir/samples")"
		echo "leftovers=$(leftovers | grep -c . || true)"
	} >>"$f"
	errors up "$dir" >"$dir/errors.up"
	[ -d "$dir/delete" ] && errors delete "$dir" >"$dir/errors.delete"
	say "delete: $(grep '^delete=' "$f" | cut -d= -f2); leftovers: $(grep '^leftovers=' "$f" | cut -d= -f2)"
}

fact() { grep "^$1=" "$DIR/facts" | head -n1 | cut -d= -f2-; }
field() { fact "$1" | cut -d' ' -f"$2"; }
secs() { awk -v ms="$1" 'BEGIN { printf "%.1f", ms / 1000 }'; }
mib() { awk -v kb="$1" 'BEGIN { printf "%.0f", kb / 1024 }'; }

# per_pod_keys: what the pods held, and how many would fit in the kernel's default limits.
per_pod_keys() {
	awk -v kb="$(field keys_before 1)" -v bb="$(field keys_before 2)" -v ku="$(field keys_up 1)" -v bu="$(field keys_up 2)" \
		-v n="$(fact running)" 'BEGIN {
		if (n == 0) exit
		k = (ku - kb) / n; b = (bu - bb) / n
		fit = int((200 - kb) / k); fb = int((20000 - bb) / b); if (fb < fit) fit = fb
		printf "Each running pod held %.1f keys (%.0f bytes). At the kernel'"'"'s default limits for a user (200 keys,\n", k, b
		printf "20000 bytes) %d such pods fit next to what was in use before the run.\n", fit
	}'
}

render() {
	DIR=$1
	local doc=$2
	local ok failed dok dfailed n verdict
	n=$(grep -c . "$DIR/pods.all")
	ok=$(field up 1)
	failed=$(field up 2)
	dok=$(field delete 1)
	dfailed=$(field delete 2)
	if [ "$ok" -eq "$n" ] && [ "$dfailed" -eq 0 ] && [ "$(fact leftovers)" -eq 0 ]; then
		verdict="**all $n came up and were deleted**, nothing left behind"
	else
		verdict="**$ok of $n came up**; $dok of them were deleted ($dfailed deletes failed); $(fact leftovers) objects were left behind"
	fi
	local pss_pod mem_pod
	pss_pod=$(awk -v a="$(fact pss_before)" -v b="$(fact pss_up)" -v n="$(fact running)" 'BEGIN { printf "%.1f", n ? (b - a) / n / 1024 : 0 }')
	mem_pod=$(awk -v a="$(fact mem_before)" -v b="$(fact mem_up)" -v n="$(fact running)" 'BEGIN { printf "%.1f", n ? (a - b) / n / 1024 : 0 }')
	local errs=""
	if [ -s "$DIR/errors.up" ]; then
		errs+=$'\n'"Why \`up\` failed (the last line of its error, how many times):"$'\n\n```\n'"$(cat "$DIR/errors.up")"$'\n```\n'
	fi
	if [ -s "$DIR/errors.delete" ]; then
		errs+=$'\n'"Why \`delete\` failed:"$'\n\n```\n'"$(cat "$DIR/errors.delete")"$'\n```\n'
	fi
	mkdir -p "$(dirname "$doc")"
	cat >"$doc" <<EOF
# Benchmarks: many pods at once

<!-- Written by hack/bench-scale.sh (make bench-scale). Do not edit by hand: rerun it. -->

$n \`devaipod up\` started at the same moment on one machine, then \`devaipod delete --wait\` of every pod
that came up, again all at once. Result: $verdict.

| | \`up\` ×$n | \`delete\` ×$dok |
|---|---:|---:|
| succeeded | $ok | $dok |
| failed | $failed | $dfailed |
| wall time, first start to last exit | $(secs "$(fact up_wall)") s | $(secs "$(fact delete_wall)") s |
| one command, median | $(secs "$(field up 3)") s | $(secs "$(field delete 3)") s |
| one command, slowest | $(secs "$(field up 4)") s | $(secs "$(field delete 4)") s |
$errs
With the pods up: $(fact running) pods running, $(fact containers) containers (without the pods'
infra containers).

## The kernel's key quota

Every container runc starts gets a session keyring of its own (\`_ses.\` and the container's id,
70 bytes), charged to the user the container's root maps to: for rootless podman, the user
itself. A pod holds one per container, infra container included (four with the stand-in agent,
five with the gator); \`podman exec\` joins the container's keyring and holds none of its own.
At the kernel's defaults for a user (\`kernel.keys.maxkeys\` = 200, \`kernel.keys.maxbytes\` =
20000) that is room for 40 to 50 pods. Past it, runc fails with "unable to create session key:
disk quota exceeded", and since pods that start together take their keys together, every pod
still starting then loses a container and rolls back: more pods fail than the excess. \`hack/setup-host.sh\` raises
both on the test host; \`devaipod doctor --pods N\` says whether N more pods fit and how to raise
them.

| key quota of uid $(fact uid) | keys | bytes |
|---|---:|---:|
| limit (\`kernel.keys.maxkeys\`, \`maxbytes\`) | $(field keys_before 3) | $(field keys_before 4) |
| in use before | $(field keys_before 1) | $(field keys_before 2) |
| peak (sampled every 0.2 s) | $(field peak 1) | $(field peak 2) |
| with the pods up | $(field keys_up 1) | $(field keys_up 2) |
| after the deletes | $(field keys_after 1) | $(field keys_after 2) |

$(per_pod_keys)

\`devaipod doctor --pods $n\` before the run said: \`$(fact doctor)\`

## Memory

| | MiB |
|---|---:|
| PSS of the user's processes and its containers' (podman service, conmon, slirp4netns, the pods), before | $(mib "$(fact pss_before)") |
| the same with the pods up | $(mib "$(fact pss_up)") |
| per running pod (PSS) | $pss_pod |
| per running pod (drop in MemAvailable; includes the kernel's share) | $mem_pod |
| lowest MemAvailable during the run | $(mib "$(fact mem_min)") |

## Machine

| | |
|---|---|
| date | $(fact date) |
| kernel | $(fact uname) |
| CPU | $(fact cpu), $(fact nproc) cores, $(fact mem) |
| podman | $(fact podman), rootless, $(fact driver), $(fact runtime) |
| devaipod | $(fact devaipod) |
| load average (1, 5, 15 min) | before: $(fact load_before); with the pods up: $(fact load_up) |

## What is measured

- **The pod** is \`devaipod up\` of a one-commit repository with the e2e tests' stand-in agent
  (\`busybox httpd\` on 127.0.0.1:4096, \`[agent] kind = "custom"\`), on warm images: pod,
  volumes, secrets, the workspace, agent and proxy containers, the copy of the repository, the
  wait for the agent through the workspace, and \`up\`'s containment checks (egress and the fast
  verify battery). Each \`up\` is its own process, as a person or a script starting pods would
  run them; they all talk to the user's one podman API service.
- **Wall time** runs from starting the first command to the exit of the last; "one command" is
  each process's own time, which on $(fact nproc) cores is mostly waiting for the others.
- **Key use** is read from \`/proc/key-users\` for the test user every 0.2 s during the run.
- **Memory**: PSS (shared pages split between the processes that map them) summed over every
  process of the user and of its subordinate uids, before the run and with all pods up.

## Reproduce

\`\`\`
make bench-scale
\`\`\`

It needs the images (\`make images\`) and, for more than about 40 pods, the raised key quota
(\`hack/setup-host.sh\` as root, or the \`sysctl\` command \`devaipod doctor --pods N\` prints).
\`hack/bench-scale.sh\` run as root measures as the unprivileged test user (hack/as-test-user) and
writes this page as root. Knobs: \`DEVAIPOD_SCALE_PODS\` (default 100), \`DEVAIPOD_SCALE_DOC\`,
\`DEVAIPOD_BENCH_BIN\`, \`DEVAIPOD_BENCH_KEEP=1\` (keep the raw results).
EOF
	say "wrote $doc"
}

writable() {
	if [ -e "$1" ]; then [ -w "$1" ]; else [ -w "$(dirname "$1")" ]; fi
}

main() {
	local dir rc=0
	if ! [[ "$PODS" =~ ^[0-9]+$ ]] || [ "$PODS" -lt 1 ] || [ "$PODS" -gt 999 ]; then
		die "DEVAIPOD_SCALE_PODS must be a number from 1 to 999, not $PODS"
	fi
	writable "$DOC" || die "$(id -un) cannot write $DOC: run hack/bench-scale.sh as root, or set DEVAIPOD_SCALE_DOC"
	dir=$(mktemp -d "${TMPDIR:-/tmp}/devaipod-bench-scale.XXXXXX")
	chmod 0755 "$dir"
	if [ "$(id -u)" -eq 0 ]; then
		getent passwd "$TEST_USER" >/dev/null ||
			die "as root this measures as $TEST_USER, who does not exist: run hack/setup-host.sh"
		chown "$TEST_USER:" "$dir"
		"$REPO/hack/as-test-user" "$SELF" _measure "$dir" || rc=$?
	else
		"$SELF" _measure "$dir" || rc=$?
	fi
	if [ "$rc" -ne 0 ]; then
		if [ "${DEVAIPOD_BENCH_KEEP:-0}" = 1 ]; then say "raw results kept in $dir"; else rm -rf "$dir"; fi
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
-h | --help) sed -n '2,/^set -e/p' "$SELF" | sed '$d; s/^# \{0,1\}//' ;;
*) die "unknown argument $1 (see hack/bench-scale.sh --help)" ;;
esac

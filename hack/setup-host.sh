#!/usr/bin/env bash
# hack/setup-host.sh: make this machine ready to run devaipod's tests. Idempotent; `make test`
# runs it first.
#
# As root (CI, a fresh VM): install podman and friends from the machine's Debian sources, create
# the unprivileged user devaipod-test with subordinate ids, configure rootless podman for it
# (runc, overlay storage, XDG_RUNTIME_DIR) and start its podman API service. The tests then run
# as that user through hack/as-test-user. Also writes the rootful config the tests need.
#
# As a normal user: check that podman is usable rootless and that its API socket answers,
# starting `podman system service` if it does not.
#
# See shared notes "podman-here" for why each adjustment is needed (hybrid cgroups -> runc,
# /dev/net/tun 0600, no logind -> no /run/user/UID, podman picks vfs on a fresh user).
set -euo pipefail

TEST_USER=devaipod-test
PACKAGES=(podman runc uidmap slirp4netns fuse-overlayfs mmdebstrap busybox-static git hyperfine procps)
REPO=$(cd "$(dirname "$0")/.." && pwd -P)
SOCK_WAIT=20 # seconds to wait for the API socket

die() {
	printf 'setup-host: error: %s\n' "$*" >&2
	exit 1
}
warn() { printf 'setup-host: warning: %s\n' "$*" >&2; }
note() { printf 'setup-host: %s\n' "$*" >&2; }

# CHANGES records, one line each, what setup_root changed on this machine and how to undo it:
# hack/unsetup-host.sh (make unsetup) reads it backwards.
CHANGES=${DEVAIPOD_SETUP_CHANGES:-/var/lib/devaipod/setup-changes}

# change WHAT RECORD: say WHAT, before it is made, and keep RECORD for hack/unsetup-host.sh (which
# tolerates a change that then failed).
change() {
	note "changing this machine: $1"
	record "$2"
}

# record LINE: keep LINE in CHANGES, once.
record() {
	install -d -m 0755 "$(dirname "$CHANGES")"
	grep -qxF -- "$1" "$CHANGES" 2>/dev/null || printf '%s\n' "$1" >>"$CHANGES"
}

# sock_answers SOCK: true when a podman API service answers on the unix socket SOCK.
sock_answers() {
	[ -S "$1" ] || return 1
	if command -v curl >/dev/null 2>&1; then
		[ "$(curl -fsS --max-time 3 --unix-socket "$1" http://d/_ping 2>/dev/null)" = OK ]
	else
		timeout 5 podman --remote --url "unix://$1" info >/dev/null 2>&1
	fi
}

# start_service SOCK LOG CMD...: start CMD (a podman system service invocation, possibly wrapped
# to change user) in the background, detached, unless SOCK already answers; wait until it does.
start_service() {
	local sock=$1 log=$2
	shift 2
	if sock_answers "$sock"; then
		return 0
	fi
	rm -f "$sock" # a stale socket from a dead service
	note "starting podman API service on $sock (log: $log)"
	# setsid: out of our process group, so a ^C to make does not stop the service. setsid, nohup,
	# setpriv and env all exec, so $! is the service's pid.
	setsid nohup "$@" </dev/null >>"$log" 2>&1 &
	echo $! >"${sock%.sock}.pid"
	local i
	for ((i = 0; i < SOCK_WAIT * 4; i++)); do
		sock_answers "$sock" && return 0
		sleep 0.25
	done
	tail -n 20 "$log" >&2 || true
	die "the podman API service did not answer on $sock within ${SOCK_WAIT}s (log above: $log)"
}

podman_version() { podman --version | awk '{print $NF}'; }

# The kernel's key quota per user. runc gives every container it starts a session keyring of its
# own, charged to the user that container root maps to: for rootless podman, the user. At the
# kernel's defaults (kernel.keys.maxkeys = 200 keys, maxbytes = 20000 bytes per user) that is room
# for about 40 pods (four or five containers each, about 70 bytes a keyring), and beyond it runc
# fails with "unable to create session key: disk quota exceeded". These are the values
# `devaipod doctor` proposes (pod.RecommendedMaxKeys, pod.RecommendedMaxBytes): 400 pods.
KEYS_SYSCTLS=("maxkeys 2000" "maxbytes 2000000")
KEYS_SYSCTL_FILE=/etc/sysctl.d/60-devaipod-keys.conf

# pods_in_keys NAME VALUE: about how many pods (5 keys of 70 bytes each) a limit NAME (maxkeys or
# maxbytes) of VALUE allows.
pods_in_keys() {
	if [ "$1" = maxkeys ]; then echo $(($2 / 5)); else echo $(($2 / 350)); fi
}

# check_key_quota: warn when the per-user key quota is below what hack/bench-scale.sh needs.
check_key_quota() {
	local pair name want cur
	for pair in "${KEYS_SYSCTLS[@]}"; do
		read -r name want <<<"$pair"
		cur=$(cat "/proc/sys/kernel/keys/$name" 2>/dev/null) || continue
		[ "$cur" -ge "$want" ] ||
			warn "kernel.keys.$name is $cur: every running container holds a kernel key, so about $(pods_in_keys "$name" "$cur") pods fit; as root: sysctl -w kernel.keys.$name=$want (devaipod doctor --pods N says how many fit)"
	done
}

# raise_key_quota: raise kernel.keys.maxkeys and maxbytes to KEYS_SYSCTLS where they are lower
# (never lower them), and keep what it raised across reboots in KEYS_SYSCTL_FILE.
raise_key_quota() {
	local pair name want cur persist=""
	for pair in "${KEYS_SYSCTLS[@]}"; do
		read -r name want <<<"$pair"
		if ! cur=$(cat "/proc/sys/kernel/keys/$name" 2>/dev/null); then
			warn "cannot read kernel.keys.$name; leaving the key quota alone"
			return 0
		fi
		if [ "$cur" -lt "$want" ]; then
			change "kernel.keys.$name $cur -> $want (runc's session keyrings: room for more pods)" "sysctl kernel.keys.$name $cur"
			if ! sysctl -q -w "kernel.keys.$name=$want"; then
				warn "could not raise kernel.keys.$name from $cur to $want; rootless podman runs about $(pods_in_keys "$name" "$cur") pods at once"
				continue
			fi
			note "raised kernel.keys.$name from $cur to $want (about $(pods_in_keys "$name" "$want") pods per user)"
		fi
		# What this script set before stays written, so that a reboot keeps it.
		if [ "$cur" -lt "$want" ] || grep -qs "^kernel\.keys\.$name = $want\$" "$KEYS_SYSCTL_FILE"; then
			persist+="kernel.keys.$name = $want"$'\n'
		fi
	done
	[ -n "$persist" ] || return 0
	[ -f "$KEYS_SYSCTL_FILE" ] || change "write $KEYS_SYSCTL_FILE (the key quota, kept across reboots)" "file $KEYS_SYSCTL_FILE"
	write_if_changed "$KEYS_SYSCTL_FILE" root \
		"# Written by devaipod's hack/setup-host.sh: every container runc starts holds a kernel key
# (its session keyring) charged to its rootless user; the defaults (200 keys, 20000 bytes) allow
# about 40 pods.
${persist%$'\n'}"
}

# ---------------------------------------------------------------------------------------------
# Non-root: check, don't change the system.
# ---------------------------------------------------------------------------------------------
setup_user() {
	local user
	user=$(id -un)
	command -v podman >/dev/null 2>&1 ||
		die "podman is not installed: install it (Debian: apt-get install podman runc uidmap slirp4netns fuse-overlayfs), or run this script as root to set the machine up."
	[ -n "${XDG_RUNTIME_DIR:-}" ] ||
		die "XDG_RUNTIME_DIR is not set: create a directory you own with mode 0700 (usually /run/user/$(id -u)) and export XDG_RUNTIME_DIR to it."
	if ! [ -d "$XDG_RUNTIME_DIR" ] || ! [ -w "$XDG_RUNTIME_DIR" ]; then
		die "XDG_RUNTIME_DIR=$XDG_RUNTIME_DIR is not a directory you can write to."
	fi
	if [ -e /dev/net/tun ] && ! { [ -r /dev/net/tun ] && [ -w /dev/net/tun ]; }; then
		warn "/dev/net/tun is not accessible to you, so rootless networking (slirp4netns) will fail; as root: chmod 0666 /dev/net/tun"
	fi
	grep -q "^$user:" /etc/subuid 2>/dev/null ||
		warn "no subordinate uid range for $user in /etc/subuid; rootless podman needs one (as root: usermod --add-subuids 100000-165535 --add-subgids 100000-165535 $user, then podman system migrate)"

	local info
	info=$(podman info --format '{{.Store.GraphDriverName}} {{.Host.OCIRuntime.Name}}' 2>/dev/null) ||
		die "podman info failed: $(podman info 2>&1 >/dev/null | tail -n 5)
(on hosts with hybrid cgroups crun refuses to run: set runtime = \"runc\" under [engine] in ~/.config/containers/containers.conf)"
	local driver=${info% *} runtime=${info#* }
	[ "$driver" = vfs ] &&
		warn "podman uses the vfs storage driver, which copies a whole image per container (seconds per container); write [storage] driver = \"overlay\" to ~/.config/containers/storage.conf and run podman system reset"
	# Hybrid cgroups: v1 controllers on a tmpfs /sys/fs/cgroup plus a cgroup2 mount.
	[ "$runtime" = crun ] && [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = tmpfs ] && grep -q ' cgroup2 ' /proc/mounts &&
		warn "podman uses crun on a host with hybrid cgroups; crun refuses to start containers there: set runtime = \"runc\" under [engine] in ~/.config/containers/containers.conf"
	check_key_quota

	local sock=$XDG_RUNTIME_DIR/podman/podman.sock
	mkdir -p "$XDG_RUNTIME_DIR/podman"
	start_service "$sock" "$XDG_RUNTIME_DIR/podman/service.log" podman system service --time=0 "unix://$sock"

	echo "devaipod test host: rootless podman $(podman_version) as user $user ($driver, $runtime)"
}

# ---------------------------------------------------------------------------------------------
# Root: set the machine up.
# ---------------------------------------------------------------------------------------------
APT_LOG=/var/log/devaipod-setup-apt.log

install_packages() {
	local missing=() p
	for p in "${PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	note "changing this machine: install ${missing[*]} and what they need (recorded as installed, for make unsetup)"
	record "file $APT_LOG"
	local before
	before=$(dpkg-query -W -f='${Package} ${Status}\n' | awk '/ installed$/ {print $1}' | sort)
	{
		echo "== $(date -u +%FT%TZ) apt-get update && install ${missing[*]}"
		apt-get update
	} >>"$APT_LOG" 2>&1 || {
		tail -n 20 "$APT_LOG" >&2
		die "apt-get update failed (log above: $APT_LOG)"
	}
	DEBIAN_FRONTEND=noninteractive "$REPO/hack/progress.sh" --log "$APT_LOG" "setup-host: apt-get install ${missing[*]}" \
		apt-get install -y -q "${missing[@]}" || {
		tail -n 20 "$APT_LOG" >&2
		die "apt-get install ${missing[*]} failed (log above: $APT_LOG)"
	}
	# What dpkg added, dependencies included: what make unsetup removes.
	local p
	for p in $(comm -13 <(echo "$before") <(dpkg-query -W -f='${Package} ${Status}\n' | awk '/ installed$/ {print $1}' | sort)); do
		record "package $p"
	done
}

# ensure_subids FILE USER: give USER a 65536-id range in FILE (/etc/subuid or /etc/subgid)
# unless it has one; prints "added" when it changed something.
ensure_subids() {
	local file=$1 user=$2 start
	touch "$file"
	grep -q "^$user:" "$file" && return 0
	start=$(awk -F: 'BEGIN{m=100000} {e=$2+$3; if (e>m) m=e} END{print m}' "$file")
	change "give $user the ids $start-$((start + 65535)) in $file" "subid $file $user" >&2
	echo "$user:$start:65536" >>"$file"
	echo added
}

# write_if_changed FILE OWNER CONTENT: (re)write FILE when its content differs.
write_if_changed() {
	local file=$1 owner=$2 content=$3
	if [ -f "$file" ] && [ "$(cat "$file")" = "$content" ]; then
		return 0
	fi
	install -d -o "$owner" -g "$owner" -m 0755 "$(dirname "$file")"
	printf '%s\n' "$content" >"$file"
	chown "$owner:" "$file"
	chmod 0644 "$file"
}

# ensure_toml_key FILE SECTION KEY LINE: add LINE (KEY = ...) under [SECTION] of FILE unless KEY
# is already set there (then leave it, but say so when it differs). Other settings are kept.
ensure_toml_key() {
	local file=$1 section=$2 key=$3 line=$4 current
	current=$(awk -v s="[$section]" -v k="$key" '
		/^[[:space:]]*\[/ { in_s = ($0 ~ "^[[:space:]]*\\[" substr(s, 2, length(s) - 2) "\\][[:space:]]*(#.*)?$") }
		in_s && $0 ~ "^[[:space:]]*" k "[[:space:]]*=" { print; exit }' "$file")
	if [ -n "$current" ]; then
		[ "$(tr -d '[:space:]' <<<"$current")" = "$(tr -d '[:space:]' <<<"$line")" ] ||
			warn "$file already sets [$section] $current; leaving it (devaipod's tests expect: $line)"
		return 0
	fi
	change "add [$section] $line to $file" "tomlkey $file $section $key"
	local tmp
	tmp=$(mktemp "$file.XXXXXX")
	awk -v s="$section" -v line="$line" '
		{ print }
		!done && $0 ~ "^[[:space:]]*\\[" s "\\][[:space:]]*(#.*)?$" { print line; done = 1 }
		END { if (!done) { print ""; print "[" s "]"; print line } }' "$file" >"$tmp"
	chmod 0644 "$tmp"
	mv "$tmp" "$file"
}

rootful_config() {
	local conf=/etc/containers/containers.conf
	mkdir -p /etc/containers
	if [ ! -f "$conf" ]; then
		change "write $conf (rootful podman: runc, lower nofile and nproc limits)" "file $conf"
		cat >"$conf" <<'EOF'
# Written by devaipod's hack/setup-host.sh.
# runc: this host has hybrid cgroups, which crun refuses.
# default_ulimits: the VM lacks CAP_SYS_RESOURCE, so rootful containers cannot keep the host's
# high limits (setrlimit: Operation not permitted) unless they are lowered.
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]

[engine]
runtime = "runc"
EOF
		return 0
	fi
	ensure_toml_key "$conf" containers default_ulimits 'default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]'
	ensure_toml_key "$conf" engine runtime 'runtime = "runc"'
}

# check_repo_access: the test user runs test binaries with their package directory as working
# directory and `make images` in the checkout, so it must reach the checkout.
check_repo_access() {
	local d="" part
	local -a parts
	IFS=/ read -r -a parts <<<"${REPO#/}"
	as_test_user test -x / || die "the test user $TEST_USER cannot traverse / "
	for part in "${parts[@]}"; do
		d+=/$part
		as_test_user test -x "$d" ||
			die "the test user $TEST_USER cannot enter $d (mode $(stat -c '%A %U:%G' "$d")), so it cannot reach the checkout $REPO: clone it somewhere world-readable (e.g. under /work or /srv) or chmod o+x $d"
	done
	local f
	for f in "$REPO" "$REPO/Makefile"; do
		as_test_user test -r "$f" ||
			die "the test user $TEST_USER cannot read $f (mode $(stat -c '%A %U:%G' "$f")) in the checkout: chmod -R o+rX $REPO"
	done
}

# precheck_repo_access: before anything changes, whether a user other than root (the test user,
# made later) can reach the checkout: each folder above it searchable by others, its Makefile
# readable. A clone under /root is not.
precheck_repo_access() {
	local d="" part
	local -a parts
	IFS=/ read -r -a parts <<<"${REPO#/}"
	for part in "" "${parts[@]}"; do
		d+=${part:+/$part}
		d=${d:-/}
		[ "$(($(stat -c '0%a' "$d") & 01))" -ne 0 ] ||
			die "nothing was changed: the test user $TEST_USER could not enter $d (mode $(stat -c '%A %U:%G' "$d")), so it could not reach the checkout $REPO; clone it somewhere others can read (under /srv or /tmp), or chmod o+x $d"
		[ "$d" = / ] && d=""
	done
	local f
	for f in "$REPO" "$REPO/Makefile"; do
		[ "$(($(stat -c '0%a' "$f") & 04))" -ne 0 ] ||
			die "nothing was changed: the test user $TEST_USER could not read $f: chmod -R o+rX $REPO"
	done
}

# as_test_user CMD...: run CMD as the test user with a clean environment, from /.
as_test_user() {
	(cd / && setpriv --reuid="$TEST_UID" --regid="$TEST_GID" --init-groups \
		env -i HOME="$TEST_HOME" USER="$TEST_USER" LOGNAME="$TEST_USER" \
		PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		XDG_RUNTIME_DIR="$TEST_RUNDIR" "$@")
}

setup_root() {
	note "as root, this sets the machine up for devaipod (rootless podman for the user $TEST_USER); each change is said before it is made and recorded in $CHANGES: \`make unsetup\` undoes them"
	precheck_repo_access
	install_packages

	# slirp4netns opens /dev/net/tun as the user; here it comes up 0600.
	if [ -c /dev/net/tun ]; then
		local mode
		mode=$(stat -c %a /dev/net/tun)
		[ "$mode" = 666 ] || change "chmod 0666 /dev/net/tun (was $mode: slirp4netns opens it as the user)" "mode /dev/net/tun $mode"
		chmod 0666 /dev/net/tun
	else
		warn "/dev/net/tun does not exist; rootless networking (slirp4netns) will not work"
	fi

	rootful_config
	raise_key_quota

	# Rootless podman warns on every command ("/" is not a shared mount, ...) and cannot propagate
	# mounts when / is private, as it is here without systemd (which makes it shared at boot).
	# Only the root mount itself is changed, not the mounts below it.
	if [ "$(findmnt -no PROPAGATION / 2>/dev/null)" = private ]; then
		change "mount --make-shared / (was private: rootless podman propagates mounts)" "propagation / private"
		mount --make-shared / || warn "could not make / a shared mount; rootless podman will warn about it"
	fi

	local added=""
	if ! id "$TEST_USER" >/dev/null 2>&1; then
		change "add the user $TEST_USER (rootless podman runs as it)" "user $TEST_USER"
		useradd -m -s /bin/bash -c "devaipod tests" "$TEST_USER"
	fi
	added+=$(ensure_subids /etc/subuid "$TEST_USER")
	added+=$(ensure_subids /etc/subgid "$TEST_USER")

	TEST_UID=$(id -u "$TEST_USER")
	TEST_GID=$(id -g "$TEST_USER")
	TEST_HOME=$(getent passwd "$TEST_USER" | cut -d: -f6)
	TEST_RUNDIR=/run/user/$TEST_UID
	[ -d "$TEST_HOME" ] || install -d -o "$TEST_UID" -g "$TEST_GID" -m 0750 "$TEST_HOME"

	# No logind here, so nobody creates the runtime dir. Make it a tmpfs, as logind does: podman
	# keeps per-boot state there (its pause process, which containers run) and, finding it after a
	# reboot on this machine's disk-backed /run, trusts it and fails ("invalid internal status").
	install -d -m 0755 /run/user
	install -d -o "$TEST_UID" -g "$TEST_GID" -m 0700 "$TEST_RUNDIR"
	if ! mountpoint -q "$TEST_RUNDIR"; then
		local running=0
		pgrep -u "$TEST_UID" >/dev/null || running=$?
		[ "$running" -le 1 ] || die "pgrep -u $TEST_UID failed (exit $running)"
		if [ "$running" -eq 0 ]; then
			# Its processes still use what is there: leave it until they are gone.
			note "$TEST_RUNDIR is not a tmpfs, but $TEST_USER has processes running; not mounting one over it"
		else
			change "mount a tmpfs on $TEST_RUNDIR (what logind would do)" "mount $TEST_RUNDIR"
			mount -t tmpfs -o "mode=0700,uid=$TEST_UID,gid=$TEST_GID,size=10%,nosuid,nodev" tmpfs "$TEST_RUNDIR" ||
				warn "could not mount a tmpfs on $TEST_RUNDIR; podman state left there survives a reboot"
		fi
	fi
	install -d -o "$TEST_UID" -g "$TEST_GID" -m 0700 "$TEST_RUNDIR/podman"

	# Both files must exist before the user's first podman command: a fresh user otherwise gets
	# crun (refuses hybrid cgroups) and vfs storage (seconds per container).
	write_if_changed "$TEST_HOME/.config/containers/containers.conf" "$TEST_USER" \
		$'# Written by devaipod\'s hack/setup-host.sh: this host has hybrid cgroups, which crun refuses.\n[engine]\nruntime = "runc"'
	write_if_changed "$TEST_HOME/.config/containers/storage.conf" "$TEST_USER" \
		$'# Written by devaipod\'s hack/setup-host.sh: podman would otherwise pick vfs here.\n[storage]\ndriver = "overlay"'
	chown "$TEST_USER:" "$TEST_HOME/.config"

	local storage=$TEST_HOME/.local/share/containers/storage info
	if [ -d "$storage/vfs" ] || [ -d "$storage/vfs-images" ]; then
		note "the test user's podman storage uses vfs; resetting it to overlay"
		kill_test_service
		as_test_user podman system reset -f >/dev/null 2>&1 ||
			die "podman system reset -f as $TEST_USER failed"
	elif [ -n "$added" ] && [ -d "$storage" ]; then
		as_test_user podman system migrate >/dev/null 2>&1 || true
	fi
	local format='{{.Store.GraphDriverName}} {{.Host.OCIRuntime.Name}}' errs
	errs=$(mktemp)
	# shellcheck disable=SC2064 # the path now: errs is local
	trap "rm -f -- $errs" EXIT
	if ! info=$(as_test_user podman info --format "$format" 2>"$errs"); then
		# State from processes that are gone (podman's own hint names the fix): reset it once.
		grep -q 'system migrate' "$errs" || die "podman info as $TEST_USER failed: $(tail -n 5 "$errs")"
		note "podman as $TEST_USER kept state from processes that are gone ($(tail -n 1 "$errs")); running podman system migrate"
		as_test_user podman system migrate >/dev/null 2>"$errs" ||
			die "podman system migrate as $TEST_USER failed: $(tail -n 5 "$errs")"
		info=$(as_test_user podman info --format "$format" 2>"$errs") ||
			die "podman info as $TEST_USER failed after podman system migrate: $(tail -n 5 "$errs")"
	fi
	rm -f "$errs"
	[ "$info" = "overlay runc" ] ||
		die "rootless podman for $TEST_USER uses '$info' (storage driver, runtime); expected 'overlay runc'"

	check_repo_access

	local sock=$TEST_RUNDIR/podman/podman.sock
	# The log and pid files belong to the user, who may restart the service later.
	touch "$TEST_RUNDIR/podman/service.log" "$TEST_RUNDIR/podman/podman.pid"
	chown "$TEST_UID:$TEST_GID" "$TEST_RUNDIR/podman/service.log" "$TEST_RUNDIR/podman/podman.pid"
	# shellcheck disable=SC2016 # $0 is expanded by the inner sh
	start_service "$sock" "$TEST_RUNDIR/podman/service.log" \
		setpriv --reuid="$TEST_UID" --regid="$TEST_GID" --init-groups \
		env -i HOME="$TEST_HOME" USER="$TEST_USER" LOGNAME="$TEST_USER" \
		PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		XDG_RUNTIME_DIR="$TEST_RUNDIR" \
		sh -c 'cd / && exec podman system service --time=0 "unix://$0"' "$sock"

	echo "devaipod test host: rootless podman $(podman_version) as user $TEST_USER (set up by root)"
}

# kill_test_service: stop the test user's podman API service that start_service started (before a
# storage reset), by the pid it recorded.
kill_test_service() {
	local pidfile=$TEST_RUNDIR/podman/podman.pid pid i
	[ -f "$pidfile" ] || return 0
	pid=$(cat "$pidfile")
	if [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'podman system service'; then
		kill "$pid" 2>/dev/null || true
		for ((i = 0; i < 40; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.25
		done
	fi
	rm -f "$pidfile"
}

if [ "$(id -u)" -eq 0 ]; then
	setup_root
else
	setup_user
fi

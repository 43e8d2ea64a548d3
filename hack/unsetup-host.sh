#!/usr/bin/env bash
# hack/unsetup-host.sh [--dry-run]: undo what hack/setup-host.sh changed on this machine as root
# (`make unsetup`), from its record /var/lib/devaipod/setup-changes, newest change first: the test
# user's pods, images and podman service go with the user. --dry-run says what it would undo.
# Nothing that setup-host did not record is touched; a change that is already gone is skipped.
set -euo pipefail

CHANGES=${DEVAIPOD_SETUP_CHANGES:-/var/lib/devaipod/setup-changes}
dry=""
[ "${1:-}" = --dry-run ] && dry=1

say() { printf 'unsetup-host: %s\n' "$*" >&2; }
die() {
	say "error: $*"
	exit 1
}
# undo WHAT CMD...: say WHAT, and run CMD unless this is a dry run.
undo() {
	local what=$1
	shift
	say "${dry:+would }undo: $what"
	[ -n "$dry" ] || "$@" || say "warning: could not $what"
}

[ -f "$CHANGES" ] || {
	say "nothing to undo: $CHANGES does not exist (setup-host changed nothing as root here, or this ran before)"
	exit 0
}
[ -n "$dry" ] || [ "$(id -u)" -eq 0 ] || die "run it as root (setup-host's changes are root's); --dry-run says what it would undo"

remove_user() {
	local user=$1 uid home
	uid=$(id -u "$user" 2>/dev/null) || return 0
	home=$(getent passwd "$user" | cut -d: -f6)
	# Its pods, images and volumes first (their processes run under its subordinate ids), then
	# its podman service: userdel refuses a user with processes.
	(cd / && timeout 300 setpriv --reuid="$uid" --regid="$(id -g "$user")" --init-groups \
		env -i HOME="$home" USER="$user" PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		XDG_RUNTIME_DIR="/run/user/$uid" podman system reset -f) >/dev/null 2>&1 || true
	pkill -u "$uid" 2>/dev/null || true
	sleep 1
	pkill -KILL -u "$uid" 2>/dev/null || true
	# Rootless overlay mounts of its containers, if any are left.
	findmnt -rno TARGET | grep "^$home/" | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
	userdel -r "$user" 2>/dev/null || userdel "$user"
}

# remove_toml_key FILE SECTION KEY: drop the KEY line under [SECTION] that setup-host added.
remove_toml_key() {
	local file=$1 section=$2 key=$3 tmp
	[ -f "$file" ] || return 0
	tmp=$(mktemp "$file.XXXXXX")
	awk -v s="$section" -v k="$key" '
		/^[[:space:]]*\[/ { in_s = ($0 ~ "^[[:space:]]*\\[" s "\\][[:space:]]*(#.*)?$") }
		in_s && $0 ~ "^[[:space:]]*" k "[[:space:]]*=" { next }
		{ print }' "$file" >"$tmp"
	chmod 0644 "$tmp"
	mv "$tmp" "$file"
}

packages=() mounts=()
mapfile -t lines < <(tac "$CHANGES")
for line in "${lines[@]}"; do
	read -r kind a b c <<<"$line"
	case $kind in
	package) packages+=("$a") ;;
	# Once the user is gone: its podman service holds the runtime dir's tmpfs.
	mount) mounts+=("$a") ;;
	user) undo "remove the user $a, its home, pods, images and podman service" remove_user "$a" ;;
	subid) undo "remove $b's ids from $a" sed -i "/^$b:/d" "$a" ;;
	file) undo "remove $a" rm -f "$a" ;;
	tomlkey) undo "remove [$b] $c from $a" remove_toml_key "$a" "$b" "$c" ;;
	mode) undo "chmod $b $a" chmod "$b" "$a" ;;
	propagation) undo "mount --make-$b $a" mount "--make-$b" "$a" ;;
	sysctl) undo "sysctl $a=$b" sysctl -q -w "$a=$b" ;;
	*) say "warning: $CHANGES has a line this script does not know: $line" ;;
	esac
done
for m in "${mounts[@]}"; do
	undo "unmount $m" sh -c '! mountpoint -q "$1" || umount "$1"; rmdir "$1" 2>/dev/null || :' sh "$m"
done
if [ ${#packages[@]} -gt 0 ]; then
	undo "apt-get remove ${packages[*]} (the packages setup-host installed)" \
		env DEBIAN_FRONTEND=noninteractive apt-get remove -y -q "${packages[@]}"
fi
[ -n "$dry" ] || { rm -f "$CHANGES" && rmdir --ignore-fail-on-non-empty "$(dirname "$CHANGES")"; }
say "${dry:+would have }undone every change setup-host recorded"

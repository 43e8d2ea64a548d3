#!/usr/bin/env bash
# hack/build-images.sh: build devaipod's images into the calling user's podman storage (`make images`).
#
#   localhost/devaipod-helper:latest   FROM scratch: bin/devaipod-helper, bin/devaipod-gator plus
#                                      images/helper/*; labelled io.devaipod.version with the
#                                      version of those binaries (`devaipod-helper version`: the
#                                      -X main.Version of make build), which up and doctor compare
#                                      with the CLI's
#   localhost/devaipod-default:latest  Debian bookworm minbase rootfs (mmdebstrap) with git,
#                                      ca-certificates, curl, busybox, nodejs, npm, the user agent
#                                      (1000:1000), /workspaces and opencode from npm
#
# No container registry is involved: the helper is built with --pull=never, the default image is
# a rootfs made from the Debian mirror that this machine's apt sources name, then `podman import`ed.
# Each image carries the hash of its inputs in the label io.devaipod.inputs and is skipped when
# that label is current. The default rootfs tarball is cached under
# ${XDG_CACHE_HOME:-~/.cache}/devaipod/, keyed by the same hash.
#
# Environment:
#   DEVAIPOD_OPENCODE_VERSION        opencode-ai version from npm (default below)
#   DEVAIPOD_DEBIAN_MIRROR           Debian archive URL, instead of the one from the apt sources
#   DEVAIPOD_DEBIAN_SECURITY_MIRROR  Debian security archive URL (with DEVAIPOD_DEBIAN_MIRROR)
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd -P)
SELF=$REPO/hack/build-images.sh
HELPER_IMAGE=localhost/devaipod-helper:latest
DEFAULT_IMAGE=localhost/devaipod-default:latest
LABEL=io.devaipod.inputs
VERSION_LABEL=io.devaipod.version
SUITE=bookworm
ROOTFS_PACKAGES=git,ca-certificates,curl,busybox,nodejs,npm,less,procps
OPENCODE_VERSION=${DEVAIPOD_OPENCODE_VERSION:-1.18.33}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/devaipod

die() {
	printf 'build-images: error: %s\n' "$*" >&2
	exit 1
}
warn() { printf 'build-images: warning: %s\n' "$*" >&2; }
say() { printf 'build-images: %s\n' "$*"; }

# fail_with_log LOG MESSAGE: show the end of LOG, then die.
fail_with_log() {
	tail -n 30 "$1" >&2 || true
	die "$2 (full log: $1)"
}

sha() { sha256sum | cut -c1-64; }

# image_label IMAGE: the inputs hash IMAGE was built from, empty when it does not exist.
image_label() { podman image inspect --format "{{index .Labels \"$LABEL\"}}" "$1" 2>/dev/null || true; }
image_id() { podman image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }

# drop_old_image OLD_ID IMAGE: remove the image IMAGE pointed to before a rebuild, unless it is still
# IMAGE or in use (then podman refuses and it stays).
drop_old_image() {
	if [ -n "$1" ] && [ "$1" != "$(image_id "$2")" ]; then
		podman rmi "$1" >/dev/null 2>&1 || true
	fi
}

# ---------------------------------------------------------------------------------------------
# helper image
# ---------------------------------------------------------------------------------------------
build_helper() {
	# The helper (mounted into every container; the proxy) and the gator (its own binary, so that
	# the helper stays small) both go into this image.
	local -a bins=(devaipod-helper devaipod-gator)
	local src=$REPO/images/helper b
	for b in "${bins[@]}"; do
		[ -f "$REPO/bin/$b" ] || die "$REPO/bin/$b is missing: run 'make build' first"
	done
	[ -f "$src/Containerfile" ] || die "$src/Containerfile is missing"
	# The version the binaries were built with, asked from the helper itself (make images does not
	# rebuild them, so the tree's `git describe` may be another).
	local version
	version=$("$REPO/bin/devaipod-helper" version 2>/dev/null) && [ -n "$version" ] ||
		die "$REPO/bin/devaipod-helper version failed: rebuild it with 'make build'"

	local hash
	hash=$({
		sha <"$SELF"
		printf 'version %s\n' "$version"
		for b in "${bins[@]}"; do
			printf '%s ' "$b"
			sha <"$REPO/bin/$b"
		done
		(cd "$src" && find . -type f -printf '%P %m\n' | LC_ALL=C sort)
		(cd "$src" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum)
	} | sha)
	if [ "$(image_label "$HELPER_IMAGE")" = "$hash" ]; then
		return 0
	fi

	say "building helper image (devaipod $version)..."
	local ctx old log=$WORK/helper-build.log
	ctx=$WORK/helper-context
	mkdir -p "$ctx"
	cp -a "$src/." "$ctx/"
	for b in "${bins[@]}"; do
		cp "$REPO/bin/$b" "$ctx/$b"
		chmod 0755 "$ctx/$b"
	done
	old=$(image_id "$HELPER_IMAGE")
	podman build --pull=never --layers=false --label "$LABEL=$hash" --label "$VERSION_LABEL=$version" \
		-t "$HELPER_IMAGE" \
		-f "$ctx/Containerfile" "$ctx" >"$log" 2>&1 ||
		fail_with_log "$log" "podman build of $HELPER_IMAGE failed"
	drop_old_image "$old" "$HELPER_IMAGE"
}

# ---------------------------------------------------------------------------------------------
# default image
# ---------------------------------------------------------------------------------------------

# apt_records: one line per enabled entry of the machine's apt sources, in both formats:
# TYPE<TAB>URI<TAB>SUITE<TAB>COMPONENTS<TAB>SIGNED-BY (signed-by only when it is a path).
apt_records() {
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		awk '
			/^[[:space:]]*(#|$)/ { next }
			{
				sub(/[[:space:]]#.*/, "")
				i = 2; opts = ""
				if ($2 ~ /^\[/) {
					opts = $2; i = 3
					while (opts !~ /\]$/ && i <= NF) { opts = opts " " $i; i++ }
				}
				comps = ""
				for (j = i + 2; j <= NF; j++) comps = comps (comps == "" ? "" : " ") $j
				sb = ""
				if (match(opts, /signed-by=[^] ]+/)) sb = substr(opts, RSTART + 10, RLENGTH - 10)
				printf "%s\t%s\t%s\t%s\t%s\n", $1, $i, $(i + 1), comps, sb
			}' "$f"
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk '
			function flush(  nt, nu, ns, a, b, c, T, U, S) {
				if (types != "" && tolower(enabled) != "no") {
					nt = split(types, T, /[[:space:]]+/); nu = split(uris, U, /[[:space:]]+/)
					ns = split(suites, S, /[[:space:]]+/)
					for (a = 1; a <= nt; a++) for (b = 1; b <= nu; b++) for (c = 1; c <= ns; c++)
						printf "%s\t%s\t%s\t%s\t%s\n", T[a], U[b], S[c], comps, sb
				}
				types = uris = suites = comps = sb = enabled = ""
			}
			/^[[:space:]]*#/ { next }
			/^[[:space:]]*$/ { flush(); next }
			/^[[:space:]]/ { next }   # continuation line (an inline key)
			{
				key = tolower($0); sub(/:.*/, "", key)
				val = $0; sub(/^[^:]*:[[:space:]]*/, "", val); sub(/[[:space:]]+$/, "", val)
				if (key == "types") types = val
				else if (key == "uris") uris = val
				else if (key == "suites") suites = val
				else if (key == "components") comps = val
				else if (key == "signed-by" && val ~ /^\//) sb = val
				else if (key == "enabled") enabled = val
			}
			END { flush() }' "$f"
	done
}

# debian_sources: the sources.list lines for the rootfs: the machine's Debian mirror (the entry for
# its own release, component main, signed by Debian's archive keyring or by nothing in particular)
# with SUITE, SUITE-updates and SUITE-security.
debian_sources() {
	local main="" sec="" upd="" msb="" ssb="" codename=""
	# shellcheck source=/dev/null
	codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}") || true
	if [ -n "${DEVAIPOD_DEBIAN_MIRROR:-}" ]; then
		main=$DEVAIPOD_DEBIAN_MIRROR upd=1 sec=${DEVAIPOD_DEBIAN_SECURITY_MIRROR:-}
	else
		local type uri suite comps sb
		while IFS=$'\t' read -r type uri suite comps sb; do
			if [ "$type" != deb ] || [[ " $comps " != *" main "* ]]; then continue; fi
			[ -z "$sb" ] || [[ "$sb" == *debian-archive* ]] || continue
			case "$suite" in
			"$SUITE" | "$codename")
				[ -n "$main" ] || { main=$uri msb=$sb; } ;;
			"$SUITE-updates" | "$codename-updates") upd=1 ;;
			"$SUITE-security" | "$codename-security" | "$SUITE/updates" | "$codename/updates")
				[ -n "$sec" ] || { sec=$uri ssb=$sb; } ;;
			esac
		done < <(apt_records)
		[ -n "$main" ] || die "found no Debian mirror in /etc/apt/sources.list or /etc/apt/sources.list.d/ (an enabled 'deb' entry for $SUITE${codename:+ or $codename} with component main); set DEVAIPOD_DEBIAN_MIRROR to a Debian archive URL"
	fi
	local o=""
	[ -n "$msb" ] && [ -f "$msb" ] && o="[signed-by=$msb] "
	echo "deb $o$main $SUITE main"
	[ -z "$upd" ] || echo "deb $o$main $SUITE-updates main"
	o=""
	[ -n "$ssb" ] && [ -f "$ssb" ] && o="[signed-by=$ssb] "
	[ -z "$sec" ] || echo "deb $o$sec $SUITE-security main"
}

# install_opencode DIR LOG: install opencode-ai from npm under DIR and copy its native executable
# to DIR/opencode; prints that path, or nothing (with a warning) when it cannot.
install_opencode() {
	local dir=$1 log=$2 arch c
	if ! command -v npm >/dev/null 2>&1; then
		warn "npm is not installed, so the default image gets no opencode (apt-get install npm)"
		return 0
	fi
	case "$(uname -m)" in
	x86_64) arch=x64 ;;
	aarch64) arch=arm64 ;;
	*) arch=$(uname -m) ;;
	esac
	# --prefix also moves npm's global config ($prefix/etc/npmrc), which may hold settings this
	# machine needs (a cafile for a TLS-intercepting proxy): keep the usual one.
	local globalconfig
	globalconfig=$(cd / && npm config get globalconfig 2>/dev/null) || globalconfig=""
	if ! npm install --prefix "$dir/npm" ${globalconfig:+--globalconfig "$globalconfig"} \
		--no-audit --no-fund --loglevel=error "opencode-ai@$OPENCODE_VERSION" >>"$log" 2>&1; then
		tail -n 10 "$log" >&2 || true
		warn "npm install opencode-ai@$OPENCODE_VERSION failed, so the default image gets no opencode (log: $log)"
		return 0
	fi
	# opencode-ai's own bin is a launcher (or, after its postinstall, a link to the binary); the
	# binary itself lives in a platform package. Take the first that runs here (the baseline
	# build is for CPUs without AVX2); glibc builds only, the rootfs is Debian.
	local m=$dir/npm/node_modules
	for c in "$m/opencode-linux-$arch/bin/opencode" "$m/opencode-linux-$arch-baseline/bin/opencode" \
		"$m/opencode-ai/bin/opencode.exe" "$m/opencode-ai/bin/opencode"; do
		[ -f "$c" ] || continue
		[ "$(head -c 4 "$c" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
		mkdir -p "$dir/home"
		env -u XDG_CONFIG_HOME -u XDG_DATA_HOME -u XDG_CACHE_HOME -u XDG_STATE_HOME HOME="$dir/home" \
			timeout 60 "$c" --version >>"$log" 2>&1 || continue
		cp "$c" "$dir/opencode"
		chmod 0755 "$dir/opencode"
		echo "$dir/opencode"
		return 0
	done
	warn "npm installed opencode-ai@$OPENCODE_VERSION but no opencode executable for linux-$arch runs here, so the default image gets no opencode (log: $log)"
}

# build_rootfs OUT FLAGFILE LOG: make the rootfs tarball OUT; writes "no-opencode" to FLAGFILE
# when opencode could not be added.
build_rootfs() {
	local out=$1 flag=$2 log=$3
	command -v mmdebstrap >/dev/null 2>&1 ||
		die "mmdebstrap is not installed: apt-get install mmdebstrap (hack/setup-host.sh does this as root)"

	local mode=unshare
	if [ "$(id -u)" -eq 0 ]; then
		mode=root
	else
		grep -q "^$(id -un):" /etc/subuid 2>/dev/null ||
			die "mmdebstrap --mode=unshare needs a subordinate uid range for $(id -un) in /etc/subuid (as root: usermod --add-subuids 100000-165535 --add-subgids 100000-165535 $(id -un))"
		command -v newuidmap >/dev/null 2>&1 ||
			die "mmdebstrap --mode=unshare needs newuidmap: apt-get install uidmap"
	fi

	local -a sources aptopts=()
	mapfile -t sources < <(debian_sources)
	# The machine's apt knows how to reach its mirror (e.g. a frozen snapshot needs
	# Check-Valid-Until off, or a proxy): give the rootfs's apt the same settings.
	local line
	while IFS= read -r line; do
		aptopts+=("--aptopt=$line")
	done < <(apt-config dump 2>/dev/null | grep -E '^Acquire::(Check-Valid-Until|Check-Date|https?::Proxy) ' || true)

	local ocdir=$WORK/opencode oc
	mkdir -p "$ocdir"
	oc=$(install_opencode "$ocdir" "$log")
	# shellcheck disable=SC2016 # $1 is expanded by mmdebstrap's hook shell
	local -a hooks=(
		# The agent user the pod runs the agent as, and the workspace mount point.
		'--customize-hook=chroot "$1" useradd --create-home --uid 1000 --user-group --shell /bin/bash agent && chmod 0755 "$1/home/agent" && install -d -m 0755 "$1/workspaces"'
	)
	if [ -n "$oc" ]; then
		# copy-in keeps the file's owner from outside (the building user's uid).
		# shellcheck disable=SC2016 # $1 is expanded by mmdebstrap's hook shell
		hooks+=("--customize-hook=copy-in $oc /usr/local/bin" '--customize-hook=chown 0:0 "$1/usr/local/bin/opencode"')
		# opencode npm-installs @opencode-ai/plugin into every writable config folder at start,
		# unless a lock file says it is there (docs/notes-opencode.md 3.3); in the sandbox the proxy
		# would refuse it. podman copies this folder into the agent's new HOME volume.
		local deps="{\"dependencies\":{\"@opencode-ai/plugin\":\"$OPENCODE_VERSION\"}}"
		local lock="{\"lockfileVersion\":3,\"packages\":{\"\":$deps}}"
		# shellcheck disable=SC2016 # $1 is expanded by mmdebstrap's hook shell
		hooks+=('--customize-hook=d="$1/home/agent/.config/opencode" && mkdir -p "$d/node_modules" && '"printf '%s\\n' '$deps' >\"\$d/package.json\" && printf '%s\\n' '$lock' >\"\$d/package-lock.json\""' && chown -R 1000:1000 "$1/home/agent/.config"')
	else
		echo no-opencode >"$flag"
	fi

	{
		echo "== mmdebstrap --mode=$mode $SUITE; sources:"
		printf '   %s\n' "${sources[@]}"
	} >>"$log"
	"$REPO/hack/progress.sh" --log "$log" "build-images: mmdebstrap $SUITE" mmdebstrap --mode="$mode" --variant=minbase --include="$ROOTFS_PACKAGES" \
		"${aptopts[@]}" \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/info/*' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-include=/usr/share/locale/locale.alias' \
		"${hooks[@]}" \
		"$SUITE" "$out" "${sources[@]}" || {
		local hint="see the log"
		[ "$mode" = unshare ] && hint="mmdebstrap --mode=unshare needs unprivileged user namespaces, newuidmap/newgidmap and /etc/subuid, /etc/subgid ranges for $(id -un); as root it uses --mode=root"
		fail_with_log "$log" "mmdebstrap failed to make the $SUITE rootfs ($hint)"
	}
}

# run_args: extra podman run flags this machine needs when the user's config lacks them.
run_args() {
	local -a a=()
	if [ "$(podman info --format '{{.Host.OCIRuntime.Name}}' 2>/dev/null)" != runc ] && command -v runc >/dev/null 2>&1; then
		a+=(--runtime runc)
	fi
	# Rootful: the VM lacks CAP_SYS_RESOURCE, so containers must not keep the host's high limits.
	[ "$(id -u)" -ne 0 ] || a+=(--ulimit nofile=1024:1024 --ulimit nproc=4096:4096)
	echo "${a[@]}"
}

build_default() {
	local hash
	hash=$(printf '%s\n' "$(sha <"$SELF")" "opencode-ai@$OPENCODE_VERSION" "$SUITE" "$(uname -m)" | sha)
	if [ "$(image_label "$DEFAULT_IMAGE")" = "$hash" ]; then
		return 0
	fi

	local tarball=$CACHE/default-rootfs-$hash.tar log=$CACHE/default-build.log label=$hash
	if [ -f "$tarball" ]; then
		say "importing default image from the cached rootfs..."
		: >"$log"
	else
		say "building default image (Debian $SUITE rootfs, ~1 min)..."
		: >"$log"
		local flag=$WORK/rootfs-flag
		build_rootfs "$WORK/rootfs.tar" "$flag" "$log"
		if [ -s "$flag" ]; then
			# Not cached, and labelled so that the next run tries to add opencode again.
			tarball=$WORK/rootfs.tar label=$hash-no-opencode
		else
			rm -f "$CACHE"/default-rootfs-*.tar
			mv "$WORK/rootfs.tar" "$tarball"
		fi
	fi

	local old
	old=$(image_id "$DEFAULT_IMAGE")
	podman import \
		--change 'CMD ["/bin/bash"]' \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change "LABEL $LABEL=$label" \
		"$tarball" "$DEFAULT_IMAGE" >>"$log" 2>&1 ||
		fail_with_log "$log" "podman import of $DEFAULT_IMAGE failed"

	# shellcheck disable=SC2046 # run_args is a list of flags
	if ! podman run --rm $(run_args) "$DEFAULT_IMAGE" sh -ec '
		git --version; curl --version | head -n 1; busybox | head -n 1; node --version; npm --version
		id agent; test -d /workspaces
		if [ -e /usr/local/bin/opencode ]; then echo "opencode $(opencode --version)"; fi' >>"$log" 2>&1; then
		podman rmi "$DEFAULT_IMAGE" >/dev/null 2>&1 || true
		fail_with_log "$log" "the freshly built $DEFAULT_IMAGE does not work (removed it)"
	fi
	drop_old_image "$old" "$DEFAULT_IMAGE"
}

command -v podman >/dev/null 2>&1 ||
	die "podman is not installed (run hack/setup-host.sh as root, or apt-get install podman)"
mkdir -p "$CACHE"
# One build at a time per user: a second `make images` waits for the first.
exec 9>"$CACHE/build.lock"
flock 9
WORK=$(mktemp -d "${TMPDIR:-/tmp}/devaipod-images.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

build_helper
build_default

#!/usr/bin/env bash
# hack/cli-pod.sh: build and remove a devaipod-like pod with plain `podman` CLI commands, one
# process per step, the way the Rust devaipod (the anchor) does it. hack/bench.sh times it against
# `devaipod up` / `devaipod delete`.
#
#   hack/cli-pod.sh up REPO NAME      create pod devaipod-NAME from the git checkout REPO, start it,
#                                     wait until the agent's server answers through the workspace
#   hack/cli-pod.sh delete NAME       remove the pod, its containers and its volumes
#
# The pod is the one `devaipod up` builds (see `devaipod up --dry-run --output json`): the same
# three volumes (workspace, agent-home, agent-sock), the same workspace and agent containers with
# the same security settings, helper image mount, entrypoints and environment. What differs is
# only how podman is driven, and the way the repository gets into the volume, which is the anchor's:
#
#   podman volume exists / volume create            (workspace volume)
#   podman rm -f --ignore NAME-workspace-init       (the anchor removes a stale init container)
#   podman run --rm ... IMAGE /bin/sh -c 'git clone /mnt/host-git ...; chown -R 1000:1000 ...'
#   podman pod create
#   podman volume create x2 (agent-sock, agent-home: owned by 1000:1000 like devaipod's; the
#                             anchor lets `podman create -v` make agent-home implicitly)
#   podman create (workspace)
#   podman create (agent)
#   podman pod start
#   podman exec WORKSPACE devaipod-helper wait-http ...   (readiness, see CLI_POD_READY)
#
# Delete is the anchor's `podman pod rm -f` with `-t 0` (the anchor first runs `podman pod stop`
# with the default timeout, which only adds waiting) plus `podman volume rm`, which the anchor
# leaks.
#
# Environment:
#   CLI_POD_IMAGE          workspace and agent image (default localhost/devaipod-default:latest)
#   CLI_POD_HELPER_IMAGE   helper image (default localhost/devaipod-helper:latest)
#   CLI_POD_AGENT_CMD      the agent's command, split at spaces (no quoting; default: opencode
#                          serve on 127.0.0.1:4096, devaipod's default)
#   CLI_POD_READY          how to wait for the agent:
#                            wait-http (default): one `podman exec` of the helper's wait-http,
#                              which polls every 200 ms inside the container; this is what devaipod
#                              does, so both sides pay the same readiness cost
#                            poll: the anchor's loop: `podman exec WS sh -c 'curl ...'` every
#                              500 ms until it succeeds (any HTTP answer counts, as with
#                              wait-http: the stand-in agent has no /global/health)
#   CLI_POD_TIMEOUT        seconds to wait for the agent (default 60)
set -euo pipefail

IMAGE=${CLI_POD_IMAGE:-localhost/devaipod-default:latest}
HELPER_IMAGE=${CLI_POD_HELPER_IMAGE:-localhost/devaipod-helper:latest}
AGENT_CMD=${CLI_POD_AGENT_CMD:-opencode serve --hostname 127.0.0.1 --port 4096}
READY=${CLI_POD_READY:-wait-http}
TIMEOUT=${CLI_POD_TIMEOUT:-60}
PORT=4096
HELPER=/opt/devaipod/devaipod-helper
SOCK_DIR=/run/devaipod/agent

die() {
	printf 'cli-pod: error: %s\n' "$*" >&2
	exit 1
}

usage() {
	sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

check_name() {
	[[ "$1" =~ ^[a-z0-9][a-z0-9-]*$ ]] || die "invalid NAME $1: lower-case letters, digits and -"
}

cmd_up() {
	local repo=$1 name=$2
	check_name "$name"
	[ -d "$repo/.git" ] || die "$repo is not a git checkout (no .git)"
	repo=$(cd "$repo" && pwd -P)
	local pod=devaipod-$name
	local ws_vol=$pod-workspace home_vol=$pod-agent-home sock_vol=$pod-agent-sock
	local ws=$pod-workspace agent=$pod-agent
	local project commit remote workdir
	project=$(basename "$repo")
	workdir=/workspaces/$project
	# The anchor reads these with git on the host before it starts.
	commit=$(git -C "$repo" rev-parse --verify 'HEAD^{commit}')
	remote=$(git -C "$repo" remote get-url origin 2>/dev/null || true)
	local -a agent_cmd
	read -r -a agent_cmd <<<"$AGENT_CMD"

	# 1. The workspace volume, filled by an init container that clones the host's .git.
	if ! podman volume exists "$ws_vol"; then
		podman volume create --label "io.devaipod.bench=cli-pod" "$ws_vol" >/dev/null
	fi
	podman rm -f --ignore "$ws-init" >/dev/null
	local script remote_line=""
	if [ -n "$remote" ]; then
		remote_line="git remote set-url origin '$remote' || git remote add origin '$remote'"
	fi
	script=$(
		cat <<-EOF
			set -e
			mkdir -p "$(dirname "$workdir")"
			git config --global --add safe.directory /mnt/host-git
			git clone --quiet --no-hardlinks /mnt/host-git "$workdir"
			cd "$workdir"
			git checkout --quiet "$commit"
			$remote_line
			chown -R 1000:1000 /workspaces
		EOF
	)
	if ! podman run --rm --name "$ws-init" -v "$ws_vol:/workspaces" \
		--security-opt label=disable --user 0 -v "$repo/.git:/mnt/host-git:ro" \
		"$IMAGE" /bin/sh -c "$script" >/dev/null; then
		podman volume rm -f "$ws_vol" >/dev/null 2>&1 || true
		die "failed to clone into the workspace volume"
	fi

	# 2. The pod. devaipod shares net, uts and ipc (the agent leaves net and ipc).
	podman pod create --name "$pod" --share net,uts,ipc \
		--label "io.devaipod.repo=$repo" --label "io.devaipod.commit=$commit" \
		--label "io.devaipod.bench=cli-pod" >/dev/null

	# 3. The agent's volumes, owned by its user (devaipod creates all three with uid/gid 1000);
	# the socket volume first, because the workspace mounts it too.
	podman volume create --opt o=uid=1000,gid=1000 --label "io.devaipod.bench=cli-pod" "$sock_vol" >/dev/null
	podman volume create --opt o=uid=1000,gid=1000 --label "io.devaipod.bench=cli-pod" "$home_vol" >/dev/null

	# 4. The workspace container: devaipod's plan, flag for flag.
	podman create --pod "$pod" --name "$ws" \
		-e "DEVAIPOD_AGENT_URL=http://127.0.0.1:$PORT" \
		-e "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/devaipod/bin" \
		-e GIT_CONFIG_COUNT=1 -e GIT_CONFIG_KEY_0=safe.directory -e "GIT_CONFIG_VALUE_0=$workdir" \
		-w "$workdir" \
		-v "$ws_vol:/workspaces" -v "$sock_vol:$SOCK_DIR:ro" \
		--mount "type=image,source=$HELPER_IMAGE,destination=/opt/devaipod" \
		--stop-timeout 5 \
		--entrypoint "[\"$HELPER\",\"init\",\"--forward\",\"tcp:127.0.0.1:$PORT=unix:$SOCK_DIR/agent.sock\"]" \
		"$IMAGE" >/dev/null

	# 5. The agent container: devaipod's containment, flag for flag.
	podman create --pod "$pod" --name "$agent" \
		-e HOME=/home/agent -e USER=agent -e TMPDIR=/tmp \
		-w "$workdir" --user 1000:1000 \
		--network none --ipc private \
		--cap-drop ALL --security-opt no-new-privileges \
		--read-only --read-only-tmpfs=false --tmpfs /tmp:rw,nosuid,nodev,mode=1777,size=512m \
		-v "$ws_vol:/workspaces" -v "$home_vol:/home/agent" -v "$sock_vol:$SOCK_DIR" \
		--mount "type=image,source=$HELPER_IMAGE,destination=/opt/devaipod" \
		--stop-timeout 5 \
		--entrypoint "[\"$HELPER\",\"init\",\"--expose\",\"unix:$SOCK_DIR/agent.sock=tcp:127.0.0.1:$PORT\",\"--\"]" \
		"$IMAGE" "${agent_cmd[@]}" >/dev/null

	# 6. Start, then wait until the agent answers through the workspace's bridge.
	podman pod start "$pod" >/dev/null
	case $READY in
	wait-http)
		podman exec "$ws" "$HELPER" wait-http --timeout "${TIMEOUT}s" "http://127.0.0.1:$PORT" ||
			die "agent did not become ready within ${TIMEOUT}s"
		;;
	poll)
		local deadline=$((SECONDS + TIMEOUT))
		until podman exec "$ws" /bin/sh -c "curl -s -o /dev/null 'http://127.0.0.1:$PORT/' >/dev/null 2>&1"; do
			[ "$SECONDS" -lt "$deadline" ] || die "agent did not become ready within ${TIMEOUT}s"
			sleep 0.5
		done
		;;
	*) die "CLI_POD_READY must be wait-http or poll, not $READY" ;;
	esac
}

cmd_delete() {
	local name=$1
	check_name "$name"
	local pod=devaipod-$name
	podman pod rm -f -t 0 "$pod" >/dev/null
	podman volume rm "$pod-workspace" "$pod-agent-home" "$pod-agent-sock" >/dev/null
}

case ${1:-} in
up)
	[ $# -eq 3 ] || usage
	cmd_up "$2" "$3"
	;;
delete)
	[ $# -eq 2 ] || usage
	cmd_delete "$2"
	;;
*) usage ;;
esac

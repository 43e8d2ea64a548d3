package plan

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/devaipod/devaipod/pod/source"
)

// Prefix starts the name of every podman object devaipod creates.
const Prefix = "devaipod-"

// Labels put on every object devaipod creates. LabelPod holds the short pod
// name; delete and gc find objects by it and by nothing else.
const (
	LabelPod     = "io.devaipod.pod"
	LabelRepo    = "io.devaipod.repo"
	LabelCommit  = "io.devaipod.commit"
	LabelRole    = "io.devaipod.role"
	LabelVersion = "io.devaipod.version"
	// LabelAgentURL is where the workspace reaches the agent's server.
	LabelAgentURL = "io.devaipod.agent-url"
	// LabelTask is the task the pod was started with (shortened).
	LabelTask = "io.devaipod.task"
	// LabelLifecycle keeps the devcontainer's postStart and postAttach
	// commands (JSON) for start and attach.
	LabelLifecycle = "io.devaipod.lifecycle"
	// LabelExec keeps who `devaipod exec` and attach run workspace
	// commands as (the devcontainer's remote user and remoteEnv, JSON).
	LabelExec = "io.devaipod.exec"
	// LabelVerify keeps the arguments of the pod's verify battery (JSON).
	LabelVerify = "io.devaipod.verify"
	// LabelPR is the number of the pull request the pod works on.
	LabelPR = "io.devaipod.pr"
	// LabelPool marks a pod made for the warm pool (devaipod pool): its
	// value is the fingerprint of the plan it was made from, which an up
	// must match to claim it.
	LabelPool = "io.devaipod.pool"
	// LabelClaimed is on the claim volume (VolumeClaim) an up creates to
	// take a pool pod: when it was claimed (RFC 3339), a slash and a
	// random suffix that tells one claim from another.
	LabelClaimed = "io.devaipod.claimed"
	// LabelUp is on the pod: a random token of the up that made it, which
	// names the up's unfinished mark with the pod's name, so that the mark
	// is that pod's and no other's of the same name (on another podman
	// service, or a cluster).
	LabelUp = "io.devaipod.up"
	// LabelUntrusted is on the pod of a repository the person does not
	// trust (PlanInput.Untrusted): its workspace holds none of their
	// trusted values, which devaipod verify checks.
	LabelUntrusted = "io.devaipod.untrusted"
	// LabelNoModel is on the pod of an agent with no model it can reach
	// (Plan.NoModel), for status and list.
	LabelNoModel = "io.devaipod.no-model"
	// LabelSourceDir is on the pod of a local checkout: its folder, so
	// that a path request for it (or a folder holding it) says so.
	LabelSourceDir = "io.devaipod.source-dir"
)

// The pod's volumes, by what they hold; a volume is named with ObjectName.
const (
	// VolumeWorkspace holds the copy of the repository, shared by all.
	VolumeWorkspace = "workspace"
	// VolumeAgentGit is the agent's own git directory, mounted over the
	// repository's .git in the agent (and read-only in the gator, which
	// pushes its commits). The workspace's .git, in VolumeWorkspace, is
	// never visible to the agent.
	VolumeAgentGit = "agent-git"
	// VolumeAgentHome is the agent's HOME.
	VolumeAgentHome = "agent-home"
	// VolumeAgentSock, VolumeProxySock and VolumeGatorSock hold the unix
	// sockets of the agent's server, the proxy and the gator.
	VolumeAgentSock = "agent-sock"
	VolumeProxySock = "proxy-sock"
	VolumeGatorSock = "gator-sock"
	// VolumeProxyState and VolumeGatorState keep the sidecars' policy
	// and audit logs.
	VolumeProxyState = "proxy-state"
	VolumeGatorState = "gator-state"
	// VolumeClaim is the token of a pool pod that an up took: creating
	// it is the claim (podman refuses a second volume of the name), so
	// a pool pod serves one task only. It holds nothing.
	VolumeClaim = "claim"
	// VolumeHostShare holds the copies of host paths a person shared with
	// the agent (devaipod share, or an approved request), at HostShareDir.
	// Its root is root's: the agent writes only what was shared with it
	// read-write.
	VolumeHostShare = "host-share"
)

// HostShareDir is where the agent finds the host paths shared with it:
// HostShareDir + the path on the host.
const HostShareDir = "/host"

// Container roles; a container is named Prefix+NAME+"-"+role.
const (
	RoleWorkspace = "workspace"
	RoleAgent     = "agent"
	RoleProxy     = "proxy"
	RoleGator     = "gator"
)

// Roles lists the container roles, the workspace's first.
var Roles = []string{RoleWorkspace, RoleAgent, RoleProxy, RoleGator}

// maxNameLen keeps derived object names (devaipod-NAME-agent-home) well under
// the limits of podman and of unix socket paths.
const maxNameLen = 48

var validName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// NormalizeName accepts a pod name with or without the devaipod- prefix and
// returns the short name, or an error saying what is wrong with it.
func NormalizeName(name string) (string, error) {
	short := strings.TrimPrefix(name, Prefix)
	if short == "" {
		return "", fmt.Errorf("pod name is empty")
	}
	if len(short) > maxNameLen {
		return "", fmt.Errorf("pod name %q is longer than %d characters", short, maxNameLen)
	}
	if !validName.MatchString(short) {
		return "", fmt.Errorf("pod name %q is invalid: use lower-case letters, digits and '-', starting and ending with a letter or digit", short)
	}
	return short, nil
}

// PodName is the podman name of the pod called short.
func PodName(short string) string { return Prefix + short }

// ContainerName is the podman name of a container of the pod.
func ContainerName(short, role string) string { return Prefix + short + "-" + role }

// ObjectName is the podman name of one of the pod's volumes or secrets.
func ObjectName(short, what string) string { return Prefix + short + "-" + what }

// DeriveName makes a pod name from a project name and a short random suffix,
// so that two pods of the same repository never collide.
func DeriveName(project string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(project) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	base := strings.Trim(b.String(), "-")
	for strings.Contains(base, "--") {
		base = strings.ReplaceAll(base, "--", "-")
	}
	if base == "" {
		base = "project"
	}
	if len(base) > maxNameLen-7 {
		base = strings.TrimRight(base[:maxNameLen-7], "-")
	}
	return base + "-" + randomSuffix()
}

// DeriveNameFor makes a pod name for src: REPO-prN-xxxxxx for a pull
// request, else what DeriveName makes of the project name. The repository
// part is shortened so that -prN always survives.
func DeriveNameFor(src *source.Source) string {
	if src.PR <= 0 {
		return DeriveName(src.Project)
	}
	name := DeriveName(src.Project)
	cut := strings.LastIndexByte(name, '-')
	base, suffix := name[:cut], name[cut:]
	pr := "-pr" + strconv.Itoa(src.PR)
	if room := maxNameLen - len(pr) - len(suffix); len(base) > room {
		base = strings.TrimRight(base[:room], "-")
	}
	if base == "" {
		base = "project"
	}
	return base + pr + suffix
}

func randomSuffix() string {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

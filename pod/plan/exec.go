package plan

import (
	"strconv"

	"github.com/devaipod/devaipod/internal/helperargs"
)

// ExecAs is who workspace commands of `devaipod exec` and attach run as, as
// the devcontainer spec asks of tools that run commands in the container:
// the remote user (remoteUser, else containerUser, else runArgs' --user).
// The zero value is the container's own user. (remoteEnv is in the
// workspace's environment: a pod label holds no value.)
type ExecAs struct {
	User string `json:"user,omitempty"`
}

// Command returns how podman exec runs argv in the workspace as as says: the
// user to exec as ("" for the container's) and the command line. The
// helper's secret-env runs argv with as.Env, with the umask that keeps new
// files of the shared copy writable by the agent's group and, with secrets,
// with the trusted variables. For a user of its own it starts as root, which
// alone can read the trusted variables' files, then becomes that user, with
// the agent's group added: that group owns the shared copy of the
// repository, so any user can write it.
func (as ExecAs) Command(argv []string, secrets bool) (user string, cmd []string) {
	dir := ""
	if secrets {
		dir = SecretDir
	}
	env := helperargs.SecretEnv{Dir: dir, Umask: WorkspaceUmask, Command: argv}
	if as.User != "" {
		env.User, env.GroupAdd = as.User, []string{strconv.Itoa(AgentGID)}
		user = "0"
	}
	return user, HelperCommand(env)
}

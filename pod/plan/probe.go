package plan

import (
	"time"
)

// ReadyProbe is the workspace command that waits for the agent's server:
// any answer at its URL, or 2xx at its health path, with the pod's
// password when it has one.
func (p *Plan) ReadyProbe(timeout time.Duration) []string {
	cmd := []string{HelperBin, "wait-http", "--timeout", timeout.String()}
	if p.AgentHealth != "" {
		cmd = append(cmd, "--path", p.AgentHealth, "--status", "2xx")
	}
	return append(append(cmd, p.AgentAuth()...), p.AgentURL)
}

// AgentAuth are the helper's flags for the agent's password, which the
// workspace holds as a secret file.
func (p *Plan) AgentAuth() []string {
	if p.AgentUser == "" {
		return nil
	}
	return []string{"--user", p.AgentUser, "--password-file", SecretDir + "/" + PasswordVar}
}

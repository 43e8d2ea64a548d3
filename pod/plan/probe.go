package plan

import (
	"time"

	"github.com/devaipod/devaipod/internal/helperargs"
)

// ReadyProbe is the workspace command that waits for the agent's server:
// any answer at its URL, or 2xx at its health path, with the pod's
// password when it has one.
func (p *Plan) ReadyProbe(timeout time.Duration) []string {
	w := helperargs.WaitHTTP{Timeout: timeout, URL: p.AgentURL}
	if p.AgentHealth != "" {
		w.Path, w.Status = p.AgentHealth, "2xx"
	}
	w.User, w.PasswordFile = p.agentAuth()
	return HelperCommand(w)
}

// TaskCommand is the workspace command that hands the pod's task to the
// agent, with the pod's password when it has one.
func (p *Plan) TaskCommand() []string {
	t := helperargs.Task{URL: p.AgentURL, Text: p.Task}
	t.User, t.PasswordFile = p.agentAuth()
	return HelperCommand(t)
}

// agentAuth is the basic-auth user for the agent's password and the file
// in which the workspace holds it ("" for both when there is none).
func (p *Plan) agentAuth() (user, passwordFile string) {
	if p.AgentUser == "" {
		return "", ""
	}
	return p.AgentUser, SecretDir + "/" + PasswordVar
}

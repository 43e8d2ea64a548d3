package main

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devaipod/devaipod/internal/helperargs"
	"github.com/devaipod/devaipod/proxy"
)

// parseAs parses a command line the host writes with the helper's own flag
// set for that command, and returns its arguments after the flags.
func parseAs(t *testing.T, fs *flag.FlagSet, args []string, name string) []string {
	t.Helper()
	if len(args) == 0 || args[0] != name {
		t.Fatalf("%q does not start with the command %q", args, name)
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args[1:]); err != nil {
		t.Fatalf("the helper cannot parse what the host writes, %q: %v", args, err)
	}
	return fs.Args()
}

// TestHelperArgsRoundTrip: what the host writes with internal/helperargs,
// every field set, is what the helper reads, field by field. A flag the
// host writes and the helper does not know fails the parse.
func TestHelperArgsRoundTrip(t *testing.T) {
	t.Run("init", func(t *testing.T) {
		x := helperargs.Init{Canary: "tcp:127.0.0.1:3129",
			Forwards: []string{helperargs.Forward("127.0.0.1:3128", "/run/p.sock"), helperargs.Forward("127.0.0.1:8765", "/run/g.sock")},
			Exposes:  []string{helperargs.Expose("/run/a.sock", "127.0.0.1:4096")},
			ProxyCA:  "http://127.0.0.1:3128/devaipod/ca.pem", CADir: "/tmp/ca",
			Command: []string{"opencode", "serve", "--port", "4096"}}
		var o initOptions
		rest := parseAs(t, newInitFlagSet(&o), x.Args(), "init")
		var bridges []string
		for _, b := range o.bridges {
			bridges = append(bridges, b.String())
		}
		want := []string{"tcp:127.0.0.1:3128 -> unix:/run/p.sock", "tcp:127.0.0.1:8765 -> unix:/run/g.sock", "unix:/run/a.sock -> tcp:127.0.0.1:4096"}
		if o.canary != x.Canary || !slices.Equal(bridges, want) || !slices.Equal(rest, x.Command) || o.proxyCA != x.ProxyCA || o.caDir != x.CADir {
			t.Errorf("canary %q bridges %q command %q", o.canary, bridges, rest)
		}
	})
	t.Run("wait-http", func(t *testing.T) {
		x := helperargs.WaitHTTP{Timeout: 7 * time.Second, Path: "/global/health", Status: "2xx", User: "u", PasswordFile: "/p", URL: "http://127.0.0.1:4096"}
		var o waitOptions
		rest := parseAs(t, newWaitHTTPFlagSet(&o), x.Args(), "wait-http")
		if o.timeout != x.Timeout || o.path != x.Path || o.status != x.Status || o.user != x.User || o.passwordFile != x.PasswordFile || !slices.Equal(rest, []string{x.URL}) {
			t.Errorf("%+v %q", o, rest)
		}
	})
	t.Run("egress-check", func(t *testing.T) {
		x := helperargs.EgressCheck{Canary: "127.0.0.1:1", ExpectCanary: "127.0.0.1:2", Proxy: "http://127.0.0.1:3128"}
		var o egressOptions
		parseAs(t, newEgressFlagSet(&o), x.Args(), "egress-check")
		if o.canary != x.Canary || o.expectCanary != x.ExpectCanary || o.proxy != x.Proxy {
			t.Errorf("%+v", o)
		}
	})
	t.Run("secret-env", func(t *testing.T) {
		x := helperargs.SecretEnv{Dir: "", Umask: "0002", User: "dev", GroupAdd: []string{"1000"}, PrintHashes: true, Command: []string{"git", "status"}}
		o := secretEnvOptions{dir: "not-the-default"}
		rest := parseAs(t, newSecretEnvFlagSet(&o), x.Args(), "secret-env")
		if o.dir != "" || o.umask != x.Umask || o.user != x.User || !slices.Equal(o.groupAdd, x.GroupAdd) || len(o.env) != 0 || !o.hashes || !slices.Equal(rest, x.Command) {
			t.Errorf("%+v %q (an empty --dir must stay empty: no secrets)", o, rest)
		}
	})
	t.Run("proxy", func(t *testing.T) {
		x := helperargs.Proxy{Listen: "unix:/run/p.sock", Pod: "p", PolicyFile: "/var/policy.json", Allow: []string{"api.example.test", "*.example.test:8443"},
			AuditLogs: []string{"-", "/var/audit.log"}, Credentials: []string{"KEY=devaipod-KEY-salt@api.example.test,*.example.test:8443"},
			CredentialDir: "/run/secrets", UpstreamCA: "/run/secrets/CA",
			Ask: []string{"*.pkg.example.test", "git.example.test:22"}, AskTimeout: 90 * time.Second, ApprovalDir: "/var/approvals",
			ForbiddenPaths: []string{"/home/me/.ssh", "/home/me/.config/devaipod"}}
		var o proxyOptions
		parseAs(t, newProxyFlagSet(&o), x.Args(), "proxy")
		if o.listen.String() != x.Listen || o.pod != x.Pod || o.policyFile != x.PolicyFile || !slices.Equal(o.allow, x.Allow) ||
			!slices.Equal(o.auditLogs, x.AuditLogs) || !slices.Equal(o.credentials, x.Credentials) || o.credDir != x.CredentialDir || o.upstreamCA != x.UpstreamCA ||
			!slices.Equal(o.ask, x.Ask) || o.askTimeout != x.AskTimeout || o.approvalDir != x.ApprovalDir || !slices.Equal(o.forbidden, x.ForbiddenPaths) {
			t.Errorf("%+v", o)
		}
		// The host writes the approval folder even without ask rules, and
		// no timeout then: the helper's defaults hold.
		x = helperargs.Proxy{Listen: "unix:/run/p.sock", Pod: "p", PolicyFile: "/var/policy.json", ApprovalDir: "/var/approvals"}
		o = proxyOptions{}
		parseAs(t, newProxyFlagSet(&o), x.Args(), "proxy")
		if _, err := parseProxyFlags(x.Args()[1:], io.Discard); err != nil || len(o.ask) != 0 || o.askTimeout != proxy.DefaultAskTimeout {
			t.Errorf("without ask rules: %v %+v", err, o)
		}
	})
	t.Run("approvals", func(t *testing.T) {
		for _, x := range []helperargs.Approvals{
			{Dir: "/var/approvals", Op: "list"},
			{Dir: "/var/approvals", Op: "approve", ID: "net-0a1b2c3d", For: "pod", By: "me@host"},
			{Dir: "/var/approvals", Op: "approve", ID: "path-0a1b2c3d", RW: true, By: "me@host"},
			{Dir: "/var/approvals", Op: "reject", ID: "net-0a1b2c3d", Reason: "--use the mirror; not -that", By: "me@host"},
		} {
			var o approvalsOptions
			rest := parseAs(t, newApprovalsFlagSet(&o), x.Args(), "approvals")
			want := []string{x.Op}
			if x.ID != "" {
				want = append(want, x.ID)
			}
			if o.dir != x.Dir || o.scope != x.For || o.reason != x.Reason || o.by != x.By || o.rw != x.RW || !slices.Equal(rest, want) {
				t.Errorf("%+v %q; want %+v", o, rest, x)
			}
		}
	})
	t.Run("request-path", func(t *testing.T) {
		x := helperargs.RequestPath{RW: true, Reason: "--the fixtures; -not the code", Proxy: "http://127.0.0.1:3128", Timeout: 5 * time.Minute, JSON: true, Path: "/home/me/src/lib"}
		var o requestPathOptions
		fs := newRequestPathFlagSet(&o)
		fs.SetOutput(io.Discard)
		args := x.Args()
		if args[0] != "request-path" {
			t.Fatalf("%q", args)
		}
		paths, err := parseRequestPathArgs(fs, args[1:])
		if err != nil || !o.rw || o.reason != x.Reason || o.proxyURL != x.Proxy || o.timeout != x.Timeout || !o.json || !slices.Equal(paths, []string{x.Path}) {
			t.Errorf("%v %+v %q", err, o, paths)
		}
		// Unset fields: the helper's defaults.
		o = requestPathOptions{}
		fs = newRequestPathFlagSet(&o)
		paths, err = parseRequestPathArgs(fs, helperargs.RequestPath{Path: "/x"}.Args()[1:])
		if err != nil || o.rw || o.json || o.proxyURL != defaultRequestPathProxy || o.timeout != defaultRequestPathTimeout || !slices.Equal(paths, []string{"/x"}) {
			t.Errorf("defaults: %v %+v %q", err, o, paths)
		}
	})
	t.Run("audit-log", func(t *testing.T) {
		x := helperargs.AuditLog{Path: "/var/audit.log"}
		rest := parseAs(t, newAuditLogFlagSet(), x.Args(), "audit-log")
		if !slices.Equal(rest, []string{x.Path}) {
			t.Errorf("args %q", rest)
		}
	})
	t.Run("policy", func(t *testing.T) {
		x := helperargs.Policy{File: "/var/policy.json", Op: "allow", Rule: "example.test"}
		var file string
		rest := parseAs(t, newPolicyFlagSet(&file), x.Args(), "policy")
		if file != x.File || !slices.Equal(rest, []string{x.Op, x.Rule}) {
			t.Errorf("file %q args %q", file, rest)
		}
	})
	t.Run("task", func(t *testing.T) {
		x := helperargs.Task{User: "opencode", PasswordFile: "/p", URL: "http://127.0.0.1:4096", Text: "fix --it"}
		var o taskOptions
		rest := parseAs(t, newTaskFlagSet(&o), x.Args(), "task")
		if o.user != x.User || o.passwordFile != x.PasswordFile || !slices.Equal(rest, []string{x.URL, x.Text}) {
			t.Errorf("%+v %q", o, rest)
		}
	})
	t.Run("verify", func(t *testing.T) {
		x := helperargs.Verify{Pod: "p", Workspace: "/workspaces/p", Canary: "127.0.0.1:3129", Proxy: "http://127.0.0.1:3128",
			ClusterCanaries: []string{"10.244.0.7:3129", "[fd00::7]:3129"}, Only: []string{"cluster-egress", "canary"},
			Protect: []string{".devcontainer", ".envrc"}, ExpectMounts: []string{"/cache"},
			Limits:        []string{helperargs.Limit("memory", 4<<30), helperargs.Limit("pids", 512), helperargs.Limit("tmp", 512<<20)},
			MaskedObjects: []string{strings.Repeat("ab", 20)}, CredentialVars: []string{"ANTHROPIC_API_KEY"},
			Fast: true, Output: "json", SecretVars: []string{"GH_TOKEN"}, SecretHashesFile: "-",
			TrustedGitChecked: true, TrustedProblems: []string{".git/commondir exists"}}
		o := verifyOptions{}
		parseAs(t, newVerifyFlagSet(&o), x.Args(), "verify")
		if o.pod != x.Pod || o.workspace != x.Workspace || o.canary != x.Canary || o.proxy != x.Proxy ||
			!slices.Equal(o.protect, x.Protect) || !slices.Equal(o.expectMounts, x.ExpectMounts) ||
			o.limits["memory"] != 4<<30 || o.limits["pids"] != 512 || o.limits["tmp"] != 512<<20 ||
			!slices.Equal(o.credentialVars, x.CredentialVars) || !o.fast || o.output != x.Output || !slices.Equal(o.secretVars, x.SecretVars) || o.hashesFile != x.SecretHashesFile ||
			!o.trustedChecked || !slices.Equal(o.trustedProblems, x.TrustedProblems) || !slices.Equal(o.maskedObjects, x.MaskedObjects) ||
			!slices.Equal(o.clusterCanaries, x.ClusterCanaries) || !slices.Equal(o.only, x.Only) {
			t.Errorf("%+v", o)
		}
	})
	t.Run("hidden-files", func(t *testing.T) {
		x := helperargs.HiddenFiles{Workspace: "/workspaces/p", Protect: []string{".devcontainer", ".env"}, UID: 1000, Stat: true}
		var o hiddenOptions
		rest := parseAs(t, newHiddenFilesFlagSet(&o), append(x.Args(), "--", "-odd"), "hidden-files")
		if o.workspace != x.Workspace || !slices.Equal(o.protect, x.Protect) || o.uid != x.UID || !o.stat || !slices.Equal(rest, []string{"-odd"}) {
			t.Errorf("%+v %q", o, rest)
		}
	})
	t.Run("hangup", func(t *testing.T) {
		x := helperargs.Hangup{Env: "DEVAIPOD_SESSION=abc"}
		var entry string
		if rest := parseAs(t, newHangupFlagSet(&entry), x.Args(), "hangup"); entry != x.Env || len(rest) != 0 {
			t.Errorf("%q %q", entry, rest)
		}
	})
	t.Run("inspect-git", func(t *testing.T) {
		x := helperargs.InspectGit{Repo: "/workspaces/p"}
		if rest := parseAs(t, newInspectGitFlagSet(), x.Args(), "inspect-git"); !slices.Equal(rest, []string{x.Repo}) {
			t.Errorf("%q", rest)
		}
	})
}

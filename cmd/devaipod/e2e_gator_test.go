package main

import (
	"encoding/json"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const e2eGatorToken = "ghp_e2eGatorTokenValue0042"

// fakeForge is the test's GitHub: a smart-HTTP git server with a pull
// request whose head only the base repository's refs/pull/7/head names, and
// a REST API that wants the token.
type fakeForge struct {
	git, api *httptest.Server
	head     string
	mu       sync.Mutex
	calls    []string // "METHOD PATH" the API answered with the right token
	badAuth  int
}

func startFakeForge(t *testing.T, repo string) *fakeForge {
	t.Helper()
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	root := t.TempDir()
	f := &fakeForge{}
	f.git = httptest.NewServer(&cgi.Handler{Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}})
	t.Cleanup(f.git.Close)
	base := filepath.Join(root, "owner", "repo.git")
	run := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("", "init", "-q", "--bare", "-b", "main", base)
	run(repo, "push", "-q", base, "main")
	run(repo, "checkout", "-q", "-b", "feature")
	os.WriteFile(filepath.Join(repo, "fix.txt"), []byte("the fix\n"), 0o644)
	run(repo, "add", "fix.txt")
	run(repo, "commit", "-q", "-m", "fix")
	f.head = run(repo, "rev-parse", "HEAD")
	run(repo, "push", "-q", base, "feature:refs/pull/7/head")

	f.api = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+e2eGatorToken {
			f.badAuth++
			http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
			return
		}
		f.calls = append(f.calls, r.Method+" "+r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "GET /repos/owner/repo/issues/3":
			json.NewEncoder(w).Encode(map[string]any{"number": 3, "title": "Flaky cache test", "state": "open",
				"user": map[string]any{"login": "octocat"}, "body": "it flakes", "comments": 0})
		case "GET /repos/owner/repo/issues/3/comments":
			w.Write([]byte("[]"))
		default:
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"message":"Not Found"}`))
		}
	}))
	t.Cleanup(f.api.Close)
	return f
}

// mcpScript is a shell script for the agent that speaks MCP's streamable
// HTTP to the gator with curl: initialize, then one tools/call per line
// of calls (JSON params), printing each answer.
func mcpScript(calls ...string) string {
	var b strings.Builder
	b.WriteString(`u=http://127.0.0.1:8765/mcp
post() { curl -sS -X POST "$u" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' ${sid:+-H "Mcp-Session-Id: $sid"} "$@"; }
post -D /tmp/mcp-headers -o /dev/null -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}'
sid=$(grep -i '^mcp-session-id:' /tmp/mcp-headers | cut -d' ' -f2 | tr -d '\r')
post -o /dev/null -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
`)
	for i, c := range calls {
		b.WriteString("echo '=== call'\npost -d '{\"jsonrpc\":\"2.0\",\"id\":" + itoa(i+2) + ",\"method\":\"tools/call\",\"params\":" + c + "}' || echo \"curl failed: $?\"\necho\n")
	}
	return b.String()
}

// TestE2EGatorAndPullRequest ups a pull request of the test's forge with
// the gator, then checks from inside the agent that the gator answers and
// enforces its scopes, that the token is nowhere the agent can read, in no
// podman inspect, and in the workspace; and that every call is audited.
func TestE2EGatorAndPullRequest(t *testing.T) {
	e2e(t)
	fixture := fixtureRepo(t)
	forge := startFakeForge(t, fixture)
	// The checkout the forge serves is trusted: its pull request is not.
	mustDevaipod(t, nil, "trust", fixture)
	t.Cleanup(func() { devaipod(t, nil, "trust", "--revoke", fixture) })
	cfg := standInConfig(t, `[trusted.env.vars]
GH_TOKEN = "`+e2eGatorToken+`"
[network]
host_loopback = true
[forge]
api_url = "`+strings.Replace(forge.api.URL, "127.0.0.1", "10.0.2.2", 1)+`/"
`)
	prURL := forge.git.URL + "/owner/repo/pull/7/files"
	up := mustDevaipod(t, nil, "--config", cfg, "up", prURL, "--forge-url", forge.git.URL,
		"--gator", "github:owner/repo:read", "-o", "json")
	var res struct{ Name string }
	if err := json.Unmarshal([]byte(up.stdout), &res); err != nil {
		t.Fatalf("up -o json: %v\n%s", err, up)
	}
	name := res.Name
	cleanup(t, name)
	if !strings.HasPrefix(name, "repo-pr7-") {
		t.Errorf("pod name %q, want repo-pr7-…", name)
	}
	if !strings.Contains(up.stderr, "the repository is not trusted") || !strings.Contains(up.stderr, "[trusted.env] (GH_TOKEN)") || !strings.Contains(up.stderr, "up --trust") {
		t.Errorf("up of a pull request does not say it is untrusted, what it withheld and how to trust it:\n%s", up)
	}

	t.Run("the workspace has the pull request's head, and not the token: a pull request is untrusted", func(t *testing.T) {
		r := devaipod(t, nil, "exec", name, "--", "sh", "-c", "git rev-parse HEAD; git rev-parse --abbrev-ref HEAD; git remote get-url upstream; printenv GH_TOKEN || echo no-token")
		want := forge.head + "\npr-7\n" + forge.git.URL + "/owner/repo.git\nno-token"
		if strings.TrimSpace(r.stdout) != want {
			t.Errorf("workspace:\n%s\nwant:\n%s", r.stdout, want)
		}
	})

	t.Run("the agent reaches the gator, within its scopes", func(t *testing.T) {
		r := devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c", mcpScript(
			`{"name":"status","arguments":{}}`,
			`{"name":"get_issue","arguments":{"owner":"owner","repo":"repo","number":3}}`,
			`{"name":"add_issue_comment","arguments":{"owner":"owner","repo":"repo","number":3,"body":"done"}}`,
			`{"name":"get_issue","arguments":{"owner":"other","repo":"secret","number":1}}`,
			// Text for the person who reads the audit: a terminal title
			// escape and a right-to-left override.
			`{"name":"get_issue","arguments":{"owner":"evil\u001b]0;pwned\u0007","repo":"\u202erepo","number":1}}`,
		))
		answers := strings.Split(r.stdout, "=== call")
		if r.code != 0 || len(answers) != 6 {
			t.Fatalf("MCP over curl from the agent: %s", r)
		}
		if !strings.Contains(answers[1], "github:owner/repo:read") {
			t.Errorf("status does not list the scope: %s", answers[1])
		}
		if !strings.Contains(answers[2], "Flaky cache test") {
			t.Errorf("get_issue within the scope: %s", answers[2])
		}
		for _, denied := range answers[3:5] {
			if !strings.Contains(denied, "denied") || !strings.Contains(denied, "--gator") {
				t.Errorf("a call outside the scope was not denied with how to grant it: %s", denied)
			}
		}
		if !strings.Contains(answers[5], "denied") || !strings.Contains(answers[5], "not allowed") {
			t.Errorf("an owner with control characters was not refused: %s", answers[5])
		}
		forge.mu.Lock()
		defer forge.mu.Unlock()
		if strings.Join(forge.calls, ",") != "GET /repos/owner/repo/issues/3,GET /repos/owner/repo/issues/3/comments" || forge.badAuth != 0 {
			t.Errorf("the forge saw %v (bad auth %d); want the issue and its comments only, with the token", forge.calls, forge.badAuth)
		}
	})

	t.Run("every call is audited", func(t *testing.T) {
		r := mustDevaipod(t, nil, "audit", name, "-o", "json")
		decisions := map[string]int{}
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			var rec struct{ Kind, Tool, Decision string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Kind == "gator" {
				decisions[rec.Tool+" "+rec.Decision]++
			}
		}
		if decisions["get_issue allow"] != 1 || decisions["get_issue deny"] != 2 || decisions["add_issue_comment deny"] != 1 || decisions["status allow"] != 1 {
			t.Errorf("gator audit records: %v\n%s", decisions, r.stdout)
		}
		table := mustDevaipod(t, nil, "audit", name, "--denied")
		if !strings.Contains(table.stdout, "add_issue_comment owner/repo") {
			t.Errorf("audit table lacks the denied gator call:\n%s", table.stdout)
		}
		// The agent's text is shown, not obeyed, in the table and in JSON.
		if !strings.Contains(table.stdout, `evil\x1b]0;pwned\x07`) || !strings.Contains(table.stdout, `\u202erepo`) {
			t.Errorf("audit table lacks the escaped owner and repo:\n%s", table.stdout)
		}
		for _, out := range []string{table.stdout, r.stdout} {
			if strings.ContainsAny(out, "\x1b\x07\u202e") {
				t.Errorf("audit prints control characters the agent chose: %q", out)
			}
		}
	})

	t.Run("the token is nowhere the agent can read, nor in podman inspect", func(t *testing.T) {
		r := devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c",
			"env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; grep -rs '"+e2eGatorToken+"' /home /workspaces /tmp /run /etc /opt /var 2>/dev/null; ls /run/devaipod/secrets 2>&1")
		if strings.Contains(r.stdout, e2eGatorToken) {
			t.Errorf("the agent can read the token:\n%s", r.stdout)
		}
		for _, role := range []string{"workspace", "agent", "proxy", "gator"} {
			out, err := exec.Command("podman", "inspect", "devaipod-"+name+"-"+role).CombinedOutput()
			if err != nil {
				t.Errorf("podman inspect %s: %v %s", role, err, out)
			}
			if strings.Contains(string(out), e2eGatorToken) {
				t.Errorf("podman inspect of the %s shows the token", role)
			}
		}
		v := devaipod(t, nil, "verify", name, "-o", "json")
		var rep struct {
			Rows []struct{ ID, Result, Detail string }
		}
		if err := json.Unmarshal([]byte(v.stdout), &rep); err != nil || len(rep.Rows) == 0 {
			t.Fatalf("verify -o json: %v\n%s", err, v)
		}
		for _, row := range rep.Rows {
			if (row.ID == "trusted-env" || row.ID == "trusted-env-files" || row.ID == "untrusted-workspace") && row.Result != "PASS" {
				t.Errorf("verify %s: %s %s", row.ID, row.Result, row.Detail)
			}
		}
	})
}

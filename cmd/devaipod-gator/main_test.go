package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devaipod/devaipod/gator"
	"github.com/devaipod/devaipod/gator/policy"
	"github.com/devaipod/devaipod/internal/helperargs"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const gatorTestToken = "ghp_gatorTESTtokenNOTforTHEagent9876543"

func TestRunVersion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string // substring
	}{
		{[]string{"version"}, 0, "dev\n", ""},
		{[]string{"version", "x"}, 2, "", `devaipod-gator: version: unexpected argument "x"`},
		{[]string{"version", "-h"}, 0, "", "Usage: devaipod-gator version"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tt.args, &stdout, &stderr)
		if code != tt.wantCode || stdout.String() != tt.wantStdout || !strings.Contains(stderr.String(), tt.wantStderr) {
			t.Errorf("run(%q) = %d, stdout %q, stderr %q; want %d, %q and %q",
				tt.args, code, stdout.String(), stderr.String(), tt.wantCode, tt.wantStdout, tt.wantStderr)
		}
	}
}

func TestGatorFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ok := []string{"--listen", "unix:" + dir + "/g.sock", "--scope", "github:octo/app"}
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"help", []string{"-h"}, 0, "Usage: devaipod-gator --listen unix:PATH --scope SCOPE... [flags]"},
		{"help lists the scopes", []string{"--help"}, 0, "github:OWNER/*[:PERMS]"},
		{"no flags", nil, 2, "devaipod-gator: missing --listen"},
		{"no scope", ok[:2], 2, "missing --scope"},
		{"bad scope", append(ok, "--scope", "github:octo/app:write"), 2,
			`invalid value "github:octo/app:write" for flag -scope: scope "github:octo/app:write": unknown permission "write"`},
		{"bad listen", append([]string{"--listen", "udp:1.2.3.4:5"}, ok[2:]...), 2, "want unix:PATH or tcp:HOST:PORT"},
		{"relative workspace", append(ok, "--workspace", "ws"), 2, `--workspace "ws" is not absolute`},
		{"relative approval dir", append(ok, "--approval-dir", "approvals"), 2, `--approval-dir "approvals" is not absolute`},
		{"zero ask timeout", append(ok, "--ask-timeout", "0s"), 2, "--ask-timeout 0s: want a positive duration"},
		{"bad ask timeout", append(ok, "--ask-timeout", "soon"), 2, `invalid value "soon" for flag -ask-timeout`},
		{"bad known commit", append(ok, "--known-commit", "octo/app@HEAD"), 2,
			`invalid value "octo/app@HEAD" for flag -known-commit: known commit "octo/app@HEAD": "HEAD" is not a full commit id`},
		{"ask scope", append(ok, "--scope", "github:octo/app:ask:read"), 2, "ask:read: read cannot be asked for"},
		{"argument", append(ok, "extra"), 2, `unexpected argument "extra"`},
		{"missing token file", append(ok, "--token-file", dir+"/nope"), 1, "read the token"},
		{"bad API URL", append(ok, "--token-file", writeToken(t, dir), "--api-url", "ftp://x/"), 1, "want https://HOST/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, &stdout, &stderr)
			if code != tt.wantCode || !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("gator %q = %d, stderr %q; want %d and %q", tt.args, code, stderr.String(), tt.wantCode, tt.wantStderr)
			}
		})
	}

	var stderr bytes.Buffer
	o, err := parseGatorFlags(append(ok, "--scope", "github:readonly-all", "--audit-log", "-", "--audit-log", dir+"/a.jsonl",
		"--workspace", "/w", "--pod", "demo", "--git-url", "https://ghe.test/"), &stderr)
	if err != nil {
		t.Fatalf("parse: %v (%s)", err, stderr.String())
	}
	if len(o.scopes) != 2 || len(o.auditLogs) != 2 || o.workspace != "/w" || o.pod != "demo" || o.apiURL != gator.DefaultAPIURL || o.gitURL != "https://ghe.test/" ||
		o.approvalDir != "" || o.askTimeout != gator.DefaultAskTimeout {
		t.Errorf("parsed %+v", o)
	}
}

func writeToken(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "token")
	if err := os.WriteFile(p, []byte(gatorTestToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	if got, err := readToken(writeToken(t, dir), env(map[string]string{"GH_TOKEN": "from-env-xxxx"})); err != nil || got != gatorTestToken {
		t.Errorf("file first: %q, %v", got, err)
	}
	if got, err := readToken("", env(map[string]string{"GH_TOKEN": "gh-token-xxxx", "GITHUB_TOKEN": "github-token-xxxx"})); err != nil || got != "gh-token-xxxx" {
		t.Errorf("GH_TOKEN before GITHUB_TOKEN: %q, %v", got, err)
	}
	if got, err := readToken("", env(map[string]string{"GITHUB_TOKEN": "github-token-xxxx"})); err != nil || got != "github-token-xxxx" {
		t.Errorf("GITHUB_TOKEN: %q, %v", got, err)
	}
	if _, err := readToken("", env(nil)); err == nil || !strings.Contains(err.Error(), "no GitHub token") {
		t.Errorf("no token: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	if _, err := readToken(empty, env(map[string]string{"GH_TOKEN": "from-env-xxxx"})); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("empty token file: %v", err)
	}
}

// TestGatorUnixRoundTrip starts the gator on a unix socket with a token
// file and a fake API, connects the SDK's client over HTTP on that socket,
// calls status and a read tool, and stops the gator.
func TestGatorUnixRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var mu sync.Mutex
	var authHeaders []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		authHeaders = append(authHeaders, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.URL.Path != "/api/v3/repos/octo/app/pulls" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`[{"number": 7, "title": "WIP", "state": "open", "draft": true}]`))
	}))
	defer api.Close()

	sock := filepath.Join(dir, "run", "gator.sock")
	auditLog := filepath.Join(dir, "audit", "gator.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuf
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "unix:" + sock, "--scope", "github:octo/app:read,create-draft,ask:comment",
			"--token-file", writeToken(t, dir), "--api-url", api.URL + "/api/v3/", "--audit-log", auditLog, "--pod", "demo",
			"--approval-dir", filepath.Join(dir, "state", "approvals"), "--ask-timeout", "300ms"},
			&stdout, &stderr)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		select {
		case code := <-done:
			t.Fatalf("gator exited with %d: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket after 10s: %s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o666 {
		t.Errorf("socket mode: %v, %v; want 0666 so the agent's uid can connect", fi.Mode(), err)
	}

	unixClient := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	// The agent's bridge makes the gator 127.0.0.1:8765; the host is only
	// a name over the socket.
	resp, err := unixClient.Get("http://127.0.0.1:8765" + gator.HealthPath)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health check: %v %v", resp, err)
	}
	resp.Body.Close()
	transport := &mcp.StreamableClientTransport{Endpoint: "http://127.0.0.1:8765" + gator.MCPPath, HTTPClient: unixClient}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v0"}, nil).Connect(ctx, transport, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: policy.ToolStatus})
	if err != nil || res.IsError {
		t.Fatalf("status: %+v, %v", res, err)
	}
	var status struct{ Scopes []string }
	if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &status); err != nil {
		t.Fatal(err)
	}
	if len(status.Scopes) != 1 || status.Scopes[0] != "github:octo/app:read,create-draft,ask:comment" {
		t.Errorf("status scopes %q", status.Scopes)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: policy.ToolListPullRequests, Arguments: map[string]any{"owner": "octo", "repo": "app"}})
	if err != nil || res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, `"number":7`) {
		t.Fatalf("list_pull_requests: %+v, %v", res, err)
	}
	// ask:comment: held in the approvals folder, and refused when nobody
	// decides within --ask-timeout.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: policy.ToolAddIssueComment, Arguments: map[string]any{"owner": "octo", "repo": "app", "number": 7, "body": "hi"}})
	if err != nil || !res.IsError || !strings.HasPrefix(res.Content[0].(*mcp.TextContent).Text, "no decision: add_issue_comment octo/app #7 waited 300ms") {
		t.Fatalf("add_issue_comment: %+v, %v", res, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "state", "approvals", "pending")); err != nil || !fi.IsDir() {
		t.Errorf("the request was not filed in --approval-dir: %v", err)
	}
	cs.Close()

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("gator exited with %d: %s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("gator did not stop")
	}

	mu.Lock()
	if len(authHeaders) != 1 || authHeaders[0] != "Bearer "+gatorTestToken {
		t.Errorf("API requests' Authorization: %q", authHeaders)
	}
	mu.Unlock()
	b, err := os.ReadFile(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	var tools, decisions []string
	asks := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rec, err := policy.ParseRecord(sc.Bytes())
		if err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if rec.Pod != "demo" {
			t.Errorf("record %+v: pod", rec)
		}
		if rec.Event == policy.EventCall {
			tools = append(tools, rec.Tool)
			decisions = append(decisions, rec.Decision)
		}
		if rec.Event == policy.EventAsk {
			asks++
		}
	}
	if strings.Join(tools, " ") != "status list_pull_requests add_issue_comment" || strings.Join(decisions, " ") != "allow allow deny" || asks != 1 {
		t.Errorf("audited calls %q, decisions %q:\n%s", tools, decisions, b)
	}
	for name, out := range map[string]string{"audit log": string(b), "stdout": stdout.String(), "stderr": stderr.String()} {
		if strings.Contains(out, gatorTestToken) {
			t.Errorf("the token is in the %s", name)
		}
	}
	if stdout.String() != "" {
		t.Errorf("stdout %q: with --audit-log PATH, nothing goes to stdout", stdout.String())
	}
	if !strings.Contains(stderr.String(), "devaipod-gator: listening on unix:"+sock+"/mcp") {
		t.Errorf("stderr %q", stderr.String())
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestGatorArgsRoundTrip: what the host writes with internal/helperargs is
// what the gator reads, field by field.
func TestGatorArgsRoundTrip(t *testing.T) {
	x := helperargs.Gator{Listen: "unix:/run/g.sock", Pod: "p", Workspace: "/workspaces/p", APIURL: "https://forge.example.test/api/v3/",
		GitURL: "https://forge.example.test", Scopes: []string{"github:o/r:read", "github:o/*"}, TokenFile: "/run/devaipod/secrets/GH_TOKEN",
		ProtectedPaths: []string{".github/**", "Makefile"}, AuditLogs: []string{"-", "/var/lib/g/audit.log"},
		KnownCommits: []string{"o/r@" + strings.Repeat("ab", 20)},
		ApprovalDir:  "/var/lib/devaipod/gator/approvals", AskTimeout: 90 * time.Second}
	var o gatorOptions
	fs := newGatorFlagSet(&o)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(x.Args()); err != nil {
		t.Fatalf("the gator cannot parse what the host writes, %q: %v", x.Args(), err)
	}
	if o.listen.String() != x.Listen || o.pod != x.Pod || o.workspace != x.Workspace || o.apiURL != x.APIURL ||
		o.gitURL != x.GitURL || !slices.Equal(o.scopes, x.Scopes) || o.tokenFile != x.TokenFile ||
		!slices.Equal(o.protected, x.ProtectedPaths) || !slices.Equal(o.auditLogs, x.AuditLogs) || !slices.Equal(o.known, x.KnownCommits) ||
		o.approvalDir != x.ApprovalDir || o.askTimeout != x.AskTimeout || fs.NArg() != 0 {
		t.Errorf("%+v", o)
	}
	// Without the two, the gator has no approvals folder and the default
	// timeout (the host leaves a zero duration out).
	var d gatorOptions
	fs = newGatorFlagSet(&d)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(helperargs.Gator{Listen: "unix:/run/g.sock", Scopes: []string{"github:o/r"}}.Args()); err != nil {
		t.Fatal(err)
	}
	if d.approvalDir != "" || d.askTimeout != gator.DefaultAskTimeout {
		t.Errorf("defaults: %+v", d)
	}
}

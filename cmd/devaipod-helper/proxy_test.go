package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devaipod/devaipod/proxy"
)

func TestProxyFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ok := []string{"--listen", "unix:" + dir + "/p.sock", "--pod", "demo", "--policy-file", dir + "/policy.json"}
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"help", []string{"-h"}, 0, "Usage: devaipod-helper proxy --listen"},
		{"no flags", nil, 2, "missing --listen"},
		{"no pod", []string{"--listen", "tcp:127.0.0.1:0", "--policy-file", "/x"}, 2, "missing --pod"},
		{"no policy file", []string{"--listen", "tcp:127.0.0.1:0", "--pod", "p"}, 2, "missing --policy-file"},
		{"bad listen", append([]string{"--listen", "udp:1.2.3.4:5"}, ok[2:]...), 2,
			`invalid value "udp:1.2.3.4:5" for flag -listen: want unix:PATH or tcp:HOST:PORT`},
		{"relative socket", append([]string{"--listen", "unix:p.sock"}, ok[2:]...), 2, "not absolute"},
		{"tcp without host", append([]string{"--listen", "tcp::3128"}, ok[2:]...), 2, "missing host"},
		{"bad rule", append(ok, "--allow", "https://api.example.test"), 2,
			`invalid value "https://api.example.test" for flag -allow: rule "https://api.example.test": looks like a URL`},
		{"non-ASCII rule", append(ok, "--allow", "bücher.example"), 2, "xn--"},
		{"bad max tunnels", append(ok, "--max-tunnels", "0"), 2, "--max-tunnels 0"},
		{"bad idle timeout", append(ok, "--idle-timeout", "-1s"), 2, "--idle-timeout"},
		{"argument", append(ok, "extra"), 2, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append([]string{"proxy"}, tt.args...), &stdout, &stderr)
			if code != tt.wantCode || !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("proxy %q = %d, stderr %q; want %d and %q", tt.args, code, stderr.String(), tt.wantCode, tt.wantStderr)
			}
		})
	}

	var stderr bytes.Buffer
	o, err := parseProxyFlags(append(ok, "--allow", "a.test", "--allow", "*.b.test:80", "--max-tunnels", "9",
		"--idle-timeout", "90s"), &stderr)
	if err != nil {
		t.Fatalf("parse: %v (%s)", err, stderr.String())
	}
	if o.listen.String() != "unix:"+dir+"/p.sock" || o.pod != "demo" || len(o.allow) != 2 || o.allow[1] != "*.b.test:80" ||
		o.maxTunnels != 9 || o.idleTimeout != 90*time.Second {
		t.Errorf("parsed %+v", o)
	}
}

func TestProxyBadPolicyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.json")
	os.WriteFile(policy, []byte(`{"allow": ["a..b"]}`), 0o644)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"proxy", "--listen", "tcp:127.0.0.1:0", "--pod", "demo",
		"--policy-file", policy}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), `rule "a..b"`) {
		t.Errorf("proxy with a malformed policy file = %d, %q; want 1 and the rule", code, stderr.String())
	}
}

// syncBuffer is a bytes.Buffer for writers on other goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestProxyUnixRoundTrip runs the proxy subcommand on a unix socket, sends
// an allowed and a denied request through it, changes the policy with the
// policy subcommand and stops it.
func TestProxyUnixRoundTrip(t *testing.T) {
	t.Parallel()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "upstream says hi")
	}))
	defer upstream.Close()
	target := strings.TrimPrefix(upstream.URL, "http://")

	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "proxy.sock")
	policy := filepath.Join(dir, "state", "policy.json")
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"proxy", "--listen", "unix:" + sock, "--pod", "demo", "--policy-file", policy,
			"--allow", target}, &stdout, &stderr)
	}()
	waitForSocket(t, sock, exited, &stderr)
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o666 {
		t.Errorf("socket mode %v; want 0666", fi.Mode().Perm())
	}

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(mustParseURL(t, "http://proxy.invalid")),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}}
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := client.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(upstream.URL + "/"); code != 200 || body != "upstream says hi" {
		t.Errorf("allowed GET = %d %q", code, body)
	}
	_, port, _ := net.SplitHostPort(target)
	if code, body := get("http://denied.test:" + port + "/"); code != 403 ||
		!strings.Contains(body, "devaipod allow demo denied.test:"+port) {
		t.Errorf("denied GET = %d %q", code, body)
	}

	// devaipod deny, through the policy subcommand, takes effect at once.
	var pout, perr bytes.Buffer
	if code := run(context.Background(), []string{"policy", "--file", policy, "deny", target}, &pout, &perr); code != 0 {
		t.Fatalf("policy deny = %d: %s", code, perr.String())
	}
	// No wait here: the policy command has waited out the check interval.
	if code, body := get(upstream.URL + "/"); code != 403 || !strings.Contains(body, "denied by the rule") {
		t.Errorf("GET after deny = %d %q", code, body)
	}

	cancel()
	select {
	case code := <-exited:
		if code != 0 {
			t.Errorf("proxy exited %d after cancel; stderr: %s", code, stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("proxy did not stop")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket still there after stop: %v", err)
	}

	var decisions []string
	sc := bufio.NewScanner(strings.NewReader(stdout.String()))
	for sc.Scan() {
		var r proxy.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("stdout line %q is not an audit record: %v", sc.Text(), err)
		}
		if r.Event == proxy.EventRequest {
			decisions = append(decisions, r.Host+" "+r.Decision+" "+r.Reason)
		}
		if r.Pod != "demo" {
			t.Errorf("record for pod %q", r.Pod)
		}
	}
	want := []string{"127.0.0.1 allow ", "denied.test deny not-allowed", "127.0.0.1 deny denied"}
	if fmt.Sprint(decisions) != fmt.Sprint(want) {
		t.Errorf("audit decisions %q; want %q", decisions, want)
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if !strings.HasPrefix(line, logPrefix+"proxy: ") {
			t.Errorf("stderr line %q lacks the prefix", line)
		}
	}
}

func waitForSocket(t *testing.T, sock string, exited <-chan int, stderr fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return
		}
		select {
		case code := <-exited:
			t.Fatalf("proxy exited %d: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket at %s; stderr: %s", sock, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustParseURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestProxySIGTERM runs the proxy as its own process: SIGTERM must make it
// exit 0 promptly.
func TestProxySIGTERM(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "p.sock")
	cmd := exec.Command(os.Args[0], "proxy", "--listen", "unix:"+sock, "--pod", "demo",
		"--policy-file", filepath.Join(dir, "policy.json"), "--allow", "api.example.test")
	cmd.Env = append(os.Environ(), asHelperEnv+"=1")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan int, 1)
	go func() {
		cmd.Wait()
		exited <- cmd.ProcessState.ExitCode()
	}()
	waitForSocket(t, sock, exited, &stderr)
	// An open tunnel attempt must not hold the exit up.
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "CONNECT api.example.test:443 HTTP/1.1\r\n")

	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case code := <-exited:
		if code != 0 {
			t.Errorf("exit %d after SIGTERM; stderr: %s", code, stderr.String())
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("took %v to exit", d)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("no exit 10 s after SIGTERM")
	}
}

func TestPolicyCommand(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "policy.json")
	tests := []struct {
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{[]string{"show"}, 0, "{\n  \"allow\": [],\n  \"deny\": []\n}\n", ""},
		{[]string{"allow", "API.Example.Test.:443"}, 0, `"api.example.test"`, ""},
		{[]string{"deny", "*.evil.test:*"}, 0, `"*.evil.test:*"`, ""},
		{[]string{"show"}, 0, "{\n  \"allow\": [\n    \"api.example.test\"\n  ],\n  \"deny\": [\n    \"*.evil.test:*\"\n  ]\n}\n", ""},
		{[]string{"remove", "*.evil.test:*"}, 0, "\"deny\": []", ""},
		{[]string{"allow", "https://x.test"}, 2, "", `policy: rule "https://x.test": looks like a URL`},
		{[]string{"allow"}, 2, "", "allow wants exactly one RULE"},
		{[]string{"allow", "a.test", "b.test"}, 2, "", "allow wants exactly one RULE"},
		{[]string{"grant", "a.test"}, 2, "", `unknown operation "grant"`},
		{[]string{"show", "x"}, 2, "", "show takes no arguments"},
		{nil, 2, "", "missing operation"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"policy", "--file", file}, tt.args...), &stdout, &stderr)
		if code != tt.wantCode || !strings.Contains(stdout.String(), tt.wantStdout) || !strings.Contains(stderr.String(), tt.wantStderr) {
			t.Errorf("policy %q = %d, stdout %q, stderr %q; want %d, %q, %q", tt.args, code, stdout.String(),
				stderr.String(), tt.wantCode, tt.wantStdout, tt.wantStderr)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"policy", "show"}, &stdout, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "missing --file") {
		t.Errorf("policy without --file = %d, %q", code, stderr.String())
	}
	if code := run(context.Background(), []string{"help", "policy"}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), "Usage: devaipod-helper policy --file PATH allow|deny|remove RULE") {
		t.Errorf("help policy = %d, %q", code, stdout.String())
	}
}

package fakellm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The research test below proves, on the host, how devaipod drives opencode offline with the
// fake server (docs/notes-opencode.md): it needs an opencode executable, named by this variable.
const opencodeBinEnv = "DEVAIPOD_OPENCODE_BIN"

// deniedHost is the off-allowlist host the script makes opencode reach for. A name under
// .invalid never resolves, so even a client that ignored the proxy could not leave the machine.
const deniedHost = "denied.invalid"

// TestOpencodeDrivenByScript runs `opencode serve` as devaipod's pod does (password, proxy
// environment, configuration in OPENCODE_CONFIG_CONTENT) against the fake server: the script
// writes a file, runs a shell command, then tries a host the proxy refuses with curl and
// webfetch at once, then ends. It checks the effects in the workspace, what went through the
// proxy (the model calls, the two refused attempts and nothing else), the HTTP API's answers and
// the end of the session.
func TestOpencodeDrivenByScript(t *testing.T) {
	bin := os.Getenv(opencodeBinEnv)
	if bin == "" && os.Getenv("CI") != "" {
		t.Fatalf("%s is unset under CI: make test extracts opencode from the default image for this test", opencodeBinEnv)
	}
	if bin == "" {
		t.Skipf("%s is unset: set it to an opencode 1.18 executable (the native binary from the npm package opencode-ai) to run this research test", opencodeBinEnv)
	}
	for _, tool := range []string{"curl", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the test needs %s: %v", tool, err)
		}
	}

	root := t.TempDir()
	work := filepath.Join(root, "work")
	home := filepath.Join(root, "home")
	for _, d := range []string{work, home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	gitInit(t, work)
	configHome := filepath.Join(home, ".config")
	stubPluginDependency(t, filepath.Join(configHome, "opencode"))

	helloPath := filepath.Join(work, "hello.txt")
	const helloContent = "hello from the fake LLM\n"
	script := []Turn{
		// The path from opencode's system prompt, as a script inside a pod would find it.
		{Name: "write", ToolCalls: []ToolCall{Call("write", ArgsFunc(func(r *Request) any {
			return map[string]any{"filePath": filepath.Join(r.WorkingDirectory(), "hello.txt"), "content": helloContent}
		}))}},
		{Name: "bash", Text: "Now the shell.", ToolCalls: []ToolCall{Call("bash", map[string]any{
			"command": "cat hello.txt > marker.txt && echo bash-ran-in-$(pwd) >> marker.txt",
		})}},
		{Name: "egress", ToolCalls: []ToolCall{
			{ID: "call_curl", Name: "bash", Args: map[string]any{
				"command": "curl -sS --max-time 20 https://" + deniedHost + "/from-curl; echo curl-exit=$?",
			}},
			{ID: "call_webfetch", Name: "webfetch", Args: map[string]any{
				"url":    "https://" + deniedHost + "/from-webfetch",
				"format": "text",
			}},
		}},
		{Name: "done", Text: "All done."},
	}
	llm := New(script...)
	llm.AuxiliaryText = "Scripted research session"
	// In the pod the model endpoint is a remote host the proxy allows; here it is a loopback
	// address outside the pod's NO_PROXY (127.0.0.1,localhost), so that opencode reaches it
	// through the proxy in the same way.
	llmListener, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatalf("listening on a second loopback address: %v", err)
	}
	llmServer := &httptest.Server{Listener: llmListener, Config: &http.Server{Handler: llm}}
	llmServer.Start()
	t.Cleanup(llmServer.Close)
	llmHostPort := strings.TrimPrefix(llmServer.URL, "http://")

	proxy := &allowlistProxy{allow: map[string]bool{llmHostPort: true}}
	proxyServer := httptest.NewServer(proxy)
	t.Cleanup(proxyServer.Close)

	password := randomHex(t)
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + configHome,
		"XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"),
		"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"XDG_STATE_HOME=" + filepath.Join(home, ".local", "state"),
		"LANG=C.UTF-8",
		// As devaipod's pod sets them (pod/plan/agent.go).
		"HTTP_PROXY=" + proxyServer.URL, "HTTPS_PROXY=" + proxyServer.URL,
		"http_proxy=" + proxyServer.URL, "https_proxy=" + proxyServer.URL,
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
		"OPENCODE_CONFIG_CONTENT=" + OpencodeConfig(llmServer.URL+"/v1", "", ""),
		"OPENCODE_SERVER_PASSWORD=" + password,
	}
	env = append(env, OpencodeOfflineEnv()...)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	oc := startOpencode(ctx, t, bin, work, env)
	api := &opencodeClient{base: oc.url, password: password}
	defer func() {
		if t.Failed() {
			t.Logf("fake LLM requests:\n%s\nproxy requests: %v\nopencode output:\n%s",
				describeRequests(llm.Requests()), proxy.requests(), oc.output())
		}
	}()

	// Authentication: with OPENCODE_SERVER_PASSWORD set, every route wants it, health included;
	// basic auth (user "opencode") or ?auth_token=base64(user:password).
	for _, path := range []string{"/global/health", "/session", "/event", "/doc"} {
		if status, hdr := unauthenticatedGet(ctx, t, oc.url+path); status != http.StatusUnauthorized ||
			hdr.Get("WWW-Authenticate") != `Basic realm="Secure Area"` {
			t.Errorf("GET %s without credentials: status %d, WWW-Authenticate %q; want 401 asking for basic auth",
				path, status, hdr.Get("WWW-Authenticate"))
		}
	}
	token := base64.StdEncoding.EncodeToString([]byte("opencode:" + password))
	if status, _ := unauthenticatedGet(ctx, t, oc.url+"/global/health?auth_token="+url.QueryEscape(token)); status != http.StatusOK {
		t.Errorf("GET /global/health?auth_token=...: status %d, want 200", status)
	}
	var health struct {
		Healthy bool   `json:"healthy"`
		Version string `json:"version"`
	}
	api.do(ctx, t, http.MethodGet, "/global/health", nil, &health)
	if !health.Healthy {
		t.Errorf("health: %+v", health)
	}
	t.Logf("opencode %s healthy at %s", health.Version, oc.url)

	events := api.subscribe(ctx, t)

	// No title: opencode then asks the small model for one, an auxiliary request.
	var session struct {
		ID        string `json:"id"`
		Directory string `json:"directory"`
	}
	api.do(ctx, t, http.MethodPost, "/session", map[string]any{}, &session)
	if session.ID == "" || session.Directory != work {
		t.Fatalf("POST /session: id %q directory %q, want a session in %s", session.ID, session.Directory, work)
	}
	api.do(ctx, t, http.MethodPost, "/session/"+session.ID+"/prompt_async", map[string]any{
		"model": map[string]string{"providerID": OpencodeProviderID, "modelID": DefaultModel},
		"parts": []map[string]string{{"type": "text", "text": "Write hello.txt, copy it with the shell, then fetch a page."}},
	}, nil)

	select {
	case <-llm.Finished():
	case <-ctx.Done():
		t.Fatalf("the script was not played through (%d of %d turns)", llm.Used(), len(script))
	}
	messages := waitIdle(ctx, t, api, session.ID)
	// An idle session is absent from /session/status (a working one is {"type":"busy"}); so is
	// one whose loop has not started yet, right after prompt_async: done means absent and the
	// last message a completed assistant message (waitIdle), or the session.idle event.
	var status map[string]json.RawMessage
	api.do(ctx, t, http.MethodGet, "/session/status", nil, &status)
	if st, ok := status[session.ID]; ok {
		t.Errorf("GET /session/status lists the finished session: %s", st)
	}

	// The model calls, as the fake server saw them.
	t.Logf("fake LLM requests:\n%s", describeRequests(llm.Requests()))
	if err := llm.Check(); err != nil {
		t.Errorf("script: %v", err)
	}
	main := llm.RequestsOf(KindScript)
	if len(main) != len(script) {
		t.Fatalf("%d scripted requests, want %d", len(main), len(script))
	}
	first := main[0]
	if first.Model != DefaultModel || !first.Stream {
		t.Errorf("first request: model %q stream %v, want %q streaming", first.Model, first.Stream, DefaultModel)
	}
	for _, tool := range []string{"write", "edit", "read", "bash", "webfetch"} {
		if !first.HasTool(tool) {
			t.Errorf("opencode did not offer the %s tool; offered %v", tool, first.ToolNames())
		}
	}
	if first.HasTool("question") {
		t.Errorf("opencode offered the question tool, which the configuration denies")
	}
	if got := first.Header.Get("Authorization"); got != "Bearer fakellm-key" {
		t.Errorf("Authorization header %q, want the configured apiKey as a bearer token", got)
	}
	if !strings.HasPrefix(first.System(), "You are opencode") || !strings.Contains(first.LastUser(), "Write hello.txt") {
		t.Errorf("first request: system %.60q, last user message %q; want opencode's prompt and ours", first.System(), first.LastUser())
	}
	if wd := first.WorkingDirectory(); wd != work {
		t.Errorf("working directory in the system prompt %q, want %s", wd, work)
	}
	aux := llm.RequestsOf(KindAuxiliary)
	if len(aux) == 0 || !strings.HasPrefix(aux[0].System(), "You are a title generator") || len(aux[0].Tools) != 0 {
		t.Errorf("want opencode's title request (no tools, title generator prompt) as an auxiliary request; got %d: %v",
			len(aux), auxSummaries(aux))
	}

	// Effects in the workspace.
	if b, err := os.ReadFile(helloPath); err != nil || string(b) != helloContent {
		t.Errorf("hello.txt: %q, %v; want %q", b, err, helloContent)
	}
	marker, err := os.ReadFile(filepath.Join(work, "marker.txt"))
	if err != nil || string(marker) != helloContent+"bash-ran-in-"+work+"\n" {
		t.Errorf("marker.txt: %q, %v; want hello.txt's content and the line the bash command wrote in %s", marker, err, work)
	}

	// Egress: the model calls went through the proxy (allowed), the two attempts to reach the
	// host off the allowlist were refused there, and opencode tried nothing else.
	seen := proxy.requests()
	t.Logf("proxy requests: %v", seen)
	var denied []string
	allowed := 0
	for _, r := range seen {
		switch {
		case r == "allowed POST "+llmServer.URL+"/v1/chat/completions":
			allowed++
		case strings.HasPrefix(r, "denied "):
			denied = append(denied, strings.TrimPrefix(r, "denied "))
		default:
			t.Errorf("unexpected proxy request %q", r)
		}
	}
	if allowed != len(llm.Requests()) {
		t.Errorf("%d model calls through the proxy, the fake server saw %d", allowed, len(llm.Requests()))
	}
	wantDenied := []string{"CONNECT " + deniedHost + ":443", "CONNECT " + deniedHost + ":443"}
	if !slices.Equal(denied, wantDenied) {
		t.Errorf("refused by the proxy: %v, want %v (curl and webfetch, nothing else)", denied, wantDenied)
	}
	last := main[len(main)-1]
	curlResult, _ := last.ToolResult("call_curl")
	fetchResult, _ := last.ToolResult("call_webfetch")
	t.Logf("curl tool result: %q", curlResult)
	t.Logf("webfetch tool result: %q", fetchResult)
	if !strings.Contains(curlResult, "403") || !strings.Contains(curlResult, "curl-exit=56") {
		t.Errorf("curl result %q: want curl's CONNECT refused with 403 (exit 56)", curlResult)
	}
	if !strings.Contains(fetchResult, "403") {
		t.Errorf("webfetch result %q: want the proxy's 403", fetchResult)
	}

	// The session as opencode reports it.
	var finishes []string
	for _, m := range messages {
		finishes = append(finishes, m.Info.Role+":"+m.Info.Finish)
	}
	t.Logf("messages (role:finish): %v", finishes)
	var toolStates []string
	for _, m := range messages {
		for _, p := range m.Parts {
			if p.Type == "tool" {
				toolStates = append(toolStates, p.Tool+":"+p.State.Status)
			}
		}
	}
	wantStates := []string{"write:completed", "bash:completed", "bash:completed", "webfetch:error"}
	if !slices.Equal(toolStates, wantStates) {
		t.Errorf("tool parts %v, want %v", toolStates, wantStates)
	}
	if final := messages[len(messages)-1]; final.Info.Finish != "stop" || len(final.Info.Error) != 0 {
		t.Errorf("last message: finish %q error %s, want a clean stop", final.Info.Finish, final.Info.Error)
	}
	var info struct {
		Title string `json:"title"`
	}
	api.do(ctx, t, http.MethodGet, "/session/"+session.ID, nil, &info)
	if info.Title != llm.AuxiliaryText {
		t.Errorf("session title %q, want the auxiliary answer %q", info.Title, llm.AuxiliaryText)
	}
	if !events.idle(session.ID) {
		t.Errorf("no session.idle event for %s on /event; saw %v", session.ID, events.types())
	}
	t.Logf("event types seen: %v", events.types())
}

// stubPluginDependency makes opencode's config directory dir look as if @opencode-ai/plugin were
// installed: at startup opencode runs an npm install of that package in each writable config
// directory that lacks node_modules or whose package-lock.json does not list it, which would
// otherwise be one more refused request through the proxy (docs/notes-opencode.md).
func stubPluginDependency(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "node_modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"package.json":      `{"dependencies":{"@opencode-ai/plugin":"1.18.33"}}`,
		"package-lock.json": `{"lockfileVersion":3,"packages":{"":{"dependencies":{"@opencode-ai/plugin":"1.18.33"}}}}`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// gitInit makes dir a git repository with one commit, as a devaipod workspace is.
func gitInit(t *testing.T, dir string) {
	t.Helper()
	run := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid", "GIT_CONFIG_GLOBAL=/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("workspace\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("init", "-q")
	run("add", ".")
	run("commit", "-q", "-m", "init")
}

func randomHex(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// allowlistProxy stands for devaipod's egress proxy: it forwards plain HTTP requests to the
// hosts (host:port) in allow, as the pod's proxy lets the agent reach its model endpoint, and
// answers everything else, CONNECT included, with 403. It records every request.
type allowlistProxy struct {
	allow map[string]bool
	mu    sync.Mutex
	seen  []string
}

func (p *allowlistProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Host
	if r.Method != http.MethodConnect && r.URL.IsAbs() {
		target = r.URL.Scheme + "://" + r.URL.Host + r.URL.Path
	}
	forward := r.Method != http.MethodConnect && r.URL.IsAbs() && r.URL.Scheme == "http" && p.allow[r.URL.Host]
	verdict := "denied"
	if forward {
		verdict = "allowed"
	}
	p.mu.Lock()
	p.seen = append(p.seen, verdict+" "+r.Method+" "+target)
	p.mu.Unlock()
	if !forward {
		http.Error(w, "denied by the test proxy", http.StatusForbidden)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.Out.URL = pr.In.URL },
		Transport:     &http.Transport{Proxy: nil},
		FlushInterval: -1, // stream server-sent events as they come
	}
	rp.ServeHTTP(w, r)
}

func (p *allowlistProxy) requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen)
}

type opencodeProcess struct {
	url string
	mu  sync.Mutex
	out bytes.Buffer
}

func (o *opencodeProcess) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.out.Write(b)
}

func (o *opencodeProcess) output() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.out.String()
}

var listeningLine = regexp.MustCompile(`opencode server listening on (http://[^\s]+)`)

// startOpencode runs `opencode serve` on a free loopback port in dir and returns once it
// listens; the process is stopped when the test ends.
func startOpencode(ctx context.Context, t *testing.T, bin, dir string, env []string) *opencodeProcess {
	t.Helper()
	oc := &opencodeProcess{}
	// --port 0 would mean "4096, or any port when 4096 is taken": take a free port instead, so
	// as not to occupy 4096 on the host. The printed address is the authority either way.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	cmd := exec.Command(bin, "serve", "--hostname", "127.0.0.1", "--port", port, "--print-logs", "--log-level", "INFO")
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stderr = oc
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting opencode: %v", err)
	}
	exited := make(chan struct{})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(oc, line)
			if m := listeningLine.FindStringSubmatch(line); m != nil {
				select {
				case urls <- m[1]:
				default:
				}
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		// The whole process group: opencode's bash tool leaves shells behind when killed.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	select {
	case oc.url = <-urls:
	case <-exited:
		t.Fatalf("opencode exited before listening:\n%s", oc.output())
	case <-ctx.Done():
		t.Fatalf("opencode did not listen in time:\n%s", oc.output())
	}
	return oc
}

func unauthenticatedGet(ctx context.Context, t *testing.T, url string) (int, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// opencodeClient calls opencode's HTTP API with basic auth (user "opencode").
type opencodeClient struct {
	base     string
	password string
}

func (c *opencodeClient) request(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth("opencode", c.password)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

func (c *opencodeClient) do(ctx context.Context, t *testing.T, method, path string, body, out any) {
	t.Helper()
	req, err := c.request(ctx, method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: status %d: %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decoding %s: %v", method, path, b, err)
		}
	}
}

// eventLog records the events on opencode's /event stream.
type eventLog struct {
	mu     sync.Mutex
	events []event
}

// event is one event: {"type": ..., "properties": {...}}.
type event struct {
	Type       string `json:"type"`
	Properties struct {
		SessionID string `json:"sessionID"`
	} `json:"properties"`
}

func (e *eventLog) types() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.events {
		if !slices.Contains(out, ev.Type) {
			out = append(out, ev.Type)
		}
	}
	return out
}

// idle reports whether a session.idle event for sessionID comes within 10 seconds (the stream
// may lag behind the status the test polled).
func (e *eventLog) idle(sessionID string) bool {
	for range 50 {
		e.mu.Lock()
		ok := slices.ContainsFunc(e.events, func(ev event) bool {
			return ev.Type == "session.idle" && ev.Properties.SessionID == sessionID
		})
		e.mu.Unlock()
		if ok {
			return true
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false
}

func (c *opencodeClient) subscribe(ctx context.Context, t *testing.T) *eventLog {
	t.Helper()
	req, err := c.request(ctx, http.MethodGet, "/event", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /event: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("GET /event: status %d", resp.StatusCode)
	}
	log := &eventLog{}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev event
			if json.Unmarshal([]byte(data), &ev) == nil && ev.Type != "" {
				log.mu.Lock()
				log.events = append(log.events, ev)
				log.mu.Unlock()
			}
		}
	}()
	return log
}

type sessionMessage struct {
	Info struct {
		ID     string `json:"id"`
		Role   string `json:"role"`
		Finish string `json:"finish"`
		Time   struct {
			Completed int64 `json:"completed"`
		} `json:"time"`
		Error json.RawMessage `json:"error"`
	} `json:"info"`
	Parts []struct {
		Type  string `json:"type"`
		Text  string `json:"text"`
		Tool  string `json:"tool"`
		State struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Output string `json:"output"`
		} `json:"state"`
	} `json:"parts"`
}

// waitIdle polls until opencode reports the session idle and its last message is a completed
// assistant message, and returns the session's messages.
func waitIdle(ctx context.Context, t *testing.T, api *opencodeClient, sessionID string) []sessionMessage {
	t.Helper()
	for {
		var status map[string]struct {
			Type string `json:"type"`
		}
		api.do(ctx, t, http.MethodGet, "/session/status", nil, &status)
		st, busy := status[sessionID]
		if !busy || st.Type == "idle" {
			var msgs []sessionMessage
			api.do(ctx, t, http.MethodGet, "/session/"+sessionID+"/message", nil, &msgs)
			if n := len(msgs); n > 0 && msgs[n-1].Info.Role == "assistant" && msgs[n-1].Info.Time.Completed != 0 {
				return msgs
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("session %s did not become idle (status %+v)", sessionID, status)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func describeRequests(reqs []Request) string {
	var b strings.Builder
	for i, r := range reqs {
		sys := r.System()
		if len(sys) > 60 {
			sys = sys[:60] + "..."
		}
		fmt.Fprintf(&b, "  %d: %s turn=%d(%s) model=%s stream=%v msgs=%d toolResults=%d tools=%v system=%q\n",
			i, r.Kind, r.Turn, r.TurnName, r.Model, r.Stream, len(r.Messages), len(r.ToolResults()), r.ToolNames(), sys)
	}
	return b.String()
}

func auxSummaries(reqs []Request) []string {
	var out []string
	for _, r := range reqs {
		sys := r.System()
		if len(sys) > 40 {
			sys = sys[:40]
		}
		out = append(out, sys)
	}
	return out
}

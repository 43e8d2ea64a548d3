package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestWaitHTTP(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/unavailable":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/warming-up":
			// Not ready for the first two requests.
			if calls.Add(1) <= 2 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.Write([]byte("ok"))
		case "/redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		default:
			w.Write([]byte("ok"))
		}
	}))
	t.Cleanup(srv.Close)

	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{name: "answers", args: []string{srv.URL}, wantCode: 0},
		{name: "verbose", args: []string{"-v", srv.URL + "/health"}, wantCode: 0,
			wantOut: srv.URL + "/health answered 200 after "},
		{name: "any status counts", args: []string{srv.URL + "/unavailable"}, wantCode: 0},
		{name: "a redirect counts", args: []string{"--status", "3xx", srv.URL + "/redirect"}, wantCode: 0},
		{name: "2xx waits for success", args: []string{"--status", "2xx", "--interval", "10ms", srv.URL + "/warming-up"},
			wantCode: 0},
		{name: "2xx times out on 503",
			args:     []string{"--status", "2xx", "--timeout", "200ms", "--interval", "20ms", srv.URL + "/unavailable"},
			wantCode: 1, wantErr: "did not answer within 200ms: status 503"},
		{name: "exact code", args: []string{"--status", "503", srv.URL + "/unavailable"}, wantCode: 0},
		{name: "--path replaces the path", args: []string{"-v", "--path", "/global/health?x=1", srv.URL + "/ignored"},
			wantCode: 0, wantOut: srv.URL + "/global/health?x=1 answered 200"},
		{name: "without scheme", args: []string{"-v", strings.TrimPrefix(srv.URL, "http://")}, wantCode: 0,
			wantOut: srv.URL + " answered 200"},
		{name: "no URL", args: nil, wantCode: 2, wantErr: "want exactly one URL"},
		{name: "two URLs", args: []string{srv.URL, srv.URL}, wantCode: 2, wantErr: "want exactly one URL"},
		{name: "bad scheme", args: []string{"ftp://127.0.0.1/"}, wantCode: 2, wantErr: "scheme must be http or https"},
		{name: "bad path", args: []string{"--path", "health", srv.URL}, wantCode: 2, wantErr: "must start with /"},
		{name: "bad status", args: []string{"--status", "ok", srv.URL}, wantCode: 2, wantErr: `bad --status "ok"`},
		{name: "bad status class", args: []string{"--status", "6xx", srv.URL}, wantCode: 2, wantErr: "bad --status"},
		{name: "bad flag", args: []string{"--frob", srv.URL}, wantCode: 2, wantErr: "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runWaitHTTP(context.Background(), tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("wait-http %q = %d; want %d (stderr: %s)", tt.args, code, tt.wantCode, stderr.String())
			}
			if tt.wantOut == "" && stdout.Len() > 0 {
				t.Errorf("stdout = %q; want nothing", stdout.String())
			}
			if !strings.Contains(stdout.String(), tt.wantOut) {
				t.Errorf("stdout = %q; want it to contain %q", stdout.String(), tt.wantOut)
			}
			if !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("stderr = %q; want it to contain %q", stderr.String(), tt.wantErr)
			}
		})
	}
}

func TestWaitHTTPClosedPort(t *testing.T) {
	addr := closedPort(t)
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := runWaitHTTP(context.Background(), []string{"--timeout", "300ms", "http://" + addr + "/"}, &stdout, &stderr)
	d := time.Since(start)
	if code != 1 {
		t.Errorf("wait-http on a closed port = %d; want 1", code)
	}
	if d < 250*time.Millisecond || d > 2*time.Second {
		t.Errorf("wait-http --timeout 300ms took %v", d)
	}
	want := "devaipod-helper: wait-http: http://" + addr + "/ did not answer within 300ms: dial tcp " + addr +
		": connect: connection refused\n"
	if stderr.String() != want {
		t.Errorf("stderr = %q; want %q", stderr.String(), want)
	}
}

func TestWaitHTTPServerComesUp(t *testing.T) {
	// Nothing listens at first; the server starts while wait-http polls.
	addr := closedPort(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})}
	t.Cleanup(func() { srv.Close() })
	timer := time.AfterFunc(200*time.Millisecond, func() {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("listen on %s: %v", addr, err)
			return
		}
		go srv.Serve(ln)
	})
	t.Cleanup(func() { timer.Stop() })
	accept, _ := parseStatus("any")
	start := time.Now()
	code, err := waitHTTP(context.Background(), "http://"+addr+"/", accept,
		waitOptions{timeout: 5 * time.Second, interval: 20 * time.Millisecond, requestTimeout: time.Second})
	if err != nil || code != http.StatusOK {
		t.Errorf("waitHTTP = %d, %v; want 200", code, err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("waitHTTP returned after %v, before the server started", d)
	}
}

func TestWaitHTTPIgnoresProxyEnv(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("http_proxy", "http://127.0.0.1:1")
	tr := newProbeClient().Transport.(*http.Transport)
	if tr.Proxy != nil {
		t.Error("probe client has a Proxy function; want none, so that HTTP_PROXY is ignored")
	}
}

package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestEgressCheckCanary(t *testing.T) {
	addr := freeAddr(t)
	stop, err := startCanary(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	var out bytes.Buffer
	if code := runEgressCheck([]string{"--expect-canary", addr}, &out, &out); code != 0 {
		t.Errorf("expect-canary of a live canary: exit %d\n%s", code, out.String())
	}
	// Here (the host, or a test container with a network) the canary is
	// reachable, so the agent-side check must fail: this is what up
	// relies on to catch a misconfigured agent.
	out.Reset()
	if code := runEgressCheck([]string{"--canary", addr}, &out, &out); code != 1 || !strings.Contains(out.String(), "FAIL no direct connection") {
		t.Errorf("canary reachable but egress-check passed: exit %d\n%s", code, out.String())
	}
	out.Reset()
	dead := freeAddr(t)
	if code := runEgressCheck([]string{"--expect-canary", dead, "--timeout", "200ms"}, &out, &out); code != 1 {
		t.Errorf("expect-canary of nothing: exit %d\n%s", code, out.String())
	}
}

// The workspace's canary check runs as soon as the pod has started: a
// canary that listens a moment later still passes it, and the time it
// takes to give up on one that never does is the timeout.
func TestEgressCheckCanaryLate(t *testing.T) {
	addr := freeAddr(t)
	started := make(chan func())
	go func() {
		time.Sleep(300 * time.Millisecond)
		stop, err := startCanary(addr)
		if err != nil {
			t.Error(err)
			stop = func() {}
		}
		started <- stop
	}()
	var out bytes.Buffer
	code := runEgressCheck([]string{"--expect-canary", addr, "--timeout", "3s"}, &out, &out)
	defer (<-started)()
	if code != 0 {
		t.Errorf("expect-canary of a canary that starts 300ms late: exit %d\n%s", code, out.String())
	}
	dead := freeAddr(t)
	begin := time.Now()
	if ok, err := awaitCanary(dead, 400*time.Millisecond); ok || err == nil {
		t.Errorf("awaitCanary of nothing = %v, %v", ok, err)
	}
	if took := time.Since(begin); took < 300*time.Millisecond || took > 2*time.Second {
		t.Errorf("awaitCanary of nothing gave up after %s; want about its timeout, 400ms", took)
	}
}

func TestEgressCheckProxy(t *testing.T) {
	deny := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "devaipod proxy: "+r.Host+" is not on the allowlist", http.StatusForbidden)
	}))
	defer deny.Close()
	if err := proxyDenies(deny.URL, time.Second); err != nil {
		t.Errorf("devaipod's 403: %v", err)
	}
	open := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer open.Close()
	if err := proxyDenies(open.URL, time.Second); err == nil {
		t.Error("a proxy that lets the request through passed the check")
	}
	if err := proxyDenies("http://"+freeAddr(t), 200*time.Millisecond); err == nil {
		t.Error("no proxy at all passed the check")
	}
}

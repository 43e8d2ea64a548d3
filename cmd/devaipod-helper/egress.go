package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/devaipod/devaipod/internal/cmdline"
	"github.com/devaipod/devaipod/internal/helperargs"
)

// The canary is a listener in the pod's network namespace (run by the
// workspace's init). egress-check, run by devaipod up inside the agent,
// proves that the agent cannot reach it: if the agent shared the pod's
// network, or had any interface but loopback, it would. Run in the
// workspace with --expect-canary, the same check proves the canary is up,
// so the agent's failure to reach it means something.

const canaryToken = "devaipod-canary\n"

// startCanary answers every connection on addr with canaryToken.
func startCanary(addr string) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetWriteDeadline(time.Now().Add(time.Second))
			io.WriteString(c, canaryToken)
			c.Close()
		}
	}()
	return func() { ln.Close() }, nil
}

// readCanary connects to addr and tells whether the canary answered.
func readCanary(addr string, timeout time.Duration) (bool, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return false, err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	return line == canaryToken, err
}

// awaitCanary is readCanary for a canary that is still starting: up runs
// its check as soon as the pod has started, and the workspace's init may
// not listen yet (it did not, once, on a loaded CI machine). A refused
// connection is tried again until timeout has passed.
func awaitCanary(addr string, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := readCanary(addr, time.Until(deadline))
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Until(deadline) < canaryRetry {
			return ok, err
		}
		time.Sleep(canaryRetry)
	}
}

// canaryRetry is how long awaitCanary waits before it tries again.
const canaryRetry = 50 * time.Millisecond

type egressOptions struct {
	canary       string
	expectCanary string
	proxy        string
	timeout      time.Duration
}

func newEgressFlagSet(o *egressOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("egress-check", flag.ContinueOnError)
	fs.StringVar(&o.canary, "canary", "", "`HOST:PORT` of a canary that must NOT be reachable from here")
	fs.StringVar(&o.expectCanary, "expect-canary", "", "`HOST:PORT` of a canary that must be reachable from here")
	fs.StringVar(&o.proxy, "proxy", "", "proxy `URL` that must answer and refuse a host off its allowlist")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Second, "timeout of each probe")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper egress-check [flags]

Checks this container's network containment and prints one line per probe.
Exit status 0 when every probe holds, 1 otherwise.

Flags:
`)
		fs.PrintDefaults()
	}
	return fs
}

func runEgressCheck(args []string, stdout, stderr io.Writer) int {
	o := &egressOptions{}
	fs := newEgressFlagSet(o)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return cmdline.ExitCode(err)
	}
	failed := false
	report := func(name string, err error) {
		if err != nil {
			failed = true
			fmt.Fprintf(stdout, "FAIL %s: %v\n", name, err)
			return
		}
		fmt.Fprintf(stdout, "ok   %s\n", name)
	}
	if o.expectCanary != "" {
		ok, err := awaitCanary(o.expectCanary, o.timeout)
		if !ok && err == nil {
			err = errors.New("something else answered")
		}
		report("canary "+o.expectCanary+" answers", err)
	}
	if o.canary != "" {
		report("no interface but loopback", onlyLoopback())
		ok, err := readCanary(o.canary, o.timeout)
		var probe error
		if ok {
			probe = fmt.Errorf("reached the pod's canary at %s directly", o.canary)
		}
		_ = err // any failure to connect or read is the expected outcome
		report("no direct connection to "+o.canary, probe)
	}
	if o.proxy != "" {
		report("proxy "+o.proxy+" denies by default", proxyDenies(o.proxy, o.timeout))
	}
	if failed {
		return 1
	}
	return 0
}

// onlyLoopback fails if any interface other than loopback exists.
func onlyLoopback() error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return err
	}
	var others []string
	for _, i := range ifaces {
		if i.Flags&net.FlagLoopback == 0 {
			others = append(others, i.Name)
		}
	}
	if len(others) > 0 {
		return fmt.Errorf("interfaces besides loopback: %s", strings.Join(others, ", "))
	}
	return nil
}

// proxyDenies asks the proxy for a host no allowlist has and expects
// devaipod's 403.
func proxyDenies(proxy string, timeout time.Duration) error {
	u, err := url.Parse(proxy)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{Proxy: http.ProxyURL(u)}}
	resp, err := client.Get("http://" + helperargs.EgressProbeHost + "/")
	if err != nil {
		return fmt.Errorf("no answer: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusForbidden || !strings.HasPrefix(string(body), "devaipod proxy") {
		return fmt.Errorf("answered %s, not devaipod's denial: %.80q", resp.Status, body)
	}
	return nil
}

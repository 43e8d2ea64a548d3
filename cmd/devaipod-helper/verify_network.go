package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/devaipod/devaipod/proxy"
)

// ---- network ----

// routeTable reads the IPv4 and IPv6 routes of this network namespace
// (under root) and returns those not on loopback.
func routeTable(root string) ([]string, error) {
	var routes []string
	v4, err := os.ReadFile(filepath.Join(root, "/proc/net/route"))
	if err != nil {
		return nil, err
	}
	for i, line := range strings.Split(string(v4), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 3 || f[0] == "lo" {
			continue
		}
		routes = append(routes, fmt.Sprintf("%s via %s dev %s", hexIPv4(f[1]), hexIPv4(f[2]), f[0]))
	}
	v6, err := os.ReadFile(filepath.Join(root, "/proc/net/ipv6_route"))
	if errors.Is(err, fs.ErrNotExist) {
		return routes, nil // IPv6 is off
	} else if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(v6), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || f[9] == "lo" {
			continue
		}
		routes = append(routes, fmt.Sprintf("%s/%s dev %s", hexIPv6(f[0]), hexPrefix(f[1]), f[9]))
	}
	return routes, nil
}

// hexIPv4 reads /proc/net/route's little-endian hex address.
func hexIPv4(s string) string {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 4 {
		return s
	}
	return netip.AddrFrom4([4]byte{b[3], b[2], b[1], b[0]}).String()
}

func hexIPv6(s string) string {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 {
		return s
	}
	return netip.AddrFrom16([16]byte(b)).String()
}

func hexPrefix(s string) string {
	n, err := strconv.ParseUint(s, 16, 8)
	if err != nil {
		return s
	}
	return strconv.FormatUint(n, 10)
}

// netRoutes is the route check that gates every direct-egress probe.
func (v *verifier) netRoutes(_ context.Context) (verifyResult, string) {
	routes, err := v.routeTable()
	switch {
	case err != nil:
		return verifyFail, "cannot read the route table: " + errText(err)
	case len(routes) > 0:
		return verifyFail, "routes: " + listSome(routes, 4)
	}
	return verifyPass, "no route in /proc/net/route and /proc/net/ipv6_route but loopback"
}

func (v *verifier) routeTable() ([]string, error) {
	v.netOnce.Do(func() { v.routes, v.routeErr = routeTable(v.root) })
	return v.routes, v.routeErr
}

// noRoute tells whether the direct probes may send: only where the kernel
// has no route, so that it refuses before a packet exists. Otherwise it
// says why the probe FAILs without trying.
func (v *verifier) noRoute() (ok bool, why string) {
	routes, err := v.routeTable()
	switch {
	case err != nil:
		return false, "not tried: the route table cannot be read (" + errText(err) + ")"
	case len(routes) > 0:
		return false, "not tried: this network namespace has a route (" + routes[0] + "), so a packet would leave"
	}
	return true, ""
}

func (v *verifier) netInterfaces(_ context.Context) (verifyResult, string) {
	ifaces, err := v.interfaces()
	if err != nil {
		return verifyFail, "cannot list interfaces: " + errText(err)
	}
	return judgeInterfaces(ifaces)
}

// judgeInterfaces FAILs on any interface but loopback that is up. Down
// ones (the fallback tunnel devices a module adds to every namespace) are
// reported: bringing one up needs CAP_NET_ADMIN.
func judgeInterfaces(ifaces []net.Interface) (verifyResult, string) {
	var up, down []string
	for _, i := range ifaces {
		switch {
		case i.Flags&net.FlagLoopback != 0:
		case i.Flags&net.FlagUp != 0:
			up = append(up, i.Name)
		default:
			down = append(down, i.Name)
		}
	}
	if len(up) > 0 {
		return verifyFail, "up besides loopback: " + strings.Join(up, ", ")
	}
	if len(down) > 0 {
		return verifyPass, "only loopback is up; down: " + strings.Join(down, ", ") + " (bringing one up needs CAP_NET_ADMIN)"
	}
	return verifyPass, "only loopback"
}

// sendResult is how far a direct send got.
type sendResult struct {
	connected bool // connect(2) worked: the kernel had a route
	sent      bool // the payload was accepted for sending
	answered  bool // something answered
}

// errRouteExists: sendWithoutRoute refused to send.
var errRouteExists = errors.New("not sent: this network namespace has a route")

// sendWithoutRoute connects to address, sends payload and waits for an
// answer, but only after reading the real route table (whatever root the
// probes read) and finding no route but loopback: then the kernel refuses
// any destination off the machine before a packet exists. It is the one
// place that sends, so no test setup can make a probe send outside.
func sendWithoutRoute(ctx context.Context, network, address string, payload []byte, timeout time.Duration) (sendResult, error) {
	var res sendResult
	if routes, err := routeTable(""); err != nil || len(routes) > 0 {
		return res, errRouteExists
	}
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, network, address)
	if err != nil {
		return res, err
	}
	defer c.Close()
	res.connected = true
	if len(payload) == 0 {
		return res, nil
	}
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(payload); err != nil {
		return res, err
	}
	res.sent = true
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	res.answered = n > 0
	return res, err
}

func (v *verifier) canaryProbe(_ context.Context) (verifyResult, string) {
	if v.opts.canary == "" {
		return verifyNA, "no --canary given"
	}
	ok, err := readCanary(v.opts.canary, v.opts.timeout)
	if ok {
		return verifyFail, "the canary answered: this container shares the pod's network"
	}
	if err == nil {
		return verifyPass, "something else answered, not the canary"
	}
	return verifyPass, errText(err)
}

// directProbe sends to a documentation address where no route exists.
func (v *verifier) directProbe(ctx context.Context, network, address string, payload []byte) (verifyResult, string) {
	if ok, why := v.noRoute(); !ok {
		return verifyFail, why
	}
	res, err := v.send(ctx, network, address, payload, v.opts.timeout)
	switch {
	case errors.Is(err, errRouteExists):
		return verifyFail, "not tried: " + err.Error()
	case res.answered:
		return verifyFail, "an answer came back from " + address
	case res.sent:
		return verifyFail, "the kernel sent it: it had a route after all"
	case res.connected && len(payload) == 0:
		return verifyFail, "connected to " + address
	case err == nil:
		return verifyFail, "no error from the kernel"
	}
	return verifyPass, errText(err)
}

func orNoError(err error) error {
	if err == nil {
		return errors.New("no error")
	}
	return err
}

func (v *verifier) tcpDirect(ctx context.Context) (verifyResult, string) {
	return v.directProbe(ctx, "tcp", directTCPAddr, nil)
}

func (v *verifier) udpDirect(ctx context.Context) (verifyResult, string) {
	return v.directProbe(ctx, "udp4", directUDPAddr, []byte("devaipod-verify\n"))
}

func (v *verifier) ipv6Direct(ctx context.Context) (verifyResult, string) {
	return v.directProbe(ctx, "udp6", directIPv6Addr, []byte("devaipod-verify\n"))
}

// nameservers reads /etc/resolv.conf.
func (v *verifier) nameservers() ([]netip.Addr, error) {
	data, err := v.readFile("/etc/resolv.conf")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// dnsQuery is a DNS query for name's A record.
func dnsQuery(name string) []byte {
	q := []byte{0xd0, 0x0d, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, label := range strings.Split(name, ".") {
		q = append(q, byte(len(label)))
		q = append(q, label...)
	}
	return append(q, 0, 0, 1, 0, 1)
}

func (v *verifier) dnsDirect(ctx context.Context) (verifyResult, string) {
	servers, err := v.nameservers()
	if err != nil {
		return verifyFail, "cannot read /etc/resolv.conf: " + errText(err)
	}
	if ok, why := v.noRoute(); !ok {
		return verifyFail, why
	}
	if len(servers) == 0 {
		return verifyPass, "no nameserver in /etc/resolv.conf"
	}
	var denied []namedErr
	for _, s := range servers {
		addr := netip.AddrPortFrom(s, 53).String()
		res, err := v.send(ctx, "udp", addr, dnsQuery(dnsProbeName), v.opts.timeout)
		switch {
		case errors.Is(err, errRouteExists):
			return verifyFail, "not tried: " + err.Error()
		case res.answered:
			return verifyFail, "nameserver " + addr + " answered"
		case res.sent && !s.IsLoopback():
			return verifyFail, "the query to " + addr + " was sent"
		}
		denied = append(denied, namedErr{addr, orNoError(err)})
	}
	return verifyPass, groupErrors(denied)
}

// ---- proxy ----

// proxyConnect sends a CONNECT for target through the proxy and returns
// its status, devaipod's refusal reason (X-Devaipod-Proxy) and the start
// of the body.
func proxyConnect(ctx context.Context, proxyURL, target string, timeout time.Duration) (status int, reason, body string, err error) {
	u, err := url.Parse(proxyURL)
	if err != nil {
		return 0, "", "", err
	}
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return 0, "", "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		return 0, "", "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		body = string(b)
	}
	return resp.StatusCode, resp.Header.Get("X-Devaipod-Proxy"), body, nil
}

// judgeProxyAnswer: devaipod's 403 is a PASS; anything else FAILs, since
// it either let the request through (2xx, or an upstream error after
// dialling) or does not show that devaipod's proxy refused and audited it. want are the refusal reasons this
// probe aims at; another reason still PASSes, with a note.
func judgeProxyAnswer(target string, status int, reason, body string, err error, want ...string) (verifyResult, string) {
	switch {
	case err != nil:
		return verifyFail, "no answer from the proxy, so its refusal cannot be shown: " + errText(err)
	case status/100 == 2:
		return verifyFail, fmt.Sprintf("the proxy opened a tunnel to %s (%d)", target, status)
	case status != http.StatusForbidden:
		what := fmt.Sprintf("the proxy answered %d", status)
		if reason == proxy.ReasonUpstreamError {
			what += ": it let the request through and the connection failed"
		}
		return verifyFail, what
	case reason == "":
		return verifyFail, "403, but not from devaipod's proxy (no X-Devaipod-Proxy header), so its audit cannot be relied on"
	case slices.Contains(want, reason):
		return verifyPass, "403 " + reason
	}
	return verifyPass, fmt.Sprintf("403 %s (refused before the check this row aims at: %s)", reason, firstLine(body))
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func (v *verifier) proxyDeniedHost(ctx context.Context) (verifyResult, string) {
	if v.opts.proxy == "" {
		return verifyNA, "no --proxy given (network mode none or open)"
	}
	target := net.JoinHostPort(v.opts.deniedHost, "443")
	status, reason, body, err := proxyConnect(ctx, v.opts.proxy, target, v.opts.timeout)
	res, detail := judgeProxyAnswer(target, status, reason, body, err, proxy.ReasonNotAllowed, proxy.ReasonDenied)
	if res != verifyPass {
		return res, "CONNECT: " + detail
	}
	// Plain HTTP too, with egress-check's probe.
	if err := proxyDenies(v.opts.proxy, v.opts.timeout); err != nil {
		return verifyFail, "CONNECT refused, but plain HTTP: " + errText(err)
	}
	return verifyPass, "CONNECT: " + detail + "; plain HTTP: 403"
}

func (v *verifier) proxyIPLiteral(ctx context.Context) (verifyResult, string) {
	if v.opts.proxy == "" {
		return verifyNA, "no --proxy given (network mode none or open)"
	}
	target := net.JoinHostPort(v.opts.ipLiteral, "443")
	status, reason, body, err := proxyConnect(ctx, v.opts.proxy, target, v.opts.timeout)
	return judgeProxyAnswer(target, status, reason, body, err, proxy.ReasonIPLiteral)
}

func (v *verifier) proxyPrivateHost(ctx context.Context) (verifyResult, string) {
	if v.opts.proxy == "" {
		return verifyNA, "no --proxy given (network mode none or open)"
	}
	target := net.JoinHostPort(v.opts.privateHost, "443")
	status, reason, body, err := proxyConnect(ctx, v.opts.proxy, target, v.opts.timeout)
	res, detail := judgeProxyAnswer(target, status, reason, body, err, proxy.ReasonPrivateAddress)
	if res == verifyPass && reason == proxy.ReasonNotAllowed {
		detail = "403 " + reason + ": no rule allows " + v.opts.privateHost +
			", so the address guard was not reached (give --private-host a name a rule allows to test it)"
	}
	return res, detail
}

// ---- podman API ----

func (v *verifier) podmanAPI(ctx context.Context) (verifyResult, string) {
	patterns := slices.Clone(v.opts.podmanSockets)
	if x := envValue(v.environ, "XDG_RUNTIME_DIR"); path.IsAbs(x) {
		patterns = append(patterns, path.Join(x, "podman/podman.sock"), path.Join(x, "docker.sock"))
	}
	for _, name := range []string{"CONTAINER_HOST", "DOCKER_HOST"} {
		if p, ok := strings.CutPrefix(envValue(v.environ, name), "unix://"); ok && path.IsAbs(p) {
			patterns = append(patterns, p)
		}
	}
	var present []namedErr
	var reached []string
	for _, pat := range patterns {
		for _, p := range v.glob(pat) {
			if _, err := os.Lstat(v.path(p)); err != nil {
				continue
			}
			d := net.Dialer{Timeout: v.opts.timeout}
			c, err := d.DialContext(ctx, "unix", v.path(p))
			if err == nil {
				c.Close()
				reached = append(reached, p)
				continue
			}
			present = append(present, namedErr{p, err})
		}
	}
	if len(reached) > 0 {
		return verifyFail, "connected to " + strings.Join(reached, ", ")
	}
	if len(present) > 0 {
		return verifyPass, "present but not reachable: " + groupErrors(present)
	}
	return verifyPass, "no API socket at " + strings.Join(patterns, " ")
}

// credentialPlaceholders checks that each credential variable holds its
// placeholder (devaipod-NAME-SALT), and that the proxy refuses to carry it
// where the value must not go: in a plain-HTTP request to a host no
// credential is bound to.
func (v *verifier) credentialPlaceholders(ctx context.Context) (verifyResult, string) {
	if len(v.opts.credentialVars) == 0 {
		return verifyNA, "no credentials in this pod (no --credential-var)"
	}
	var bad []string
	for _, name := range v.opts.credentialVars {
		if !strings.HasPrefix(envValue(v.environ, name), "devaipod-"+name+"-") {
			bad = append(bad, name)
		}
	}
	if len(bad) > 0 {
		return verifyFail, strings.Join(bad, ", ") + " hold(s) something other than the proxy's placeholder"
	}
	if v.opts.proxy == "" {
		return verifyPass, fmt.Sprintf("%d variable(s) hold placeholders; no proxy to send them to", len(v.opts.credentialVars))
	}
	u, err := url.Parse(v.opts.proxy)
	if err != nil {
		return verifyFail, errText(err)
	}
	client := &http.Client{Timeout: v.opts.timeout, Transport: &http.Transport{Proxy: http.ProxyURL(u)}}
	for _, name := range v.opts.credentialVars {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+v.opts.deniedHost+"/", nil)
		if err != nil {
			return verifyFail, errText(err)
		}
		req.Header.Set("Authorization", "Bearer "+envValue(v.environ, name))
		resp, err := client.Do(req)
		if err != nil {
			return verifyFail, name + ": no answer from the proxy: " + errText(err)
		}
		resp.Body.Close()
		if reason := resp.Header.Get("X-Devaipod-Proxy"); resp.StatusCode != http.StatusForbidden || reason != proxy.ReasonCredentialHost {
			return verifyFail, fmt.Sprintf("%s's placeholder in plain HTTP to %s: %s %q, not 403 %s", name, v.opts.deniedHost, resp.Status, reason, proxy.ReasonCredentialHost)
		}
	}
	return verifyPass, fmt.Sprintf("%d variable(s) hold placeholders; each sent to %s in plain HTTP: 403 %s", len(v.opts.credentialVars), v.opts.deniedHost, proxy.ReasonCredentialHost)
}

// ---- the cluster's network ----

// On a cluster the agent's Pod has the CNI's interface and routes, so the
// direct probes above do not send (a packet could leave); a NetworkPolicy
// that allows it nothing is what keeps it in, and only a CNI plugin that
// enforces NetworkPolicy does. clusterEgress tests that enforcement
// against a target devaipod owns: the workspace Pod's canary, which on a
// cluster listens on that Pod's addresses too (pod/kube), and whose
// addresses the engine passes with --cluster-canary. Nothing else is ever
// sent to: the flag takes only non-public addresses, and the agent's Pod is
// on the workspace's node (its required podAffinity).

// clusterCanaryNets are the addresses --cluster-canary takes besides the
// private, loopback and link-local ones: the shared address space, which
// some CNI plugins give Pods.
var clusterCanaryNets = []netip.Prefix{netip.MustParsePrefix("100.64.0.0/10")}

// checkClusterCanary accepts IP:PORT with a non-public IP literal: a Pod's
// address, never one on the internet.
func checkClusterCanary(s string) (string, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Port() == 0 {
		return "", fmt.Errorf("%q: want IP:PORT (the workspace Pod's address and the canary's port)", s)
	}
	a := ap.Addr().Unmap()
	if !a.IsPrivate() && !a.IsLoopback() && !a.IsLinkLocalUnicast() &&
		!slices.ContainsFunc(clusterCanaryNets, func(p netip.Prefix) bool { return p.Contains(a) }) {
		return "", fmt.Errorf("%q: not a private, shared, loopback or link-local address: verify never sends to a public one", s)
	}
	return netip.AddrPortFrom(a, ap.Port()).String(), nil
}

// clusterPayload is the UDP probe's datagram.
var clusterPayload = []byte("devaipod-verify\n")

// clusterEgress tries TCP and UDP to each cluster canary. TCP reached it
// when a connection opens (the canary listens there: the engine checked it
// from the workspace's side). UDP reached it when something answers, or
// when the workspace Pod's kernel refuses the port (nothing listens to UDP
// there, so its ICMP port unreachable comes back as "connection refused"):
// proof that the datagram arrived. Anything else (no route, refused by
// the network, dropped until the timeout) did not reach it.
func (v *verifier) clusterEgress(ctx context.Context) (verifyResult, string) {
	if len(v.opts.clusterCanaries) == 0 {
		return verifyNA, "no --cluster-canary given (on a cluster the engine gives the workspace Pod's addresses; on podman the agent has no network, which net-interfaces and the direct probes show)"
	}
	type part struct {
		what    string
		reached bool
		why     string
	}
	parts := make([]part, 2*len(v.opts.clusterCanaries))
	done := make(chan struct{})
	for i, addr := range v.opts.clusterCanaries {
		go func() {
			reached, why := v.clusterTCP(ctx, addr)
			parts[2*i] = part{"tcp " + addr, reached, why}
			done <- struct{}{}
		}()
		go func() {
			reached, why := v.clusterUDP(ctx, addr)
			parts[2*i+1] = part{"udp " + addr, reached, why}
			done <- struct{}{}
		}()
	}
	for range parts {
		<-done
	}
	res := verifyPass
	var text []string
	for _, p := range parts {
		state := "not reached"
		if p.reached {
			state, res = "reached", verifyFail
		}
		text = append(text, p.what+": "+state+" ("+p.why+")")
	}
	return res, strings.Join(text, "; ")
}

func (v *verifier) clusterTCP(ctx context.Context, addr string) (bool, string) {
	c, err := v.dialCluster(ctx, "tcp", addr, v.opts.timeout)
	if err != nil {
		return false, errText(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(v.opts.timeout))
	line, _ := bufio.NewReader(c).ReadString('\n')
	if line == canaryToken {
		return true, "the canary answered"
	}
	return true, "connected"
}

func (v *verifier) clusterUDP(ctx context.Context, addr string) (bool, string) {
	c, err := v.dialCluster(ctx, "udp", addr, v.opts.timeout)
	if err != nil {
		return false, errText(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(v.opts.timeout))
	if _, err := c.Write(clusterPayload); err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return true, "port unreachable came back: the datagram arrived"
		}
		return false, errText(err)
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	var ne net.Error
	switch {
	case n > 0:
		return true, "an answer came back"
	case errors.Is(err, syscall.ECONNREFUSED):
		return true, "port unreachable came back: the datagram arrived"
	case errors.As(err, &ne) && ne.Timeout():
		return false, "no answer and no refusal within " + v.opts.timeout.String()
	case err == nil:
		return true, "an empty answer came back"
	}
	return false, errText(err)
}

// dialCluster connects to a cluster canary (UDP: a connected socket,
// nothing sent yet).
func dialCluster(ctx context.Context, network, address string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.DialContext(ctx, network, address)
}

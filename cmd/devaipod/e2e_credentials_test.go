package main

import (
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devaipod/devaipod/proxy"
)

// testCA is a certificate authority of the test's own, for HTTPS servers
// on the host's loopback that the pod's proxy trusts through [network]
// upstream_ca (and nothing in the agent does).
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "devaipod e2e upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// serverTLS is a TLS configuration for names, signed by the CA.
func (ca *testCA) serverTLS(t *testing.T, names ...string) *tls.Config {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}

// file writes the CA's PEM where the test user's devaipod can read it.
func (ca *testCA) file(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(path, ca.pem, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// credentialUpstream is an HTTPS server on the host's loopback that
// records the credentials it is sent and never echoes them.
type credentialUpstream struct {
	srv  *httptest.Server
	port int
	mu   sync.Mutex
	seen []string // "HOST PATH AUTHORIZATION X-API-KEY METHOD"
	// echoEncodings are the Accept-Encoding of each /echo request.
	echoEncodings []string
}

func startCredentialUpstream(t *testing.T, ca *testCA, names ...string) *credentialUpstream {
	u := &credentialUpstream{}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, strings.Join([]string{r.Host, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), r.Method}, " "))
		u.mu.Unlock()
		if r.URL.Path == "/echo" || r.URL.Path == "/echo-gzip" {
			// What a debug endpoint, or an error that quotes the
			// request, hands back: the credentials it got, in a header
			// and in the body, gzipped when the client asks for it
			// (/echo-gzip: always, whatever it is asked for).
			seen := r.Header.Get("Authorization") + " " + r.Header.Get("X-Api-Key")
			u.mu.Lock()
			u.echoEncodings = append(u.echoEncodings, r.Header.Get("Accept-Encoding"))
			u.mu.Unlock()
			w.Header().Set("X-Seen", seen)
			w.Header().Set("Content-Type", "application/json")
			body, _ := json.Marshal(map[string]string{"seen": seen})
			if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") || r.URL.Path == "/echo-gzip" {
				w.Header().Set("Content-Encoding", "gzip")
				zw := gzip.NewWriter(w)
				zw.Write(body)
				zw.Close()
				return
			}
			w.Write(body)
			return
		}
		if r.URL.Path == "/sse" {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: first\n\n")
			w.(http.Flusher).Flush()
			time.Sleep(1500 * time.Millisecond)
			fmt.Fprint(w, "data: second\n\n")
			return
		}
		fmt.Fprintf(w, "ok %s\n", r.URL.Path)
	}))
	u.srv.TLS = ca.serverTLS(t, names...)
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	u.port = port(t, u.srv.URL)
	return u
}

func (u *credentialUpstream) requests() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return strings.Join(u.seen, "\n")
}

// TestE2ECredentials: the agent holds placeholders; the proxy puts the
// real values in on their hosts only (a custom credential from
// devaipod's environment, one from a podman secret, Basic auth), streams,
// refuses a placeholder sent anywhere else, and the values are nowhere
// the agent, podman inspect, the audit or verify show.
func TestE2ECredentials(t *testing.T) {
	e2e(t)
	const (
		token    = "real-token-value-e2e-4f1c9a"
		password = "real-password-e2e-77d0b3"
	)
	ca := newTestCA(t)
	up := startCredentialUpstream(t, ca, "api.cred.test", "git.cred.test", "other.cred.test")
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a plain-HTTP request carrying a placeholder got through: %v", r.Header)
	}))
	t.Cleanup(plain.Close)
	secret := uniqueName("e2e-cred-secret")
	if out, err := exec.Command("sh", "-c", "printf %s "+password+" | podman secret create "+secret+" -").CombinedOutput(); err != nil {
		t.Fatalf("podman secret create: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("podman", "secret", "rm", secret).Run() })

	p := strconv.Itoa(up.port)
	cfg := standInConfig(t, `[network]
host_loopback = true
no_default_allow = true
allow = ["other.cred.test:`+p+`", "plain.cred.test:`+strconv.Itoa(port(t, plain.URL))+`", "10.0.2.2:*"]
extra_hosts = ["api.cred.test:10.0.2.2", "git.cred.test:10.0.2.2", "other.cred.test:10.0.2.2", "plain.cred.test:10.0.2.2"]
upstream_ca = ["`+ca.file(t)+`"]
[credentials.MY_API_TOKEN]
hosts = ["api.cred.test:`+p+`"]
[credentials.REG_PASSWORD]
hosts = ["git.cred.test:`+p+`"]
secret = "`+secret+`"
`)
	name := uniqueName("e2e-cred")
	cleanup(t, name)
	upOut := mustDevaipod(t, []string{"MY_API_TOKEN=" + token}, "--config", cfg, "up", fixtureRepo(t), "--name", name)
	if !strings.Contains(upOut.stdout, "credential MY_API_TOKEN") || !strings.Contains(upOut.stdout, "api.cred.test:"+p) {
		t.Errorf("up does not list the credential and its host:\n%s", upOut)
	}
	agent := func(script string) result {
		return devaipod(t, nil, "exec", name, "-c", "agent", "--", "sh", "-c", script)
	}
	placeholders := agent(`printf '%s\n%s\n' "$MY_API_TOKEN" "$REG_PASSWORD"`)
	ph := strings.Fields(placeholders.stdout)
	if len(ph) != 2 || !strings.HasPrefix(ph[0], "devaipod-MY_API_TOKEN-") || !strings.HasPrefix(ph[1], "devaipod-REG_PASSWORD-") {
		t.Fatalf("the agent's variables are not placeholders: %s", placeholders)
	}

	t.Run("on its host the proxy puts the value in, and curl trusts the proxy's CA out of the box", func(t *testing.T) {
		r := agent(`curl -sS -H "Authorization: Bearer $MY_API_TOKEN" -H "X-Api-Key: $MY_API_TOKEN" https://api.cred.test:` + p + `/v1/models`)
		if r.code != 0 || r.stdout != "ok /v1/models\n" {
			t.Fatalf("%s", r)
		}
		if want := "api.cred.test:" + p + " /v1/models Bearer " + token + " " + token; !strings.Contains(up.requests(), want) {
			t.Errorf("the upstream saw:\n%s\nwant %q", up.requests(), want)
		}
	})
	t.Run("Basic auth from a podman secret", func(t *testing.T) {
		r := agent(`curl -sS -u "agent:$REG_PASSWORD" https://git.cred.test:` + p + `/repo.git/info/refs`)
		if r.code != 0 {
			t.Fatalf("%s", r)
		}
		basic := "Basic " + b64("agent:"+password)
		if !strings.Contains(up.requests(), "/repo.git/info/refs "+basic) {
			t.Errorf("the upstream saw:\n%s\nwant %q", up.requests(), basic)
		}
	})
	t.Run("a placeholder sent anywhere else never carries the value", func(t *testing.T) {
		// To the other credential's host: refused, with the reason.
		r := agent(`curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $MY_API_TOKEN" https://git.cred.test:` + p + `/x`)
		if r.stdout != "403" {
			t.Errorf("MY_API_TOKEN's placeholder to git.cred.test: %s", r)
		}
		// In plain HTTP: refused before it leaves.
		r = agent(`curl -sS -o /dev/null -w '%{http_code}' -H "X-Api-Key: $MY_API_TOKEN" http://plain.cred.test:` + strconv.Itoa(port(t, plain.URL)) + `/`)
		if r.stdout != "403" {
			t.Errorf("a placeholder in plain HTTP: %s", r)
		}
		// Through an opaque tunnel to an allowed host without a credential:
		// the proxy cannot see it, so only the placeholder leaves (and the
		// agent does not trust that server: -k).
		r = agent(`curl -sSk -H "Authorization: Bearer $MY_API_TOKEN" https://other.cred.test:` + p + `/tunnel`)
		if r.code != 0 || !strings.Contains(up.requests(), "other.cred.test:"+p+" /tunnel Bearer "+ph[0]) {
			t.Errorf("through a tunnel: %s\nupstream saw:\n%s", r, up.requests())
		}
		if strings.Contains(up.requests(), "/x ") {
			t.Errorf("the refused request reached the upstream:\n%s", up.requests())
		}
	})
	t.Run("requests smuggled in from the agent reach the upstream as nothing but what the proxy read", func(t *testing.T) {
		// The agent speaks HTTP/1.1 itself inside an intercepted
		// connection, hiding behind a framing trick a second request
		// that the proxy refuses when it sees one (TRACE, which would
		// echo the value back; another host). The proxy reads each
		// request as net/http would, or in its plain subset, and writes
		// upstream anew only what it read: no hidden request reaches the
		// server, whichever reading a trick falls to.
		host := "api.cred.test:" + p
		trace := func(n int) string {
			return "TRACE /smuggled-" + strconv.Itoa(n) + " HTTP/1.1\r\nHost: " + host + "\r\nX-Api-Key: " + ph[0] + "\r\n\r\n"
		}
		payloads := []string{
			// CL.TE: a body of Content-Length that chunked reading ends early.
			"POST /cl-te HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: " + strconv.Itoa(5+len(trace(1))) +
				"\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + trace(1),
			// TE.CL: a chunk that, read by Content-Length, is a request.
			"POST /te-cl HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" +
				strconv.FormatInt(int64(len(trace(2))), 16) + "\r\n" + trace(2) + "\r\n0\r\n\r\n",
			// Two Content-Lengths.
			"POST /two-lengths HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 0\r\nContent-Length: " +
				strconv.Itoa(len(trace(3))) + "\r\n\r\n" + trace(3),
			// A bare LF that would end the head early for a lax reader.
			"POST /bare-lf HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: " + strconv.Itoa(len(trace(4))) + "\n\n" + trace(4),
			// An obs-fold that would hide a request line in a header.
			"GET /fold HTTP/1.1\r\nHost: " + host + "\r\nX-Api-Key: " + ph[0] + "\r\n " + strings.TrimSuffix(trace(5), "\r\n\r\n") + "\r\n\r\n",
			// A length in leading zeros, then a TRACE.
			"POST /zeros HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 000\r\n\r\n" + trace(6),
			// Plain pipelining: a request of the plain subset, then a TRACE
			// and one for another host.
			"GET /first HTTP/1.1\r\nHost: " + host + "\r\nX-Api-Key: " + ph[0] + "\r\n\r\n" + trace(7) +
				"GET /smuggled-8 HTTP/1.1\r\nHost: other.cred.test:" + p + "\r\nX-Api-Key: " + ph[0] + "\r\n\r\n",
		}
		args := []string{host}
		for _, pl := range payloads {
			args = append(args, b64(pl))
		}
		r := agent("cat > /tmp/smuggle.js <<'EOF'\n" + smuggleScript + "EOF\nnode /tmp/smuggle.js " + strings.Join(args, " "))
		if r.code != 0 || strings.Count(r.stdout, "=====") != len(payloads) {
			t.Fatalf("the agent's script did not run:\n%s", r)
		}
		if strings.Contains(r.stdout, token) {
			t.Errorf("the agent got the real value back:\n%s", r.stdout)
		}
		seen := up.requests()
		if strings.Contains(seen, "smuggled") || strings.Contains(seen, " TRACE") {
			t.Errorf("a smuggled request reached the upstream:\n%s", seen)
		}
		// The requests that were requests went through, the real value in.
		if !strings.Contains(seen, host+" /first  "+token+" GET") {
			t.Errorf("the pipelined plain request did not reach the upstream with the value:\n%s", seen)
		}
		if !strings.Contains(r.stdout, "405 Method Not Allowed") {
			t.Errorf("the TRACE after it was not refused:\n%s", r.stdout)
		}
	})
	t.Run("an upstream that reflects the values hands the agent nothing but masks", func(t *testing.T) {
		// The agent makes both bound hosts echo what the proxy put in,
		// asks for the answers gzipped (which would hide the values from
		// a search), and decodes the Basic auth's base64 it gets back.
		r := agent(`curl -sS --compressed -D - -H "Authorization: Bearer $MY_API_TOKEN" -H "X-Api-Key: $MY_API_TOKEN" https://api.cred.test:` + p + `/echo
echo
out=$(curl -sS --compressed -D - -u "agent:$REG_PASSWORD" https://git.cred.test:` + p + `/echo)
echo "$out"
echo decoded:
printf '%s\n' "$out" | grep -o 'Basic [A-Za-z0-9+/=*]*' | cut -c7- | while read -r b; do printf '%s' "$b" | base64 -d 2>/dev/null; echo; done`)
		if r.code != 0 {
			t.Fatalf("%s", r)
		}
		for _, v := range []string{token, password} {
			if strings.Contains(r.stdout, v) {
				t.Errorf("the agent got a real value back:\n%s", r.stdout)
			}
		}
		if masks := strings.Count(r.stdout, strings.Repeat("*", len(token))); masks < 3 {
			t.Errorf("the echoes are not there, masked (%d masks):\n%s", masks, r.stdout)
		}
		up.mu.Lock()
		encodings := slices.Clone(up.echoEncodings)
		up.mu.Unlock()
		if len(encodings) != 2 || encodings[0] != "identity" || encodings[1] != "identity" {
			t.Errorf("the echo server was asked for Accept-Encoding %q; want identity, for the answers to be searched", encodings)
		}
		// A host that compresses its echo although it was asked not to:
		// the proxy cannot search it, and refuses it.
		r = agent(`curl -sS --compressed -D - -H "X-Api-Key: $MY_API_TOKEN" https://api.cred.test:` + p + `/echo-gzip`)
		if strings.Contains(r.stdout, token) || !strings.Contains(r.stdout, "502") || !strings.Contains(r.stdout, "was refused") {
			t.Errorf("a compressed echo of a bound host:\n%s", r)
		}
		audit := mustDevaipod(t, nil, "audit", name)
		if !strings.Contains(audit.stdout, "answer masked: MY_API_TOKEN") || !strings.Contains(audit.stdout, "answer masked: REG_PASSWORD") ||
			!strings.Contains(audit.stdout, "encoded-answer") {
			t.Errorf("devaipod audit does not say what was masked, or refused:\n%s", audit.stdout)
		}
		// up's own checks asked for these: labelled, not taken for the agent's.
		if !regexp.MustCompile(`egress-check\.devaipod\.invalid:80 +devaipod's containment check \(up, verify\): `).MatchString(audit.stdout) {
			t.Errorf("devaipod audit does not label up's checks:\n%s", audit.stdout)
		}
	})
	t.Run("server-sent events stream through the interception", func(t *testing.T) {
		// The upstream sends one event, waits 1.5 s, sends another: the
		// first must reach the agent well before the second.
		r := agent(`curl -sSN https://api.cred.test:` + p + `/sse | while read -r line; do [ -n "$line" ] && echo "$(date +%s%3N) $line"; done; true`)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if r.code != 0 || len(lines) != 2 {
			t.Fatalf("%s", r)
		}
		var t1, t2 int64
		fmt.Sscan(lines[0], &t1)
		fmt.Sscan(lines[1], &t2)
		if gap := time.Duration(t2-t1) * time.Millisecond; gap < time.Second {
			t.Errorf("the events arrived %s apart; the first was held back:\n%s", gap, r.stdout)
		}
	})
	t.Run("the values are nowhere the agent, podman inspect, the audit or verify can show", func(t *testing.T) {
		r := agent("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; echo files:; grep -rsl -e " + token + " -e " + password + " /home /workspaces /tmp /run /etc /opt /var 2>/dev/null; echo done")
		for _, v := range []string{token, password} {
			if strings.Contains(r.stdout, v) {
				t.Errorf("the agent can read a real value:\n%s", r.stdout)
			}
		}
		if !strings.HasSuffix(r.stdout, "files:\ndone\n") {
			t.Errorf("files in the agent hold a real value (listed before done), or the probe did not run:\n%s", r.stdout)
		}
		for _, role := range []string{"workspace", "agent", "proxy"} {
			out, err := exec.Command("podman", "inspect", "devaipod-"+name+"-"+role).CombinedOutput()
			if err != nil {
				t.Errorf("podman inspect %s: %v %s", role, err, out)
			}
			if strings.Contains(string(out), token) || strings.Contains(string(out), password) {
				t.Errorf("podman inspect of the %s shows a real value", role)
			}
		}
		audit := mustDevaipod(t, nil, "audit", name, "-o", "json")
		v := devaipod(t, nil, "verify", name, "-o", "json")
		for what, out := range map[string]string{"audit": audit.stdout, "verify": v.stdout + v.stderr, "up": upOut.stdout + upOut.stderr} {
			if strings.Contains(out, token) || strings.Contains(out, password) {
				t.Errorf("%s shows a real value:\n%s", what, out)
			}
		}
		injected := 0
		for _, line := range strings.Split(strings.TrimSpace(audit.stdout), "\n") {
			var rec proxy.Record
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Host == "api.cred.test" && strings.Join(rec.Credentials, ",") == "MY_API_TOKEN" {
				injected++
			}
		}
		if injected == 0 {
			t.Errorf("no audit record says MY_API_TOKEN was put in:\n%s", audit.stdout)
		}
		rows := verifyRows(t, v.stdout)
		for _, id := range []string{"credential-placeholders", "trusted-env", "trusted-env-files"} {
			if rows[id] != "PASS" {
				t.Errorf("verify %s: %s\n%s", id, rows[id], v.stdout)
			}
		}
	})
	t.Run("verify finds a real value planted where the agent can read it", func(t *testing.T) {
		// As if it had leaked: the proxy's value, in a file of the agent's.
		// Its name carries a terminal-title escape: the report, made in
		// the agent's container, shows it escaped.
		agent("printf %s " + token + " > \"/tmp/leaked$(printf '\\033]0;pwned\\007')\"")
		v := devaipod(t, nil, "verify", name, "-o", "json")
		if rows := verifyRows(t, v.stdout); v.code == 0 || rows["trusted-env-files"] != "FAIL" {
			t.Errorf("verify with the value in /tmp/leaked: exit %d, trusted-env-files %s\n%s", v.code, rows["trusted-env-files"], v.stdout)
		}
		text := devaipod(t, nil, "verify", name)
		if !strings.Contains(text.stdout, `leaked\x1b]0;pwned\x07`) || strings.ContainsRune(text.stdout+v.stdout, 0x1b) {
			t.Errorf("verify showed the planted file's name raw, or not at all:\n%q", text.stdout)
		}
		if strings.Contains(v.stdout+v.stderr+text.stdout, token) {
			t.Errorf("verify shows the value it found:\n%s", v.stdout)
		}
	})
}

// verifyRows maps verify -o json's row ids to their results.
func verifyRows(t *testing.T, out string) map[string]string {
	t.Helper()
	var rep struct {
		Rows []struct{ ID, Result string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("verify -o json: %v\n%s", err, out)
	}
	rows := map[string]string{}
	for _, r := range rep.Rows {
		rows[r.ID] = r.Result
	}
	return rows
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// smuggleScript (node, in the agent) opens an intercepted connection to
// its first argument through the pod's proxy for each further argument
// (base64), writes those bytes as they are, and prints what came back in
// 3 s, each connection's answers followed by a line "=====".
const smuggleScript = `const net = require('net'), tls = require('tls'), fs = require('fs');
const proxy = new URL(process.env.HTTPS_PROXY);
const [target, ...payloads] = process.argv.slice(2);
const ca = fs.readFileSync(process.env.NODE_EXTRA_CA_CERTS);
function send(payload) {
  return new Promise(resolve => {
    let out = '', head = '';
    const done = () => resolve(out);
    const c = net.connect(+proxy.port, proxy.hostname, () => c.write('CONNECT ' + target + ' HTTP/1.1\r\nHost: ' + target + '\r\n\r\n'));
    c.on('error', e => { out += 'ERR ' + e.message; done(); });
    c.on('data', function onHead(d) {
      head += d;
      if (!head.includes('\r\n\r\n')) return;
      c.removeListener('data', onHead);
      const s = tls.connect({ socket: c, servername: target.split(':')[0], ca }, () => s.write(Buffer.from(payload, 'base64')));
      s.on('data', d => { out += d; });
      s.on('error', e => { out += 'ERR ' + e.message; done(); });
      s.on('close', done);
      setTimeout(() => { s.destroy(); done(); }, 3000);
    });
  });
}
Promise.all(payloads.map(send)).then(outs => { for (const o of outs) process.stdout.write(o + '\n=====\n'); });
`

package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/devaipod/devaipod/proxy/rule"
)

// CAPath is where the proxy serves its certificate authority's certificate
// (see Server.CACertPEM) to its clients: a plain GET of this path, not a
// proxy request (curl http://127.0.0.1:3128/devaipod/ca.pem).
const CAPath = "/devaipod/ca.pem"

// maxLeaves bounds the leaf certificates an authority keeps.
const maxLeaves = 256

// authority is the certificate authority that signs the certificates of
// intercepted hosts. New makes a fresh one in memory for each proxy; its key
// is never written, logged or handed out. Its name constraints permit only
// the credentials' hosts, so that a client that trusts it trusts it for
// nothing else, even if the key leaked.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte

	mu     sync.Mutex
	leaves map[rule.Host]*leafCert
}

// leafCert is a host's certificate and the TLS configuration that serves
// it, both made once: the same configuration for every connection to the
// host, so that a session ticket from one connection resumes on the next
// (each configuration has its own ticket keys).
type leafCert struct {
	cert *tls.Certificate
	cfg  *tls.Config
}

// newAuthority makes the authority of the pod's proxy, constrained to the
// hosts of rules.
func newAuthority(pod string, rules []rule.Rule) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	name := "devaipod proxy CA"
	if pod != "" {
		// X.509 allows 64 characters in a common name.
		name = "devaipod " + shorten(pod, 40) + " proxy CA"
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(1, 0, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	constrain(tmpl, rules)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &authority{
		cert:   cert,
		key:    key,
		pem:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		leaves: make(map[rule.Host]*leafCert),
	}, nil
}

// constrain sets critical name constraints on the CA template tmpl that
// permit the hosts of rules only: a name rule permits that name (and, as
// X.509 has it, the names below it, which the proxy never signs), a
// wildcard the names below its suffix, an address rule that address. A
// name type that no rule names is shut: DNS names to the reserved "invalid"
// (RFC 6761), under which no host is; IP addresses by excluding them all.
// Go, OpenSSL (and so Node and curl) read the constraints alike.
func constrain(tmpl *x509.Certificate, rules []rule.Rule) {
	tmpl.PermittedDNSDomainsCritical = true
	for _, r := range rules {
		switch {
		case r.IsAddr():
			bits := r.Addr.BitLen()
			tmpl.PermittedIPRanges = append(tmpl.PermittedIPRanges,
				&net.IPNet{IP: r.Addr.AsSlice(), Mask: net.CIDRMask(bits, bits)})
		case r.Wildcard:
			tmpl.PermittedDNSDomains = append(tmpl.PermittedDNSDomains, "."+r.Name)
		default:
			tmpl.PermittedDNSDomains = append(tmpl.PermittedDNSDomains, r.Name)
		}
	}
	slices.Sort(tmpl.PermittedDNSDomains)
	tmpl.PermittedDNSDomains = slices.Compact(tmpl.PermittedDNSDomains)
	if len(tmpl.PermittedDNSDomains) == 0 {
		tmpl.PermittedDNSDomains = []string{"invalid"}
	}
	if len(tmpl.PermittedIPRanges) == 0 {
		tmpl.ExcludedIPRanges = []*net.IPNet{
			{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
			{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
		}
	}
}

// leaf returns the certificate for host h, made on first use.
func (a *authority) leaf(h rule.Host) (*tls.Certificate, error) {
	l, err := a.leafFor(h)
	if err != nil {
		return nil, err
	}
	return l.cert, nil
}

// serverConfig returns the TLS configuration that serves host h's
// certificate to the agent: HTTP/1.1 only.
func (a *authority) serverConfig(h rule.Host) (*tls.Config, error) {
	l, err := a.leafFor(h)
	if err != nil {
		return nil, err
	}
	return l.cfg, nil
}

func (a *authority) leafFor(h rule.Host) (*leafCert, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if l, ok := a.leaves[h]; ok {
		return l, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	// No subject, only the name or address as the subject alternative name
	// (marked critical, as RFC 5280 wants then): OpenSSL checks a common
	// name that looks like a host name against the DNS constraints, which
	// an address's would fail.
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     a.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if h.Addr.IsValid() {
		tmpl.IPAddresses = []net.IP{h.Addr.AsSlice()}
	} else {
		tmpl.DNSNames = []string{h.Name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if len(a.leaves) >= maxLeaves {
		for k := range a.leaves {
			delete(a.leaves, k) // any one
			break
		}
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	l := &leafCert{cert: c, cfg: &tls.Config{
		Certificates: []tls.Certificate{*c},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	}}
	a.leaves[h] = l
	return l, nil
}

// newSerial returns a random 128-bit serial number.
func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}

// CACertPEM returns the PEM of the certificate authority that signs the
// certificates of intercepted hosts, for the agent to trust; nil when no
// credential is bound (nothing is intercepted). The proxy also serves it at
// CAPath.
func (s *Server) CACertPEM() []byte {
	if s.ca == nil {
		return nil
	}
	return slices.Clone(s.ca.pem)
}

// serveCA answers a GET of CAPath: the authority's certificate, or 404 when
// there is none.
func (s *Server) serveCA(w http.ResponseWriter, r *http.Request, x *exchange) {
	if s.ca == nil {
		x.refuse(http.StatusNotFound, ReasonBadRequest, "no credential is bound, so the proxy has no certificate authority")
		s.writeRefusal(w, r, x)
		return
	}
	// Not egress: the agent's init asks for it at every start, and the
	// audit is for what leaves.
	x.allow, x.unaudited = true, true
	h := w.Header()
	h.Set("Content-Type", "application/x-pem-file")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(s.ca.pem)))
	w.WriteHeader(http.StatusOK)
	w.Write(s.ca.pem)
}

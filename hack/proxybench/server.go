package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// smallSize is the body of a short request (/small).
const smallSize = 2048

// maxBytes caps /bytes?n=.
const maxBytes = 8 << 30

// serverInfo is DIR/server.json.
type serverInfo struct {
	PID      int    `json:"pid"`
	TLSPort  int    `json:"tls_port"`
	HTTPPort int    `json:"http_port"`
	CAFile   string `json:"ca_file"`
	// The credential of the interception benchmark (see intercept.go): its
	// name, the placeholder the client sends, and the directory with a
	// file of that name holding the value, which /auth/ wants (the
	// devaipod-helper proxy's --credential-dir).
	CredName        string `json:"credential_name"`
	CredPlaceholder string `json:"credential_placeholder"`
	CredDir         string `json:"credential_dir,omitempty"`
}

// credName is the name of the benchmark's credential.
const credName = "BENCH_TOKEN"

// credentialPair makes a random value and placeholder for the benchmark's
// credential: the placeholder as devaipod makes them (devaipod-NAME-salt),
// the value as an API key looks.
func credentialPair() (value, placeholder string, err error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	value = fmt.Sprintf("sk-bench-%x", b[:16])
	placeholder = fmt.Sprintf("devaipod-%s-%x", credName, b[16:])
	return value, placeholder, nil
}

// authHandler serves h under /auth/ to requests whose Authorization is
// "Bearer VALUE" only, and answers any other with 401 and why: the
// benchmark counts that as a failed request, so a proxy that did not put
// the value in fails it.
func authHandler(value, placeholder string, h http.Handler) http.Handler {
	want := "Bearer " + value
	inner := http.StripPrefix("/auth", h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch got := r.Header.Get("Authorization"); {
		case got == want:
			inner.ServeHTTP(w, r)
		case strings.Contains(got, placeholder):
			http.Error(w, "Authorization carries the placeholder, not the value: nothing put it in", http.StatusUnauthorized)
		case got == "":
			http.Error(w, "no Authorization", http.StatusUnauthorized)
		default:
			http.Error(w, "Authorization is neither the value nor the placeholder", http.StatusUnauthorized)
		}
	})
}

// testCA makes a CA and a server certificate for localhost and 127.0.0.1,
// both ECDSA P-256 (the cheapest common handshake, so that the proxies'
// share of the work shows).
func testCA() (caPEM []byte, cert tls.Certificate, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, cert, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "proxybench test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(48 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, cert, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, cert, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, cert, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(48 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, cert, err
	}
	cert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: nil}
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return caPEM, cert, nil
}

// testHandler serves /small (smallSize bytes) and /bytes?n=N (N generated
// bytes, streamed); startTestServer serves it again under /auth/ to
// requests with the benchmark's credential.
func testHandler() http.Handler {
	chunk := make([]byte, 256<<10)
	r := mrand.New(mrand.NewChaCha8([32]byte{'p', 'r', 'o', 'x', 'y'}))
	for i := range chunk {
		chunk[i] = byte(r.Uint32())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/small", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(smallSize))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(chunk[:smallSize])
	})
	mux.HandleFunc("/bytes", func(w http.ResponseWriter, req *http.Request) {
		n, err := strconv.ParseInt(req.URL.Query().Get("n"), 10, 64)
		if err != nil || n < 0 || n > maxBytes {
			http.Error(w, "want /bytes?n=N", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		w.Header().Set("Content-Type", "application/octet-stream")
		for n > 0 {
			k := min(n, int64(len(chunk)))
			if _, err := w.Write(chunk[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	return mux
}

// testServer is the HTTPS and plain-HTTP server on 127.0.0.1.
type testServer struct {
	info      serverInfo
	caPEM     []byte
	credValue string
	srv       []*http.Server
}

func startTestServer(dir string) (*testServer, error) {
	caPEM, cert, err := testCA()
	if err != nil {
		return nil, err
	}
	ts := &testServer{caPEM: caPEM}
	ts.info.PID = os.Getpid()
	ts.credValue, ts.info.CredPlaceholder, err = credentialPair()
	if err != nil {
		return nil, err
	}
	ts.info.CredName = credName
	if dir != "" {
		ts.info.CAFile = filepath.Join(dir, "ca.pem")
		if err := os.WriteFile(ts.info.CAFile, caPEM, 0o644); err != nil {
			return nil, err
		}
		ts.info.CredDir = filepath.Join(dir, "credentials")
		if err := os.MkdirAll(ts.info.CredDir, 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(ts.info.CredDir, credName), []byte(ts.credValue+"\n"), 0o600); err != nil {
			return nil, err
		}
	}
	plain := testHandler()
	mux := http.NewServeMux()
	mux.Handle("/", plain)
	mux.Handle("/auth/", authHandler(ts.credValue, ts.info.CredPlaceholder, plain))
	h := mux
	newServer := func() *http.Server {
		return &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       30 * time.Second,
			// HTTP/1.1 only: the client speaks HTTP/1.1 in the tunnel.
			TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
			ErrorLog:     nil,
		}
	}
	tlsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tlsLn.Close()
		return nil, err
	}
	ts.info.TLSPort = tlsLn.Addr().(*net.TCPAddr).Port
	ts.info.HTTPPort = httpLn.Addr().(*net.TCPAddr).Port
	s1, s2 := newServer(), newServer()
	s1.ErrorLog = quietLog()
	s2.ErrorLog = quietLog()
	tlsConf := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	go s1.Serve(tls.NewListener(tlsLn, tlsConf))
	go s2.Serve(httpLn)
	ts.srv = []*http.Server{s1, s2}
	return ts, nil
}

func (ts *testServer) Close() {
	for _, s := range ts.srv {
		s.Close()
	}
}

func cmdServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	dir := fs.String("dir", "", "write server.json and ca.pem to `DIR` (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("missing --dir")
	}
	ts, err := startTestServer(*dir)
	if err != nil {
		return err
	}
	defer ts.Close()
	if err := writeJSON(filepath.Join(*dir, "server.json"), ts.info); err != nil {
		return err
	}
	logf("test server: https on 127.0.0.1:%d, http on 127.0.0.1:%d", ts.info.TLSPort, ts.info.HTTPPort)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Bounded: the script stops it; this is the backstop.
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Hour):
	}
	return nil
}

// loadServer reads DIR/server.json and the CA.
func loadServer(dir string) (serverInfo, *x509.CertPool, error) {
	var info serverInfo
	if err := readJSON(filepath.Join(dir, "server.json"), &info); err != nil {
		return info, nil, err
	}
	caPEM, err := os.ReadFile(info.CAFile)
	if err != nil {
		return info, nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return info, nil, fmt.Errorf("no certificate in %s", info.CAFile)
	}
	return info, pool, nil
}

// quietLog drops the servers' own messages (clients going away mid-way is
// part of the soak).
func quietLog() *log.Logger { return log.New(io.Discard, "", 0) }

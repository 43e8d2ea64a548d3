package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func testCertPEM(t *testing.T, isCA bool) []byte {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: isCA, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestFetchProxyCA(t *testing.T) {
	ca := testCertPEM(t, true)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 { // the proxy is not up yet
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		w.Write(ca)
	}))
	defer srv.Close()
	dir := filepath.Join(t.TempDir(), "ca")
	if err := fetchProxyCA(context.Background(), srv.URL+"/devaipod/ca.pem", dir, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	bundle, _ := os.ReadFile(filepath.Join(dir, "bundle.pem"))
	if string(got) != string(ca) || !strings.HasSuffix(string(bundle), string(ca)) {
		t.Errorf("ca.pem %q, bundle ends %q", got, bundle[max(0, len(bundle)-80):])
	}
	if sys := systemBundle(); sys != nil && !strings.HasPrefix(string(bundle), string(sys)) {
		t.Error("the bundle does not start with the image's roots")
	}
}

func TestFetchProxyCARefusesWhatIsNotACA(t *testing.T) {
	leaf := testCertPEM(t, false)
	for name, body := range map[string][]byte{"a leaf": leaf, "not PEM": []byte("hello")} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
		dir := t.TempDir()
		if err := fetchProxyCA(context.Background(), srv.URL, dir, 300*time.Millisecond); err == nil {
			t.Errorf("%s was taken as the CA", name)
		}
		if _, err := os.Stat(filepath.Join(dir, "ca.pem")); err == nil {
			t.Errorf("%s: ca.pem written", name)
		}
		srv.Close()
	}
}

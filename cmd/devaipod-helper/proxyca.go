package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// proxyCATimeout bounds how long init waits for the proxy to hand out its
// CA: the proxy starts with the pod, usually within a second.
const proxyCATimeout = 30 * time.Second

// systemRoots are where images keep their CA bundle (Debian and Alpine,
// Fedora and RHEL, openSUSE, macOS-style).
var systemRoots = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// fetchProxyCA gets the proxy's CA certificate from url (the proxy makes it
// at start and keeps its key) and writes dir/ca.pem and dir/bundle.pem: the
// image's roots followed by the CA, for the clients whose variable replaces
// the roots rather than adding to them (SSL_CERT_FILE and the like).
func fetchProxyCA(ctx context.Context, url, dir string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var ca []byte
	var last error
	for {
		ca, last = getCA(ctx, url)
		if last == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", url, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	bundle := systemBundle()
	if len(bundle) > 0 && !bytes.HasSuffix(bundle, []byte("\n")) {
		bundle = append(bundle, '\n')
	}
	bundle = append(bundle, ca...)
	if err := writeFileAtomic(filepath.Join(dir, "ca.pem"), ca); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, "bundle.pem"), bundle)
}

// getCA fetches and checks one CA certificate in PEM.
func getCA(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	// No proxy: url is the proxy itself.
	client := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 5 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s", resp.Status)
	}
	block, _ := pem.Decode(body)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("the answer is not a PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, errors.New("the certificate is not a CA's")
	}
	return pem.EncodeToMemory(block), nil
}

// systemBundle is the image's CA bundle, nil when it has none.
func systemBundle() []byte {
	for _, f := range systemRoots {
		if b, err := os.ReadFile(f); err == nil && len(b) > 0 {
			return b
		}
	}
	return nil
}

func writeFileAtomic(name string, data []byte) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

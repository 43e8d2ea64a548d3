package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/devaipod/devaipod/proxy"
	"github.com/devaipod/devaipod/proxy/rule"

	// The proxy's image is FROM scratch: these are the roots it verifies
	// the hosts it puts credentials in against.
	_ "golang.org/x/crypto/x509roots/fallback"
)

// credentialArg is a --credential: NAME=PLACEHOLDER@HOST[,HOST...].
type credentialArg struct {
	name, placeholder string
	hosts             []string
}

var credentialName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func parseCredentialArg(s string) (credentialArg, error) {
	name, rest, ok1 := strings.Cut(s, "=")
	placeholder, hosts, ok2 := strings.Cut(rest, "@")
	if !ok1 || !ok2 || !credentialName.MatchString(name) || placeholder == "" || hosts == "" {
		return credentialArg{}, errors.New("want NAME=PLACEHOLDER@HOST[,HOST...]")
	}
	c := credentialArg{name: name, placeholder: placeholder, hosts: strings.Split(hosts, ",")}
	for _, h := range c.hosts {
		if _, err := rule.Parse(h); err != nil {
			return credentialArg{}, err
		}
	}
	return c, nil
}

// readCredentials reads each credential's value from dir/NAME.
func readCredentials(args []string, dir string) ([]proxy.Credential, error) {
	var creds []proxy.Credential
	for _, a := range args {
		c, err := parseCredentialArg(a)
		if err != nil {
			return nil, fmt.Errorf("--credential: %w", err)
		}
		value, err := os.ReadFile(filepath.Join(dir, c.name))
		if err != nil {
			return nil, fmt.Errorf("credential %s: %w", c.name, err)
		}
		creds = append(creds, proxy.Credential{Name: c.name, Placeholder: c.placeholder,
			Value: strings.TrimRight(string(value), "\r\n"), Hosts: c.hosts})
	}
	return creds, nil
}

// upstreamRoots are the system's roots plus those in file; nil (the
// system's) without a file.
func upstreamRoots(file string) (*x509.CertPool, error) {
	if file == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--upstream-ca: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--upstream-ca %s: no PEM certificate in it", file)
	}
	return pool, nil
}

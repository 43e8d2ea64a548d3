package podman

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/distribution/reference"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// An untrusted repository's images are pulled with no registry login at
// all. Podman cannot be asked for that: before podman 4.4 (its
// containers/image 5.24), an auth file given with the request is read
// first and the user's own logins after it, whatever the client sends. So
// devaipod fetches the image itself, with go-containerregistry's remote
// package and its anonymous authenticator (a maintained registry client
// that reads no credential store unless asked to), and loads it into
// podman's storage under its name.

// pullAnonymous fetches ref from its registry without credentials and
// loads it into podman's storage as ref. A registry on a loopback, private
// or link-local address is refused unless it is one of private (by
// HOST[:PORT] as ref names it): without logins, it would still get what
// this host's network position gives.
func (p *Podman) pullAnonymous(ctx context.Context, ref string, private []string, out io.Writer) error {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return fmt.Errorf("%q: %w", ref, err)
	}
	if _, digested := named.(reference.Digested); digested {
		return fmt.Errorf("%s is named by digest: an untrusted repository's image is pulled without your registry logins, which devaipod does by tag only; pull it yourself (podman pull), or trust the repository", ref)
	}
	tagged := reference.TagNameOnly(named).(reference.NamedTagged)
	tag, err := name.NewTag(tagged.String())
	if err != nil {
		return fmt.Errorf("%q: %w", ref, err)
	}
	domain := reference.Domain(named)
	transport, err := registryTransport(ctx, domain, slices.Contains(private, domain))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "fetching %s without registry logins (the repository is not trusted)\n", tagged)
	img, err := remote.Image(tag, remote.WithContext(ctx), remote.WithAuth(authn.Anonymous), remote.WithTransport(transport),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}))
	if err != nil {
		return err
	}
	// ONBUILD triggers would run in a build FROM it: steps devaipod does
	// not read, which may take other images.
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	if len(cf.Config.OnBuild) > 0 {
		return fmt.Errorf("%s has ONBUILD triggers, which an untrusted repository's build may not run: trust the repository, or build the image yourself", tagged)
	}
	// The image here, if it is the same (its id is its config's digest),
	// is what the registry gives anyone: the layers are not fetched.
	config, err := img.ConfigName()
	if err != nil {
		return err
	}
	if here, err := images.GetImage(p.withConn(ctx), tagged.String(), nil); err == nil && strings.TrimPrefix(here.ID, "sha256:") == config.Hex {
		fmt.Fprintf(out, "%s on this host is what its registry gives anyone\n", tagged)
		return nil
	}
	// The image as a docker-archive, streamed into podman's load.
	r, w := io.Pipe()
	go func() { w.CloseWithError(tarball.Write(tag, img, w)) }()
	report, err := images.Load(p.withConn(ctx), r)
	r.CloseWithError(err) // ends the writer when the load failed
	if err != nil {
		return fmt.Errorf("load it into podman: %w", mapErr(err))
	}
	if len(report.Names) == 0 {
		return errors.New("load it into podman: podman named no image")
	}
	// The archive names Docker Hub's images index.docker.io/...: podman's
	// docker.io/... is what up looks for.
	if err := images.Tag(p.withConn(ctx), report.Names[0], tagged.Tag(), tagged.Name(), nil); err != nil {
		return fmt.Errorf("tag %s: %w", tagged, mapErr(err))
	}
	fmt.Fprintf(out, "loaded %s\n", tagged)
	return nil
}

// registryTransport is an HTTPS transport that trusts, for a registry host,
// the certificate authorities podman trusts for it: the system's and those
// of its certs.d folders (a registry's TLS settings, no credentials). It
// dials public addresses only, unless private.
func registryTransport(ctx context.Context, host string, private bool) (http.RoundTripper, error) {
	t := remote.DefaultTransport.(*http.Transport).Clone()
	refuse := func(ip netip.Addr) error {
		if ip = ip.Unmap(); ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || ip.IsMulticast() {
			return fmt.Errorf("the registry %s is at %s, a loopback or private address, from which an untrusted repository's images come only when [workspace] private_registries names it", host, ip)
		}
		return nil
	}
	switch proxy, err := t.Proxy(&http.Request{URL: &url.URL{Scheme: "https", Host: host}}); {
	case private:
	case err == nil && proxy != nil:
		// The proxy resolves the name: it is resolved here first.
		name := host
		if h, _, err := net.SplitHostPort(host); err == nil {
			name = h
		}
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", name)
		if err != nil {
			return nil, err
		}
		for _, ip := range ips {
			if err := refuse(ip); err != nil {
				return nil, err
			}
		}
	default:
		dialer := &net.Dialer{Timeout: 30 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return err
			}
			return refuse(ap.Addr())
		}}
		t.DialContext = dialer.DialContext
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	home, _ := os.UserHomeDir()
	dirs := []string{filepath.Join(home, ".config", "containers", "certs.d", host), filepath.Join("/etc/containers/certs.d", host), filepath.Join("/etc/docker/certs.d", host)}
	for _, dir := range dirs {
		certs, _ := filepath.Glob(filepath.Join(dir, "*.crt"))
		for _, c := range certs {
			pem, err := os.ReadFile(c)
			if err != nil {
				return nil, fmt.Errorf("the registry's certificates: %w", err)
			}
			pool.AppendCertsFromPEM(pem)
		}
	}
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return t, nil
}

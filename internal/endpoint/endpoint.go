// Package endpoint parses and opens the "unix:PATH" and "tcp:HOST:PORT"
// endpoints that devaipod's in-container binaries listen on and dial. It
// exists so that devaipod-helper (socket bridges, the egress proxy) and
// devaipod-gator accept the same forms with the same checks and create
// their sockets the same way, without either binary linking the other's
// dependencies.
package endpoint

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MaxUnixPath is the longest unix socket path the kernel accepts: sun_path
// is 108 bytes including the terminating NUL.
const MaxUnixPath = 107

// Endpoint is a place to listen on or dial: a unix socket or a TCP address.
type Endpoint struct {
	Network string // "tcp" or "unix"
	Address string // host:port or an absolute path
}

// String is the form Parse reads: "unix:PATH" or "tcp:HOST:PORT".
func (e Endpoint) String() string { return e.Network + ":" + e.Address }

// Parse parses "unix:PATH" or "tcp:HOST:PORT", whichever network says.
// Port 0 (any free port) is allowed only on the listening side, where the
// startup log shows the port actually chosen.
func Parse(s, network string, listening bool) (Endpoint, error) {
	addr, ok := strings.CutPrefix(s, network+":")
	if !ok {
		return Endpoint{}, fmt.Errorf("%q does not start with %q", s, network+":")
	}
	switch network {
	case "unix":
		switch {
		case addr == "":
			return Endpoint{}, errors.New("empty socket path")
		case !filepath.IsAbs(addr):
			// A relative path would depend on the working directory of
			// whoever starts the container.
			return Endpoint{}, fmt.Errorf("socket path %q is not absolute", addr)
		case len(addr) > MaxUnixPath:
			return Endpoint{}, fmt.Errorf("socket path %q is %d bytes, the kernel allows %d", addr, len(addr), MaxUnixPath)
		}
	case "tcp":
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return Endpoint{}, fmt.Errorf("tcp %w", err)
		}
		if host == "" {
			// An empty host listens on every interface; make that a choice
			// (0.0.0.0) rather than an accident.
			return Endpoint{}, fmt.Errorf("missing host in %q", addr)
		}
		n, err := strconv.Atoi(port)
		lowest := 1
		if listening {
			lowest = 0
		}
		if err != nil || n < lowest || n > 65535 {
			return Endpoint{}, fmt.Errorf("bad port %q in %q", port, addr)
		}
	default:
		return Endpoint{}, fmt.Errorf("unknown network %q, want unix or tcp", network)
	}
	return Endpoint{Network: network, Address: addr}, nil
}

// ListenFlag returns a flag.Value that parses a listening endpoint,
// unix:PATH or tcp:HOST:PORT, into e: the --listen flag of the helper's
// proxy and of the gator.
func ListenFlag(e *Endpoint) flag.Value { return listenFlag{e} }

type listenFlag struct{ e *Endpoint }

func (f listenFlag) String() string {
	// The flag package calls String on a zero listenFlag to find out
	// whether a default is worth printing.
	if f.e == nil || f.e.Network == "" {
		return ""
	}
	return f.e.String()
}

func (f listenFlag) Set(s string) error {
	network, _, _ := strings.Cut(s, ":")
	if network != "unix" && network != "tcp" {
		return errors.New("want unix:PATH or tcp:HOST:PORT")
	}
	e, err := Parse(s, network, true)
	if err != nil {
		return err
	}
	*f.e = e
	return nil
}

// Listen opens a listener on e: a unix socket with ListenUnix, a TCP one
// with lc (whose zero value is net.Listen's behaviour).
func (e Endpoint) Listen(ctx context.Context, lc net.ListenConfig) (net.Listener, error) {
	if e.Network == "unix" {
		return ListenUnix(e.Address)
	}
	return lc.Listen(ctx, e.Network, e.Address)
}

// ListenUnix listens on a unix socket at path, replacing a socket left over
// from an earlier run of the container. Go removes the socket file again
// when the listener is closed.
func ListenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode()&fs.ModeSocket == 0:
		// Not ours to delete: refuse rather than clobber a file.
		return nil, fmt.Errorf("%s exists and is not a socket", path)
	case err == nil:
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("stat socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// The clients run as other uids in other containers, and connect(2)
	// needs write permission on the socket file.
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod socket: %w", err)
	}
	return ln, nil
}

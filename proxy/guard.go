package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"
)

// BlockedError is the error of a dial refused because the address is not a
// public unicast address and no address rule names it.
type BlockedError struct {
	// Host is the name being dialled (or the address itself).
	Host string
	// Addr and Port are what would have been dialled.
	Addr netip.Addr
	Port int
	// Class says what kind of address it is: "loopback", "private",
	// "link-local", "cloud-metadata"...
	Class string
}

func (e *BlockedError) Error() string {
	if e.Host == "" || e.Host == e.Addr.String() {
		return fmt.Sprintf("%s is not a public address (%s)", e.Addr, e.Class)
	}
	return fmt.Sprintf("%s resolves to %s, which is not a public address (%s)", e.Host, e.Addr, e.Class)
}

// addrRange is one range the guard refuses.
type addrRange struct {
	prefix netip.Prefix
	class  string
}

// blockedRanges are refused at dial time unless an address rule names the
// exact address. More specific entries come first, since the first match
// names the class. IPv4-mapped IPv6 addresses are unmapped before the check,
// so ::ffff:0:0/96 needs no entry (and net.IPNet would match every IPv4
// address against it; netip does not).
var blockedRanges = func() []addrRange {
	var rs []addrRange
	for _, e := range []struct{ prefix, class string }{
		{"169.254.169.254/32", "cloud-metadata"},
		{"fd00:ec2::254/128", "cloud-metadata"},
		{"0.0.0.0/8", "unspecified"},
		{"10.0.0.0/8", "private"},
		{"100.64.0.0/10", "carrier-grade NAT"},
		{"127.0.0.0/8", "loopback"},
		{"169.254.0.0/16", "link-local"},
		{"172.16.0.0/12", "private"},
		{"192.0.0.0/24", "IETF protocol assignment"},
		{"192.0.2.0/24", "documentation"},
		{"192.88.99.0/24", "6to4 relay"},
		{"192.168.0.0/16", "private"},
		{"198.18.0.0/15", "benchmarking"},
		{"198.51.100.0/24", "documentation"},
		{"203.0.113.0/24", "documentation"},
		{"224.0.0.0/4", "multicast"},
		{"240.0.0.0/4", "reserved"}, // includes 255.255.255.255, broadcast
		{"::/128", "unspecified"},
		{"::1/128", "loopback"},
		{"::/96", "IPv4-compatible"},
		{"::ffff:0:0:0/96", "IPv4-translated"},
		{"64:ff9b:1::/48", "local NAT64"},
		{"100::/64", "discard-only"},
		{"2001::/32", "Teredo"},
		{"2001:db8::/32", "documentation"},
		{"2002::/16", "6to4"},
		{"fc00::/7", "private"},
		{"fe80::/10", "link-local"},
		{"fec0::/10", "site-local"},
		{"ff00::/8", "multicast"},
	} {
		rs = append(rs, addrRange{netip.MustParsePrefix(e.prefix), e.class})
	}
	return rs
}()

// nat64 is the well-known NAT64 prefix (RFC 6052), which carries an IPv4
// address in its last 32 bits.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// AddrClass returns why a is refused by default ("loopback", "private"...),
// or "" for a public unicast address. IPv4-mapped IPv6 addresses, and those
// of the well-known NAT64 prefix 64:ff9b::/96 (what DNS64 answers on an
// IPv6-only host), are judged by the IPv4 address they carry; zones are
// ignored. Other embeddings (6to4, Teredo, local NAT64 prefixes) are refused
// outright.
func AddrClass(a netip.Addr) string {
	if !a.IsValid() {
		return "invalid"
	}
	a = a.Unmap().WithZone("")
	if nat64.Contains(a) {
		b := a.As16()
		if c := AddrClass(netip.AddrFrom4([4]byte(b[12:]))); c != "" {
			return "NAT64-embedded " + c
		}
		return ""
	}
	for _, r := range blockedRanges {
		if r.prefix.Contains(a) {
			return r.class
		}
	}
	return ""
}

// Resolver looks up the addresses of a host name. *net.Resolver implements
// it; tests use a map.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// guard dials TCP connections to public addresses, and to others only when
// exempt says an address rule names them.
type guard struct {
	resolver Resolver
	timeout  time.Duration
	// exempt reports whether an address rule covers addr and port.
	exempt func(addr netip.Addr, port int) bool
	// approved, if not nil, reports whether a person approved the
	// request of ctx (a dial's) to exactly addr and port (see
	// Options.Ask), which exempts them as an address rule would.
	approved func(ctx context.Context, addr netip.Addr, port int) bool
}

// check returns a *BlockedError if addr:port may not be dialled for the
// request of ctx.
func (g *guard) check(ctx context.Context, host string, addr netip.Addr, port int) error {
	addr = addr.Unmap().WithZone("")
	class := AddrClass(addr)
	if class == "" || g.exempt(addr, port) || g.approved != nil && g.approved(ctx, addr, port) {
		return nil
	}
	return &BlockedError{Host: host, Addr: addr, Port: port, Class: class}
}

// control runs after name resolution, right before connect(2), with the
// address actually dialled: the check that DNS rebinding cannot get past.
func (g *guard) control(host string) func(ctx context.Context, network, address string, c syscall.RawConn) error {
	return func(ctx context.Context, network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("refusing to dial unparsable address %q", address)
		}
		return g.check(ctx, host, ap.Addr(), int(ap.Port()))
	}
}

// dialContext resolves addr's host with the guard's resolver, checks each
// address and connects to the first that is allowed and answers. If no
// address is allowed, the error is a *BlockedError.
func (g *guard) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return g.dial(ctx, network, addr, 0)
}

// dialTunnel is dialContext for a CONNECT tunnel's server, without TCP
// keep-alive: the tunnel's idle timeout already closes a tunnel whose
// server went silent, and most tunnels are short, so the four setsockopt
// calls and the kernel timer are spent for nothing.
func (g *guard) dialTunnel(ctx context.Context, addr string) (net.Conn, error) {
	return g.dial(ctx, "tcp", addr, -1)
}

// dial is dialContext with the dialer's KeepAlive (0 the default, negative
// none).
func (g *guard) dial(ctx context.Context, network, addr string, keepAlive time.Duration) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, fmt.Errorf("refusing to dial network %q", network)
	}
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return nil, fmt.Errorf("bad port in %q", addr)
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()

	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		addrs, err = g.resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, err
		}
		if len(addrs) == 0 {
			return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
		}
	}

	d := net.Dialer{ControlContext: g.control(host), KeepAlive: keepAlive}
	var blocked, firstErr error
	for _, a := range addrs {
		if err := g.check(ctx, host, a, port); err != nil {
			blocked = cmpOr(blocked, err)
			continue
		}
		conn, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a.Unmap(), uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		var be *BlockedError
		if errors.As(err, &be) {
			blocked = cmpOr(blocked, error(be))
			continue
		}
		firstErr = cmpOr(firstErr, err)
		if ctx.Err() != nil {
			break
		}
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return nil, blocked
}

// cmpOr returns a if it is not nil, else b.
func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

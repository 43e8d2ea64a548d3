package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestAddrClass(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr string
		want string // "" for public
	}{
		{"5.6.7.8", ""},
		{"93.0.0.1", ""},
		{"2606:4700:4700::1111", ""},
		{"::ffff:5.6.7.8", ""},
		{"64:ff9b::506:708", ""}, // NAT64 of 5.6.7.8

		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:7f00:1", "loopback"},
		{"10.0.0.1", "private"},
		{"10.255.255.255", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"172.15.255.255", ""},
		{"172.32.0.0", ""},
		{"192.168.1.1", "private"},
		{"::ffff:192.168.1.1", "private"},
		{"fc00::1", "private"},
		{"fd12:3456::1", "private"},
		{"169.254.1.1", "link-local"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"169.254.169.254", "cloud-metadata"},
		{"::ffff:169.254.169.254", "cloud-metadata"},
		{"fd00:ec2::254", "cloud-metadata"},
		{"100.64.0.1", "carrier-grade NAT"},
		{"100.127.255.255", "carrier-grade NAT"},
		{"100.128.0.0", ""},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"ff02::1", "multicast"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"::", "unspecified"},
		{"192.0.0.8", "IETF protocol assignment"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "reserved"},
		{"192.0.2.1", "documentation"},
		{"2001:db8::1", "documentation"},
		{"64:ff9b::7f00:1", "NAT64-embedded loopback"},
		{"64:ff9b::a9fe:a9fe", "NAT64-embedded cloud-metadata"},
		{"64:ff9b:1::1", "local NAT64"},
		{"2002:7f00:1::1", "6to4"},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"},
		{"::127.0.0.1", "IPv4-compatible"},
		{"::ffff:0:7f00:1", "IPv4-translated"},
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		if got := AddrClass(a); got != tt.want {
			t.Errorf("AddrClass(%s) = %q; want %q", tt.addr, got, tt.want)
		}
	}
	if got := AddrClass(netip.Addr{}); got != "invalid" {
		t.Errorf("AddrClass(zero) = %q; want invalid", got)
	}
}

// mapResolver resolves names from a map, like /etc/hosts.
type mapResolver map[string][]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if addrs, ok := m[host]; ok {
		return addrs, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestGuardDial(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	loop := netip.MustParseAddr("127.0.0.1")

	res := mapResolver{
		"loop.test":    {loop},
		"mapped.test":  {netip.MustParseAddr("::ffff:127.0.0.1")},
		"private.test": {netip.MustParseAddr("10.1.2.3")},
		// Never dialled (no external traffic): a documentation address,
		// which the guard refuses, after the loopback that answers.
		"mixed.test": {netip.MustParseAddr("10.1.2.3"), loop, netip.MustParseAddr("203.0.113.7")},
	}
	exemptLoop := func(a netip.Addr, p int) bool { return a == loop && p == port }
	noExempt := func(netip.Addr, int) bool { return false }

	tests := []struct {
		name      string
		host      string
		exempt    func(netip.Addr, int) bool
		wantClass string // "" means the dial succeeds
		wantErr   string // for errors that are not a *BlockedError
	}{
		{name: "loopback name refused", host: "loop.test", exempt: noExempt, wantClass: "loopback"},
		{name: "mapped loopback refused", host: "mapped.test", exempt: noExempt, wantClass: "loopback"},
		{name: "loopback literal refused", host: "127.0.0.1", exempt: noExempt, wantClass: "loopback"},
		{name: "loopback name exempt", host: "loop.test", exempt: exemptLoop},
		{name: "loopback literal exempt", host: "127.0.0.1", exempt: exemptLoop},
		{name: "private refused", host: "private.test", exempt: exemptLoop, wantClass: "private"},
		{name: "skips refused addresses", host: "mixed.test", exempt: exemptLoop},
		{name: "unknown name", host: "nowhere.test", exempt: noExempt, wantErr: "no such host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &guard{resolver: res, timeout: 5 * time.Second, exempt: tt.exempt}
			conn, err := g.dialContext(context.Background(), "tcp", net.JoinHostPort(tt.host, strconv.Itoa(port)))
			if conn != nil {
				conn.Close()
			}
			var be *BlockedError
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("dial %s: %v; want an error containing %q", tt.host, err, tt.wantErr)
				}
			case tt.wantClass == "":
				if err != nil {
					t.Errorf("dial %s: %v; want success", tt.host, err)
				}
			case !errors.As(err, &be):
				t.Errorf("dial %s: %v; want a *BlockedError", tt.host, err)
			case be.Class != tt.wantClass:
				t.Errorf("dial %s: class %q; want %q", tt.host, be.Class, tt.wantClass)
			}
		})
	}
}

// TestGuardControl checks the last line of defence, the check on the
// address actually dialled, without going through the resolver.
func TestGuardControl(t *testing.T) {
	t.Parallel()
	g := &guard{exempt: func(a netip.Addr, p int) bool { return a == netip.MustParseAddr("10.0.2.2") && p == 8443 }}
	tests := []struct {
		address string
		ok      bool
	}{
		{"5.6.7.8:443", true},
		{"[2606:4700::1]:443", true},
		{"127.0.0.1:443", false},
		{"[::1]:443", false},
		{"[::ffff:127.0.0.1]:443", false},
		{"[fe80::1%eth0]:443", false},
		{"10.0.2.2:8443", true},
		{"10.0.2.2:443", false},
		{"[::ffff:10.0.2.2]:8443", true},
		{"garbage", false},
	}
	for _, tt := range tests {
		err := g.control("x.test")(context.Background(), "tcp", tt.address, nil)
		if (err == nil) != tt.ok {
			t.Errorf("control(%q) = %v; want ok=%v", tt.address, err, tt.ok)
		}
	}
}

func TestBlockedErrorMessage(t *testing.T) {
	t.Parallel()
	e := &BlockedError{Host: "db.test", Addr: netip.MustParseAddr("10.1.2.3"), Port: 443, Class: "private"}
	if got, want := e.Error(), "db.test resolves to 10.1.2.3, which is not a public address (private)"; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
	e.Host = "10.1.2.3"
	if got, want := e.Error(), "10.1.2.3 is not a public address (private)"; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
}

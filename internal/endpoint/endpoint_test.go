package endpoint

import (
	"context"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in        string
		network   string
		listening bool
		want      string // String() of the result
		wantErr   string // substring; empty means success
	}{
		{in: "unix:/run/devaipod/agent.sock", network: "unix", want: "unix:/run/devaipod/agent.sock"},
		{in: "unix:/run/a=b.sock", network: "unix", want: "unix:/run/a=b.sock"},
		{in: "tcp:127.0.0.1:4096", network: "tcp", want: "tcp:127.0.0.1:4096"},
		{in: "tcp:[::1]:80", network: "tcp", want: "tcp:[::1]:80"},
		{in: "tcp:127.0.0.1:0", network: "tcp", listening: true, want: "tcp:127.0.0.1:0"},
		{in: "tcp:127.0.0.1:0", network: "tcp", wantErr: `bad port "0"`},
		{in: "tcp:127.0.0.1:65536", network: "tcp", listening: true, wantErr: `bad port "65536"`},
		{in: "tcp:127.0.0.1:http", network: "tcp", wantErr: `bad port "http"`},
		{in: "tcp:127.0.0.1", network: "tcp", wantErr: "missing port in address"},
		{in: "tcp::4096", network: "tcp", wantErr: `missing host in ":4096"`},
		{in: "/run/a.sock", network: "unix", wantErr: `"/run/a.sock" does not start with "unix:"`},
		{in: "unix:/run/a.sock", network: "tcp", wantErr: `does not start with "tcp:"`},
		{in: "unix:", network: "unix", wantErr: "empty socket path"},
		{in: "unix:run/a.sock", network: "unix", wantErr: `socket path "run/a.sock" is not absolute`},
		{in: "unix:/" + strings.Repeat("x", 120), network: "unix", wantErr: "is 121 bytes, the kernel allows 107"},
		{in: "udp:1.2.3.4:5", network: "udp", wantErr: `unknown network "udp"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			e, err := Parse(tt.in, tt.network, tt.listening)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%q, %q, %v) error = %v; want it to contain %q", tt.in, tt.network, tt.listening, err, tt.wantErr)
				}
				return
			}
			if err != nil || e.String() != tt.want {
				t.Fatalf("Parse(%q, %q, %v) = %q, %v; want %q", tt.in, tt.network, tt.listening, e, err, tt.want)
			}
		})
	}
}

func TestListenFlag(t *testing.T) {
	tests := []struct {
		arg     string
		want    string
		wantErr string
	}{
		{arg: "unix:/run/g.sock", want: "unix:/run/g.sock"},
		{arg: "tcp:127.0.0.1:0", want: "tcp:127.0.0.1:0"},
		{arg: "udp:1.2.3.4:5", wantErr: `invalid value "udp:1.2.3.4:5" for flag -listen: want unix:PATH or tcp:HOST:PORT`},
		{arg: "/run/g.sock", wantErr: "want unix:PATH or tcp:HOST:PORT"},
		{arg: "unix:g.sock", wantErr: "not absolute"},
		{arg: "tcp::3128", wantErr: "missing host"},
	}
	for _, tt := range tests {
		t.Run(tt.arg, func(t *testing.T) {
			var e Endpoint
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			fs.Var(ListenFlag(&e), "listen", "")
			err := fs.Parse([]string{"--listen", tt.arg})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("--listen %s error = %v; want it to contain %q", tt.arg, err, tt.wantErr)
				}
				return
			}
			if err != nil || e.String() != tt.want || fs.Lookup("listen").Value.String() != tt.want {
				t.Fatalf("--listen %s = %q, %v; want %q", tt.arg, e, err, tt.want)
			}
		})
	}
	// PrintDefaults calls String on a zero value; it must not panic nor
	// invent a default.
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var out strings.Builder
	fs.SetOutput(&out)
	fs.Var(ListenFlag(new(Endpoint)), "listen", "listen on `unix:PATH`")
	fs.PrintDefaults()
	if strings.Contains(out.String(), "default") {
		t.Errorf("PrintDefaults shows a default: %q", out.String())
	}
}

func TestListen(t *testing.T) {
	ctx := context.Background()
	sock := filepath.Join(t.TempDir(), "run", "x.sock")
	ln, err := Endpoint{Network: "unix", Address: sock}.Listen(ctx, net.ListenConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o666 {
		t.Errorf("socket %s: %v, %v; want mode 0666", sock, fi, err)
	}
	ln.Close()

	ln, err = Endpoint{Network: "tcp", Address: "127.0.0.1:0"}.Listen(ctx, net.ListenConfig{KeepAlive: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial the TCP listener: %v", err)
	}
	c.Close()
}

func TestListenUnix(t *testing.T) {
	t.Run("creates the directory", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "a", "b", "x.sock")
		ln, err := ListenUnix(path)
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Errorf("after Close, Lstat(%s) error = %v; want the socket removed", path, err)
		}
	})

	t.Run("replaces a stale socket", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "x.sock")
		// A socket file with nobody listening, as a killed container
		// leaves behind.
		old, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		old.(*net.UnixListener).SetUnlinkOnClose(false)
		old.Close()
		ln, err := ListenUnix(path)
		if err != nil {
			t.Fatalf("ListenUnix over a stale socket: %v", err)
		}
		ln.Close()
	})

	t.Run("refuses to remove a regular file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "x.sock")
		if err := os.WriteFile(path, []byte("keep me"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ListenUnix(path)
		if err == nil || !strings.Contains(err.Error(), "exists and is not a socket") {
			t.Errorf("ListenUnix over a file error = %v; want %q", err, "exists and is not a socket")
		}
		if data, _ := os.ReadFile(path); string(data) != "keep me" {
			t.Errorf("file content = %q; want it untouched", data)
		}
	})

	t.Run("parent is a file", func(t *testing.T) {
		parent := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(parent, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ListenUnix(filepath.Join(parent, "x.sock"))
		if err == nil || !strings.Contains(err.Error(), "create socket directory") {
			t.Errorf("ListenUnix under a file error = %v; want %q", err, "create socket directory")
		}
	})
}

// FuzzParse checks that Parse never panics and that what it accepts
// round-trips through String.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"unix:/run/a.sock", "tcp:127.0.0.1:4096", "tcp:[::1]:0", "tcp::0", "unix:", "tcp:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, network := range []string{"unix", "tcp"} {
			e, err := Parse(s, network, true)
			if err != nil {
				continue
			}
			again, err := Parse(e.String(), network, true)
			if err != nil || again != e {
				t.Fatalf("%q parsed as %s, which does not parse back (%v)", s, e, err)
			}
		}
	})
}

package podman

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeService answers podman's ping on a unix socket, as a podman 5
// service would: enough for Connect.
func fakeService(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "podman.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Libpod-API-Version", "5.0.0")
		w.Header().Set("API-Version", "1.41")
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "unix://" + sock
}

// TestConnectChoosesAsPodman: --connection (a URI or a connection's name),
// then CONTAINER_CONNECTION, then CONTAINER_HOST, as podman orders them;
// connections come from podman-connections.json and containers.conf's
// [engine.service_destinations].
func TestConnectChoosesAsPodman(t *testing.T) {
	dir := t.TempDir()
	byFlag, byName, byConf, byHost := fakeService(t), fakeService(t), fakeService(t), fakeService(t)
	connections := filepath.Join(dir, "podman-connections.json")
	if err := os.WriteFile(connections, []byte(`{"Connection": {"Default": "other", "Connections": {
		"mine": {"URI": "`+byName+`"}, "other": {"URI": "unix:///nonexistent/podman.sock"}}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "containers.conf")
	if err := os.WriteFile(conf, []byte("[engine.service_destinations.fromconf]\nuri = \""+byConf+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PODMAN_CONNECTIONS_CONF", connections)
	t.Setenv("CONTAINERS_CONF", conf)
	t.Setenv("CONTAINER_SSHKEY", "")
	ctx := context.Background()

	for _, tt := range []struct {
		name, flag, connEnv, hostEnv, want string
	}{
		{"flag URI beats the environment", byFlag, "mine", byHost, byFlag},
		{"flag name beats the environment", "fromconf", "mine", byHost, byConf},
		{"CONTAINER_CONNECTION beats CONTAINER_HOST", "", "mine", byHost, byName},
		{"a connection of containers.conf", "", "fromconf", "", byConf},
		{"CONTAINER_HOST", "", "", byHost, byHost},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("CONTAINER_CONNECTION", tt.connEnv)
			t.Setenv("CONTAINER_HOST", tt.hostEnv)
			p, err := Connect(ctx, tt.flag)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if p.URI != tt.want || p.Started {
				t.Errorf("connected to %s (started %v); want %s", p.URI, p.Started, tt.want)
			}
		})
	}

	t.Run("an unknown name lists the known ones", func(t *testing.T) {
		t.Setenv("CONTAINER_HOST", byHost)
		for _, tt := range []struct{ flag, env, setting string }{{"", "nope", "CONTAINER_CONNECTION"}, {"nope", "mine", "--connection"}} {
			t.Setenv("CONTAINER_CONNECTION", tt.env)
			_, err := Connect(ctx, tt.flag)
			var ce *ConnectError
			if !errors.As(err, &ce) {
				t.Fatalf("Connect with connection %q: %v; want a *ConnectError", "nope", err)
			}
			if !strings.Contains(ce.Error(), `no podman connection named "nope" (`+tt.setting+`)`) ||
				!strings.Contains(ce.Hint, "fromconf, mine, other") {
				t.Errorf("error %q, hint %q; want the name, where it came from and the known names", ce.Error(), ce.Hint)
			}
		}
	})

	t.Run("a named connection that does not answer says which", func(t *testing.T) {
		t.Setenv("CONTAINER_CONNECTION", "other")
		_, err := Connect(ctx, "")
		var ce *ConnectError
		if !errors.As(err, &ce) || !strings.Contains(ce.Error(), "unix:///nonexistent/podman.sock (connection other, from CONTAINER_CONNECTION)") {
			t.Errorf("Connect: %v; want an error naming the connection and its URI", err)
		}
	})
}

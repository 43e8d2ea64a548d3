package pod

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/devaipod/devaipod/pod/plan"
)

// auditEngine has a proxy and a gator; each reads its audit from a file
// (exec) or from its container log, as files and logs say.
type auditEngine struct {
	Engine
	objects []Object
	files   map[string]string // container -> the audit-log command's output; absent: exit 3
	logs    map[string]string // container -> container log
	mu      sync.Mutex
	execs   []string
}

func (e *auditEngine) Objects(context.Context, string) ([]Object, error) { return e.objects, nil }
func (e *auditEngine) Exec(_ context.Context, ctr string, s ExecSpec) (int, string, error) {
	e.mu.Lock() // AuditLog reads the sidecars at once
	e.execs = append(e.execs, ctr+" "+strings.Join(s.Cmd, " "))
	e.mu.Unlock()
	out, ok := e.files[ctr]
	if !ok {
		io.WriteString(s.Stderr, "no audit log")
		return exitNoAuditLog, "", nil
	}
	return 0, out, nil
}
func (e *auditEngine) Logs(_ context.Context, ctr string, _ int, _ bool, w io.Writer) error {
	_, err := io.WriteString(w, e.logs[ctr])
	return err
}

func TestAuditLogReadsFilesOfRunningSidecarsAndLogsOtherwise(t *testing.T) {
	proxy, gator := plan.ContainerName("p", plan.RoleProxy), plan.ContainerName("p", plan.RoleGator)
	rec := func(t, who string) string { return `{"time":"` + t + `","who":"` + who + `"}` + "\n" }
	for _, tc := range []struct {
		name          string
		proxyState    string
		files         map[string]string
		want, wantCmd string
	}{
		{"both running with files: the files, merged by time", "running",
			map[string]string{proxy: rec("2026-01-01T00:00:01Z", "proxy-file") + rec("2026-01-01T00:00:03Z", "proxy-file"), gator: rec("2026-01-01T00:00:02Z", "gator-file")},
			rec("2026-01-01T00:00:01Z", "proxy-file") + rec("2026-01-01T00:00:02Z", "gator-file") + rec("2026-01-01T00:00:03Z", "proxy-file"),
			proxy + " /devaipod-helper audit-log /var/lib/devaipod/proxy/audit.log"},
		{"a sidecar without a file: its container log", "running",
			map[string]string{gator: rec("2026-01-01T00:00:02Z", "gator-file")},
			rec("2026-01-01T00:00:01Z", "proxy-log") + rec("2026-01-01T00:00:02Z", "gator-file"), ""},
		{"a stopped sidecar: its container log, no exec", "exited",
			map[string]string{proxy: rec("2026-01-01T00:00:01Z", "proxy-file"), gator: rec("2026-01-01T00:00:02Z", "gator-file")},
			rec("2026-01-01T00:00:01Z", "proxy-log") + rec("2026-01-01T00:00:02Z", "gator-file"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &auditEngine{
				objects: []Object{{Kind: KindContainer, Name: proxy, State: tc.proxyState}, {Kind: KindContainer, Name: gator, State: "running"}},
				files:   tc.files,
				logs:    map[string]string{proxy: rec("2026-01-01T00:00:01Z", "proxy-log"), gator: rec("2026-01-01T00:00:02Z", "gator-log")},
			}
			var out strings.Builder
			if err := AuditLog(context.Background(), e, "p", false, &out); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("got\n%swant\n%s", out.String(), tc.want)
			}
			if tc.wantCmd != "" && !strings.Contains(strings.Join(e.execs, "\n"), tc.wantCmd) {
				t.Errorf("execs %q, want %q", e.execs, tc.wantCmd)
			}
			if tc.proxyState != "running" && strings.Contains(strings.Join(e.execs, "\n"), proxy) {
				t.Errorf("exec in a stopped proxy: %q", e.execs)
			}
		})
	}
	t.Run("a pod without sidecars", func(t *testing.T) {
		err := AuditLog(context.Background(), &auditEngine{}, "p", false, io.Discard)
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%v, want ErrNotFound", err)
		}
	})
}

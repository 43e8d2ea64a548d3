package main

import "testing"

// FuzzParseBridge checks that the bridge parsers never panic and that what
// they accept round-trips through String.
func FuzzParseBridge(f *testing.F) {
	for _, s := range []string{
		"unix:/run/devaipod/agent/agent.sock=tcp:127.0.0.1:4096",
		"tcp:127.0.0.1:4096=unix:/run/a.sock",
		"unix:/a=b=tcp:[::1]:80", "tcp::0=unix:/x", "=", "unix:=tcp:",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, parse := range []func(string) (*bridge, error){parseExpose, parseForward} {
			b, err := parse(s)
			if err != nil {
				continue
			}
			again, err := parse(b.listen.String() + "=" + b.target.String())
			if err != nil || again.String() != b.String() {
				t.Fatalf("%q parsed as %s, which does not parse back (%v)", s, b, err)
			}
		}
	})
}

package podman

import (
	"strings"
	"testing"
)

func TestAgentSeccompProfile(t *testing.T) {
	data, err := AgentSeccompProfile()
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	// unshare and clone are allowed only without namespace flags.
	for _, want := range []string{`"unshare"`, `"clone"`, `"SCMP_CMP_MASKED_EQ"`, `"clone3"`} {
		if !strings.Contains(s, want) {
			t.Errorf("profile lacks %s", want)
		}
	}
	if strings.Count(s, `"unshare"`) != 1 || strings.Count(s, `"clone"`) != 1 {
		t.Errorf("unshare or clone is still allowed unconditionally somewhere")
	}
	// ptrace and process_vm_* appear once: in the rule that refuses them.
	for _, name := range []string{`"ptrace"`, `"process_vm_readv"`, `"process_vm_writev"`} {
		if strings.Count(s, name) != 1 {
			t.Errorf("%s appears %d times; want only in its refusing rule", name, strings.Count(s, name))
		}
	}
}

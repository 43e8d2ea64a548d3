package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/pod/kube"
	"github.com/devaipod/devaipod/pod/plan"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestKubeRender: kube render needs no podman (a dry run's plan); its YAML
// is one document per object, the agent's Pod among them; -o json is a v1
// List of the same objects; -o takes yaml here, and nothing but yaml, json
// (and the default text).
func TestKubeRender(t *testing.T) {
	repo := fixtureRepo(t)
	cfg := filepath.Join(t.TempDir(), "devaipod.toml")
	os.WriteFile(cfg, []byte("[agent]\nkind = \"custom\"\ncommand = [\"sleep\", \"infinity\"]\n"), 0o644)
	base := []string{"--config", cfg, "kube", "render", repo, "--name", "kr-test", "--namespace", "agents"}

	code, out, errOut := cliNoPodman(t, append(base, "-o", "yaml")...)
	if code != 0 {
		t.Fatalf("kube render: exit %d\n%s", code, errOut)
	}
	kinds := map[string]int{}
	var agent *corev1.Pod
	for _, doc := range splitYAML(out) {
		var tm struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatal(err)
		}
		kinds[tm.Kind]++
		if tm.Kind == "Pod" {
			var pod corev1.Pod
			if err := yaml.UnmarshalStrict([]byte(doc), &pod); err != nil {
				t.Fatal(err)
			}
			if pod.Namespace != "agents" {
				t.Errorf("pod %s in namespace %q", pod.Name, pod.Namespace)
			}
			if pod.Labels[plan.LabelRole] == plan.RoleAgent {
				agent = &pod
			}
		}
	}
	if kinds["Pod"] != 2 || kinds["NetworkPolicy"] != 2 || kinds["PersistentVolumeClaim"] == 0 || agent == nil {
		t.Fatalf("kinds %v, agent Pod %v:\n%s", kinds, agent != nil, out)
	}
	if agent.Name != "devaipod-kr-test-agent" || agent.Spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost {
		t.Errorf("agent Pod %s, seccomp %+v", agent.Name, agent.Spec.SecurityContext.SeccompProfile)
	}

	code, out, errOut = cliNoPodman(t, append(base, "-o", "json", "--agent-seccomp", kube.SeccompRuntimeDefault)...)
	if code != 0 {
		t.Fatalf("kube render -o json: exit %d\n%s", code, errOut)
	}
	var list corev1.List
	if err := json.Unmarshal([]byte(out), &list); err != nil || list.Kind != "List" || len(list.Items) != len(splitYAML(mustRender(t, base))) {
		t.Errorf("-o json: %v, kind %q, %d items", err, list.Kind, len(list.Items))
	}
	if !strings.Contains(out, `"RuntimeDefault"`) {
		t.Error("--agent-seccomp runtime-default did not reach the manifests")
	}

	for args, want := range map[string]string{
		"-o xml":                   "--output must be yaml or json",
		"--agent-seccomp none":     `agent seccomp "none"`,
		"--workspace-size lots":    `volume size "lots"`,
		"--namespace Not_A_Name":   `namespace "Not_A_Name"`,
		"--workspace-access maybe": "workspace",
	} {
		code, _, errOut := cliNoPodman(t, append(base, strings.Fields(args)...)...)
		if code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("kube render %s: exit %d, want an error with %q:\n%s", args, code, want, errOut)
		}
	}
	if code, out, _ := cliNoPodman(t, "kube"); code != 0 || !strings.Contains(out, "render") {
		t.Errorf("kube alone: exit %d\n%s", code, out)
	}
}

func mustRender(t *testing.T, args []string) string {
	t.Helper()
	code, out, errOut := cliNoPodman(t, args...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	return out
}

// TestKubeSeccompProfile: the profile a cluster's nodes need is the one the
// podman engine gives the agent: JSON that refuses ptrace and makes clone3
// look absent.
func TestKubeSeccompProfile(t *testing.T) {
	out := mustRender(t, []string{"kube", "seccomp-profile"})
	var p struct {
		DefaultAction string `json:"defaultAction"`
		Syscalls      []struct {
			Names  []string `json:"names"`
			Action string   `json:"action"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	actions := map[string]string{}
	for _, sc := range p.Syscalls {
		for _, n := range sc.Names {
			if n == "ptrace" || n == "clone3" {
				actions[n] = sc.Action
			}
		}
	}
	if p.DefaultAction != "SCMP_ACT_ERRNO" || actions["ptrace"] != "SCMP_ACT_ERRNO" || actions["clone3"] != "SCMP_ACT_ERRNO" {
		t.Errorf("profile: default %s, ptrace %s, clone3 %s; want errno for all three", p.DefaultAction, actions["ptrace"], actions["clone3"])
	}
}

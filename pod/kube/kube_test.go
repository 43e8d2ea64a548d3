package kube

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/source"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite golden files")

// input is a plan input like pod/plan's tests build: trusted variables
// (one of them a podman secret of the user's), an LLM key (a credential of
// the proxy), limits.
func input() plan.PlanInput {
	return plan.PlanInput{
		Name: "demo-1a2b3c",
		Config: &config.Config{
			Env:     config.EnvConfig{Allowlist: []string{"EDITOR"}, Vars: map[string]string{"LANG": "C.UTF-8"}},
			Trusted: config.TrustedConfig{Env: config.TrustedEnvConfig{Allowlist: []string{"GH_TOKEN"}, Vars: map[string]string{"JIRA_TOKEN": "jira-secret"}}},
			Agent:   config.AgentConfig{Limits: config.Limits{Memory: "4g", Pids: 512}},
		},
		Source:          &source.Source{Input: ".", Local: true, Dir: "/src/demo", Project: "demo", Remote: "https://git.example.test/org/demo.git", Commit: "0123456789abcdef0123456789abcdef01234567"},
		PlaceholderSalt: "salt0123",
		AgentPassword:   "agent-password",
		Task:            "fix the flaky test in pkg/cache",
		HostEnv:         map[string]string{"EDITOR": "vi", "GH_TOKEN": "ghp-secret", "ANTHROPIC_API_KEY": "sk-ant"},
	}
}

type renderCase struct {
	name string
	edit func(*plan.PlanInput)
	opts Options
}

var cases = []renderCase{
	{name: "default", edit: func(*plan.PlanInput) {}},
	{name: "gator", edit: func(in *plan.PlanInput) {
		in.GatorScopes = []string{"github:org/demo:read,create-draft"}
		in.Config.Trusted.Env.Secrets = []string{"NPM_TOKEN=npm_token"}
	}},
	{name: "credentials", edit: func(in *plan.PlanInput) {
		in.Config.Credentials = map[string]config.CredentialConfig{
			"MY_API_TOKEN":      {Hosts: []string{"api.example.test:8443"}},
			"REGISTRY_PASSWORD": {Hosts: []string{"registry.example.test"}, Secret: "registry_password"},
		}
		in.UpstreamCA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
		in.HostEnv["MY_API_TOKEN"] = "tok-value"
	}},
	{name: "masked-protected", edit: func(in *plan.PlanInput) {
		in.Config.Agent.Protect = []string{"Makefile"}
		in.Tree = source.TreeInfo{Masked: []string{".env", "certs/server.key"}}
		in.Mounts = []plan.HostMount{{Source: "/home/u/.cache/go-build", Target: "/cache/go-build", RW: true, Containers: []string{plan.RoleWorkspace, plan.RoleAgent}}}
		in.Config.Network.ExtraHosts = []string{"mirror.example.test:10.0.2.2"}
	}},
	{name: "workspace-ro", edit: func(in *plan.PlanInput) {
		in.Config.Agent.WorkspaceAccess = config.AccessRO
		in.Config.Agent.Limits.Timeout = "8h"
	}},
	{name: "network-open", edit: func(in *plan.PlanInput) { in.Config.Network.Mode = config.NetworkOpen }},
	{name: "options", edit: func(*plan.PlanInput) {},
		opts: Options{Namespace: "agents", AgentSeccomp: SeccompRuntimeDefault, HelperImage: "registry.example.test/devaipod-helper:1.0", StorageClass: "fast", WorkspaceSize: "20Gi", VolumeSize: "100Mi", NoLimits: true}},
}

func render(t *testing.T, c renderCase) *Manifests {
	t.Helper()
	defer func(v string) { plan.Version = v }(plan.Version)
	plan.Version = "test"
	in := input()
	c.edit(&in)
	p, err := plan.Build(in)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Render(p, c.opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRenderGolden: the manifests of each plan, as kube render prints them
// (go test ./pod/kube -run TestRenderGolden -update rewrites them).
func TestRenderGolden(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := render(t, c)
			got, err := m.YAML()
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range m.Warnings {
				got = append(got, "# warning: "+w+"\n"...)
			}
			golden := filepath.Join("testdata", c.name+".yaml")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./pod/kube -run TestRenderGolden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the rendering; run with -update and review the diff", golden)
			}
		})
	}
}

// decodeStrict reads one YAML document into the k8s.io/api type of its
// kind, refusing any field the type does not have.
func decodeStrict(t *testing.T, doc []byte) (kind string, obj metav1.Object) {
	t.Helper()
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		t.Fatal(err)
	}
	var target any
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Pod":
		target = &corev1.Pod{}
	case "v1 Secret":
		target = &corev1.Secret{}
	case "v1 ConfigMap":
		target = &corev1.ConfigMap{}
	case "v1 PersistentVolumeClaim":
		target = &corev1.PersistentVolumeClaim{}
	case "networking.k8s.io/v1 NetworkPolicy":
		target = &networkingv1.NetworkPolicy{}
	default:
		t.Fatalf("unexpected kind %s %s", tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, target); err != nil {
		t.Fatalf("%s does not decode strictly: %v", tm.Kind, err)
	}
	return tm.Kind, target.(metav1.Object)
}

func splitDocs(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(b, []byte("\n---\n")) {
		if len(bytes.TrimSpace(d)) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

// TestSchema is what can be checked without a cluster: every document
// decodes strictly into its k8s.io/api type, names, labels, keys and
// environment names are what the API server accepts, every mount names a
// volume of its Pod, and every claim, Secret and ConfigMap a Pod uses is
// rendered (or is the user's, warned about).
func TestSchema(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := render(t, c)
			out, err := m.YAML()
			if err != nil {
				t.Fatal(err)
			}
			js, err := m.JSON()
			if err != nil || !json.Valid(js) {
				t.Fatalf("JSON: %v", err)
			}
			defined := map[string]bool{}
			var pods []*corev1.Pod
			for _, doc := range splitDocs(out) {
				kind, obj := decodeStrict(t, doc)
				defined[kind+"/"+obj.GetName()] = true
				checkMeta(t, kind, obj)
				switch o := obj.(type) {
				case *corev1.Pod:
					pods = append(pods, o)
				case *corev1.Secret:
					for k := range o.Data {
						if errs := validation.IsConfigMapKey(k); len(errs) > 0 {
							t.Errorf("secret %s key %q: %v", o.Name, k, errs)
						}
					}
				}
				if c.opts.Namespace != "" && obj.GetNamespace() != c.opts.Namespace {
					t.Errorf("%s %s: namespace %q", kind, obj.GetName(), obj.GetNamespace())
				}
			}
			if len(pods) == 0 {
				t.Fatal("no Pod")
			}
			for _, pod := range pods {
				checkPod(t, pod, defined, m.Warnings)
			}
		})
	}
}

func checkMeta(t *testing.T, kind string, obj metav1.Object) {
	t.Helper()
	if errs := validation.IsDNS1123Subdomain(obj.GetName()); len(errs) > 0 {
		t.Errorf("%s name %q: %v", kind, obj.GetName(), errs)
	}
	if obj.GetLabels()[plan.LabelPod] != "demo-1a2b3c" {
		t.Errorf("%s %s lacks the label %s: %v", kind, obj.GetName(), plan.LabelPod, obj.GetLabels())
	}
	for k, v := range obj.GetLabels() {
		if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
			t.Errorf("%s %s label %s=%q: %v", kind, obj.GetName(), k, v, errs)
		}
	}
	for k, v := range obj.GetAnnotations() {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Errorf("%s %s annotation %s: %v", kind, obj.GetName(), k, errs)
		}
		if len(v) > validation.LabelValueMaxLength {
			t.Errorf("%s %s annotation %s is %d characters long: podman 4.3's kube play refuses more than 63", kind, obj.GetName(), k, len(v))
		}
	}
}

func checkPod(t *testing.T, pod *corev1.Pod, defined map[string]bool, warnings []string) {
	t.Helper()
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		if errs := validation.IsDNS1123Label(v.Name); len(errs) > 0 {
			t.Errorf("pod %s volume %q: %v", pod.Name, v.Name, errs)
		}
		if _, dup := volumes[v.Name]; dup {
			t.Errorf("pod %s: volume %s twice", pod.Name, v.Name)
		}
		volumes[v.Name] = v
		switch {
		case v.PersistentVolumeClaim != nil && !defined["PersistentVolumeClaim/"+v.PersistentVolumeClaim.ClaimName]:
			t.Errorf("pod %s: claim %s is not rendered", pod.Name, v.PersistentVolumeClaim.ClaimName)
		case v.Secret != nil && !defined["Secret/"+v.Secret.SecretName]:
			t.Errorf("pod %s: secret %s is not rendered", pod.Name, v.Secret.SecretName)
		case v.Secret != nil && (v.Secret.Optional == nil || v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o400):
			t.Errorf("pod %s: secret volume %s must set optional (podman 4.3) and mode 0400", pod.Name, v.Name)
		case v.EmptyDir != nil && !strings.HasPrefix(v.Name, "demo-1a2b3c-"):
			// podman 4.3's kube play makes a named volume of an
			// emptyDir's name: another devaipod pod's would be shared.
			t.Errorf("pod %s: emptyDir %s is not named after the pod", pod.Name, v.Name)
		case v.ConfigMap != nil && !defined["ConfigMap/"+v.ConfigMap.Name]:
			t.Errorf("pod %s: config map %s is not rendered", pod.Name, v.ConfigMap.Name)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if !defined["Secret/"+s.Secret.Name] && !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "your own podman secrets") }) {
					t.Errorf("pod %s: secret %s is neither rendered nor warned about", pod.Name, s.Secret.Name)
				}
			}
		}
	}
	names := map[string]bool{}
	for _, ctr := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		if errs := validation.IsDNS1123Label(ctr.Name); len(errs) > 0 || names[ctr.Name] {
			t.Errorf("pod %s container %q: %v (or twice)", pod.Name, ctr.Name, errs)
		}
		names[ctr.Name] = true
		if ctr.Image == "" || len(ctr.Command) == 0 {
			t.Errorf("pod %s container %s: no image or command", pod.Name, ctr.Name)
		}
		for _, e := range ctr.Env {
			if errs := validation.IsEnvVarName(e.Name); len(errs) > 0 {
				t.Errorf("container %s env %q: %v", ctr.Name, e.Name, errs)
			}
		}
		paths := map[string]bool{}
		for _, vm := range ctr.VolumeMounts {
			if _, ok := volumes[vm.Name]; !ok {
				t.Errorf("pod %s container %s mounts %s, which is not a volume of the pod", pod.Name, ctr.Name, vm.Name)
			}
			if paths[vm.MountPath] {
				t.Errorf("container %s: two mounts at %s", ctr.Name, vm.MountPath)
			}
			paths[vm.MountPath] = true
		}
	}
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Errorf("pod %s mounts a service-account token", pod.Name)
	}
	if pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks {
		t.Errorf("pod %s has service links", pod.Name)
	}
}

// level is the highest Pod Security level the Pod meets, with what keeps
// it from restricted.
func level(t *testing.T, pod *corev1.Pod) (psaapi.Level, string) {
	t.Helper()
	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	forbidden := func(l psaapi.Level) []string {
		var why []string
		for _, r := range ev.EvaluatePod(psaapi.LevelVersion{Level: l, Version: psaapi.LatestVersion()}, &pod.ObjectMeta, &pod.Spec) {
			if !r.Allowed {
				why = append(why, r.ForbiddenReason+": "+r.ForbiddenDetail)
			}
		}
		return why
	}
	notRestricted := strings.Join(forbidden(psaapi.LevelRestricted), "; ")
	switch {
	case notRestricted == "":
		return psaapi.LevelRestricted, ""
	case len(forbidden(psaapi.LevelBaseline)) == 0:
		return psaapi.LevelBaseline, notRestricted
	}
	return psaapi.LevelPrivileged, notRestricted
}

// TestPodSecurity: the agent's Pod meets Pod Security "restricted", with
// each seccomp choice; the workspace's Pod meets "baseline" (its
// workspace runs as the image's user, root by default, with the runtime's
// default capabilities; "prepare" runs as root with four of them).
func TestPodSecurity(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := render(t, c)
			if m.Agent == nil {
				if c.name != "network-open" {
					t.Fatal("no agent Pod")
				}
			} else {
				ev, _ := policy.NewEvaluator(policy.DefaultChecks(), nil)
				for _, r := range ev.EvaluatePod(psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}, &m.Agent.ObjectMeta, &m.Agent.Spec) {
					if !r.Allowed {
						t.Errorf("agent Pod is not restricted: %s: %s", r.ForbiddenReason, r.ForbiddenDetail)
					}
				}
			}
			l, why := level(t, m.Workspace)
			t.Logf("workspace Pod: Pod Security %q (not restricted: %s)", l, why)
			if l != psaapi.LevelBaseline {
				t.Errorf("workspace Pod meets %q, want baseline: %s", l, why)
			}
		})
	}
}

// TestContainment: the properties the verify battery attacks, in the
// objects: the agent alone in its Pod, with no network (a NetworkPolicy
// that selects exactly it, with no rule), on the workspace's node, no
// trusted value in it or in the workspace Pod's environment, secrets only
// in the containers that need them.
func TestContainment(t *testing.T) {
	m := render(t, cases[2]) // credentials: the proxy holds values
	agent := m.Agent
	if len(agent.Spec.Containers) != 1 || agent.Spec.Containers[0].Name != plan.RoleAgent {
		t.Fatalf("agent Pod containers: %v", agent.Spec.Containers)
	}
	var policyFound bool
	for _, p := range m.Policies {
		sel := p.Spec.PodSelector.MatchLabels
		if sel[plan.LabelRole] != plan.RoleAgent {
			continue
		}
		policyFound = true
		for k, v := range sel {
			if agent.Labels[k] != v {
				t.Errorf("the agent's policy selects %s=%s, which its Pod does not carry", k, v)
			}
		}
		if len(p.Spec.Ingress) > 0 || len(p.Spec.Egress) > 0 || !slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || !slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			t.Errorf("the agent's policy allows something: %+v", p.Spec)
		}
	}
	if !policyFound {
		t.Error("no NetworkPolicy for the agent")
	}
	aff := agent.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if len(aff) != 1 || aff[0].TopologyKey != corev1.LabelHostname || aff[0].LabelSelector.MatchLabels[plan.LabelRole] != plan.RoleWorkspace {
		t.Errorf("agent affinity: %+v", aff)
	}
	for _, v := range agent.Spec.Volumes {
		if v.Secret != nil || v.Projected != nil || v.HostPath != nil {
			t.Errorf("the agent's Pod has volume %s: %+v", v.Name, v.VolumeSource)
		}
	}
	out, _ := m.YAML()
	for _, s := range m.Secrets {
		for _, val := range s.Data {
			// (The agent's password is the agent's too, by design.)
			if bytes.Contains(out, val) && string(val) != "agent-password" {
				t.Errorf("a secret value appears in clear in the manifests")
			}
		}
	}
	for _, pod := range []*corev1.Pod{m.Workspace, m.Agent} {
		for _, ctr := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
			for _, e := range ctr.Env {
				for _, secret := range []string{"ghp-secret", "jira-secret", "tok-value", "sk-ant", "agent-password"} {
					if e.Value == secret && !(ctr.Name == plan.RoleAgent && secret == "agent-password") {
						t.Errorf("%s/%s has %s in its environment", pod.Name, ctr.Name, e.Name)
					}
				}
			}
		}
	}
	// The proxy reads its credentials from prepare's copy (its uid's),
	// never from a Secret volume of its own; the workspace from its root-
	// only Secret.
	for _, ctr := range m.Workspace.Spec.Containers {
		for _, vm := range ctr.VolumeMounts {
			if vm.MountPath != plan.SecretDir {
				continue
			}
			v := volumeNamed(m.Workspace, vm.Name)
			switch ctr.Name {
			case plan.RoleWorkspace:
				if v.Secret == nil {
					t.Errorf("workspace secrets from %+v", v.VolumeSource)
				}
			case plan.RoleProxy:
				if v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory || !vm.ReadOnly {
					t.Errorf("proxy secrets from %+v", v.VolumeSource)
				}
			default:
				t.Errorf("%s mounts secrets", ctr.Name)
			}
		}
	}
	if got := strings.Join(m.Workspace.Spec.InitContainers[0].Args, " "); !strings.Contains(got, "--secrets /secrets/proxy=/secret-copies/proxy:1100") || !strings.Contains(got, "--wait "+m.Seed.Marker) {
		t.Errorf("prepare: %s", got)
	}
	if m.Seed.Pod != m.Workspace.Name || m.Seed.Container != PrepareContainer || !strings.Contains(strings.Join(m.Seed.AgentGit, " "), "--done "+m.Seed.Marker) {
		t.Errorf("seed: %+v", m.Seed)
	}
}

func volumeNamed(pod *corev1.Pod, name string) corev1.Volume {
	for _, v := range pod.Spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	panic(fmt.Sprintf("no volume %s in %s", name, pod.Name))
}

// TestClusterCanary: where the agent has a Pod of its own, the workspace's
// canary listens on every address of its Pod (verify's cluster-egress row
// aims at it there), and the workspace's policy lets in the agent's Pod
// alone, to that port alone; in network mode open, and in the plan itself
// (the podman engine's), it stays on loopback.
func TestClusterCanary(t *testing.T) {
	canaryArg := func(p *corev1.Pod) string {
		for _, c := range p.Spec.Containers {
			if c.Name != plan.RoleWorkspace {
				continue
			}
			if i := slices.Index(c.Command, "--canary"); i >= 0 && i+1 < len(c.Command) {
				return c.Command[i+1]
			}
		}
		return ""
	}
	p, err := plan.Build(input())
	if err != nil {
		t.Fatal(err)
	}
	m, err := Render(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := canaryArg(m.Workspace); got != "tcp::"+ClusterCanaryPort {
		t.Errorf("the workspace's canary listens at %q: want every address of its Pod", got)
	}
	if !slices.Contains(p.Workspace().Entrypoint, "tcp:"+plan.CanaryAddr) {
		t.Errorf("render changed the plan's canary: %q", p.Workspace().Entrypoint)
	}
	var ws *networkingv1.NetworkPolicy
	for _, np := range m.Policies {
		if np.Spec.PodSelector.MatchLabels[plan.LabelRole] == plan.RoleWorkspace {
			ws = np
		}
	}
	if ws == nil || len(ws.Spec.Ingress) != 1 || len(ws.Spec.Ingress[0].From) != 1 || len(ws.Spec.Ingress[0].Ports) != 2 {
		t.Fatalf("the workspace's policy: %+v", ws)
	}
	rule := ws.Spec.Ingress[0]
	from := rule.From[0]
	if from.NamespaceSelector != nil || from.IPBlock != nil || from.PodSelector == nil ||
		!maps.Equal(from.PodSelector.MatchLabels, map[string]string{plan.LabelPod: p.Name, plan.LabelRole: plan.RoleAgent}) {
		t.Errorf("the workspace lets in %+v: want the agent's Pod alone", from)
	}
	for _, port := range rule.Ports {
		if port.Port == nil || port.Port.String() != ClusterCanaryPort || port.EndPort != nil {
			t.Errorf("the workspace lets in port %+v: want the canary's alone", port)
		}
	}
	if got := ClusterCanaries([]string{"10.244.1.7", "fd00::7", ""}); !slices.Equal(got, []string{"10.244.1.7:3129", "[fd00::7]:3129"}) {
		t.Errorf("ClusterCanaries = %q", got)
	}

	open := render(t, cases[slices.IndexFunc(cases, func(c renderCase) bool { return c.name == "network-open" })])
	if got := canaryArg(open.Workspace); got != "tcp:"+plan.CanaryAddr {
		t.Errorf("network open: the canary listens at %q: want the pod's loopback", got)
	}
	for _, np := range open.Policies {
		if len(np.Spec.Ingress) > 0 {
			t.Errorf("network open: policy %s lets something in: %+v", np.Name, np.Spec.Ingress)
		}
	}
}

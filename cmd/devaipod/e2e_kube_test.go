package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devaipod/devaipod/internal/helperargs"
	"github.com/devaipod/devaipod/pod/kube"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/source"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestE2EKubePlay renders the example repository with `devaipod kube
// render`, plays the manifests with `podman kube play` as the rootless test
// user, does the engine's side of the handshake (the repository and the
// agent's git directory streamed into the workspace Pod's init container),
// and runs the whole verify battery in the agent: no row may FAIL. Then it
// takes everything down and checks that nothing is left.
//
// podman kube play ignores NetworkPolicy: the agent's Pod is played on its
// own with --network none, which stands in for the policy (docs/kubernetes.md).
// The workspace's Pod is played on a podman network of the test's own
// (internal: nothing on it reaches outside), whose address stands in for
// its cluster address: the battery's cluster-egress row, given it, must
// PASS in the agent (after the workspace reached its own canary there).
// Then a second pod's agent is played on that network too, as a cluster
// whose CNI ignores NetworkPolicy would run it: cluster-egress must FAIL,
// which is how verify tells an enforced policy from an advisory one.
// The example gets a masked file (.env), so that every kind of the agent's
// mounts is played. Podman 4.3 (Debian 12, CI) ignores subPath, which the
// agent's folder, its protected paths and its masked files are mounted by:
// there the rendering as it is must not start the agent (its init container
// checks a subPath probe), and the test then plays it with each subPath
// mount replaced by what it means, a hostPath mount of that path in the
// claim's volume (kubeHostPathSubPaths); podman 4.4 and later play it as
// it is. Before 5.0 podman also ignores an emptyDir's medium and size: the
// agent's /tmp is a volume on disk, so the limit-tmp row cannot pass there
// and is the one FAIL allowed (docs/kubernetes.md lists these limits).
func TestE2EKubePlay(t *testing.T) {
	bin := e2e(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	major, minor := podmanVersion(t)
	subPath := major > 4 || (major == 4 && minor >= 4)
	memoryEmptyDir := major >= 5 // podman 5.0 plays a memory emptyDir as a tmpfs

	// The example, with a file the agent must see empty (a masked file,
	// bound over by a ConfigMap's empty key).
	repo := exampleRepo(t, ".env", "KUBE_E2E_MASKED=value-the-agent-must-not-see\n")
	cfg := standInConfig(t, "")
	env := []string{"ANTHROPIC_API_KEY=sk-e2e-kube-key"}
	profiles := seccompProfileDir(t, bin, repo, cfg)
	// Where podman ignores subPath, the agent's subPath mounts are played
	// as what they mean: hostPath mounts of that path inside the claim's
	// volume (kubeHostPathSubPaths), the one change made to the objects.
	play := kubePlayOptions{hostPathSubPaths: !subPath}
	if !subPath {
		t.Run("a runtime that ignores subPath does not start the agent", func(t *testing.T) {
			// The default (rw) layout binds the agent's folder and
			// protected paths by subPath; podman 4.3 would mount the whole
			// volume there. The agent's init container sees it and stops.
			k := kubePlay(ctx, t, repo, cfg, env, uniqueName("kube-rw"), profiles, kubePlayOptions{})
			if k.agentErr == nil {
				t.Fatalf("the agent's Pod started under a podman that ignores subPath:\n%s", k.agentOut)
			}
			logs, _ := exec.Command("podman", "logs", k.agentPod+"-"+kube.InstallContainer).CombinedOutput()
			if !strings.Contains(string(logs), "ignores subPath") {
				t.Errorf("install's log does not say why: %s", logs)
			}
			state, _ := exec.Command("podman", "inspect", "--format", "{{.State.Status}}", k.agentCtr).Output()
			if s := strings.TrimSpace(string(state)); s == "running" || s == "exited" {
				t.Errorf("the agent container ran (%s)", s)
			}
		})
	}
	k := kubePlay(ctx, t, repo, cfg, env, uniqueName("kube"), profiles, play)
	if k.agentErr != nil {
		t.Fatalf("podman kube play of the agent Pod: %v\n%s", k.agentErr, k.agentOut)
	}
	agentCtr, wsCtr, pl, meta := k.agentCtr, k.wsCtr, k.plan, k.meta

	t.Run("the workspace reaches the agent's server through the socket bridge", func(t *testing.T) {
		out, err := exec.CommandContext(ctx, "podman", "exec", wsCtr, plan.HelperBin, "wait-http", "--timeout", "60s", "http://127.0.0.1:4096/").CombinedOutput()
		if err != nil {
			t.Errorf("wait-http: %v %s", err, out)
		}
	})
	t.Run("the repository is in both, the agent's git its own", func(t *testing.T) {
		r, err := exec.CommandContext(ctx, "podman", "exec", agentCtr, "sh", "-c", "cd "+pl.Workdir+" && cat greet.sh >/dev/null && git log --oneline | wc -l && id -u").CombinedOutput()
		if err != nil || strings.TrimSpace(string(r)) != "1\n1000" {
			t.Errorf("agent: %v %q", err, r)
		}
		r, err = exec.CommandContext(ctx, "podman", "exec", wsCtr, "sh", "-c", "cd "+pl.Workdir+" && git status --porcelain && echo clean").CombinedOutput()
		if err != nil || strings.TrimSpace(string(r)) != "clean" {
			t.Errorf("workspace: %v %q", err, r)
		}
	})
	t.Run("the masked file is empty in the agent, whole in the workspace", func(t *testing.T) {
		r, err := exec.CommandContext(ctx, "podman", "exec", agentCtr, "wc", "-c", pl.Workdir+"/.env").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(r), "0 ") {
			t.Errorf("agent's .env: %v %q", err, r)
		}
		r, err = exec.CommandContext(ctx, "podman", "exec", wsCtr, "cat", pl.Workdir+"/.env").CombinedOutput()
		if err != nil || !strings.Contains(string(r), "value-the-agent-must-not-see") {
			t.Errorf("workspace's .env: %v %q", err, r)
		}
	})
	t.Run("the LLM key is the proxy's: a placeholder in the agent", func(t *testing.T) {
		r, _ := exec.CommandContext(ctx, "podman", "exec", agentCtr, "printenv", "ANTHROPIC_API_KEY").CombinedOutput()
		if !strings.HasPrefix(string(r), "devaipod-ANTHROPIC_API_KEY-") {
			t.Errorf("agent ANTHROPIC_API_KEY = %q", r)
		}
	})

	// The workspace Pod's address on the test's network stands in for its
	// cluster address; the engine checks, as here, that the workspace
	// reaches its own canary there before the agent is asked to.
	clusterCanary := kubeClusterCanary(ctx, t, k)

	t.Run("verify passes in the agent", func(t *testing.T) {
		rows := kubeVerify(ctx, t, agentCtr, meta, "--cluster-canary", clusterCanary)
		if r := rows["cluster-egress"]; r.Result != "PASS" || !strings.Contains(r.Detail, "tcp "+clusterCanary+": not reached") || !strings.Contains(r.Detail, "udp "+clusterCanary+": not reached") {
			t.Errorf("cluster-egress from the agent's Pod with --network none: %s %s; want PASS, neither reached", r.Result, r.Detail)
		}
		var lines []string
		for _, r := range rows {
			lines = append(lines, r.Result+" "+r.ID+": "+r.Detail)
			if r.Result != "FAIL" {
				continue
			}
			if r.ID == "limit-tmp" && !memoryEmptyDir {
				// podman before 5.0 plays the agent's memory emptyDir
				// as a volume on disk, without its size
				// (docs/kubernetes.md); a cluster gives a tmpfs.
				continue
			}
			t.Errorf("verify row FAILs: %s: %s", r.ID, r.Detail)
		}
		sort.Strings(lines)
		t.Logf("verify in the agent of the kube-played pod:\n%s", strings.Join(lines, "\n"))
	})

	// A cluster whose CNI ignores NetworkPolicy: the agent's Pod gets an
	// interface on the workspace's network and nothing stops it. The
	// direct probes cannot show that (they do not send where a route
	// exists); cluster-egress does.
	t.Run("verify detects a policy that is not enforced", func(t *testing.T) {
		open := play
		open.agentOnNetwork = true
		k := kubePlay(ctx, t, repo, cfg, env, uniqueName("kube-open"), profiles, open)
		if k.agentErr != nil {
			t.Fatalf("podman kube play of the agent Pod on the workspace's network: %v\n%s", k.agentErr, k.agentOut)
		}
		clusterCanary := kubeClusterCanary(ctx, t, k)
		rows := kubeVerify(ctx, t, k.agentCtr, k.meta, "--cluster-canary", clusterCanary)
		if r := rows["net-interfaces"]; r.Result != "FAIL" {
			t.Errorf("net-interfaces %s %s: the agent's Pod was to have an interface here", r.Result, r.Detail)
		}
		r := rows["cluster-egress"]
		if r.Result != "FAIL" || !strings.Contains(r.Detail, "tcp "+clusterCanary+": reached (the canary answered)") ||
			!strings.Contains(r.Detail, "udp "+clusterCanary+": reached") {
			t.Errorf("cluster-egress from an agent Pod that shares the workspace's network: %s %s; want FAIL, both reached", r.Result, r.Detail)
		}
		t.Logf("cluster-egress without enforcement: %s %s", r.Result, r.Detail)
	})
}

// kubeVerifyRow is a row of the battery's JSON report.
type kubeVerifyRow struct{ ID, Result, Detail string }

// kubeVerify runs the whole battery in ctr with the pod's own arguments
// (the meta ConfigMap's) and extra ones; it returns the rows by id.
func kubeVerify(ctx context.Context, t *testing.T, ctr string, meta corev1.ConfigMap, extra ...string) map[string]kubeVerifyRow {
	t.Helper()
	var verifyArgs []string
	if err := json.Unmarshal([]byte(meta.Data[plan.LabelVerify]), &verifyArgs); err != nil {
		t.Fatal(err)
	}
	cmd := append(append([]string{"exec", ctr, plan.HelperBin, "verify"}, verifyArgs...), extra...)
	out, _ := exec.CommandContext(ctx, "podman", append(cmd, "--output", "json")...).Output()
	var report struct {
		Rows []kubeVerifyRow `json:"rows"`
		Pass int             `json:"pass"`
	}
	if err := json.Unmarshal(out, &report); err != nil || report.Pass == 0 {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	rows := map[string]kubeVerifyRow{}
	for _, r := range report.Rows {
		rows[r.ID] = r
	}
	return rows
}

// kubeClusterCanary is the workspace Pod's canary at its address on the
// test's network (its cluster address, on a cluster), once the workspace
// reached it there itself over TCP and UDP, as the engine requires
// (pod/kubeclient's clusterCanaries): the agent's failure to reach it then
// means something.
func kubeClusterCanary(ctx context.Context, t *testing.T, k *kubePlayed) string {
	t.Helper()
	infra, err := exec.CommandContext(ctx, "podman", "pod", "inspect", "--format", "{{.InfraContainerID}}", k.wsPod).Output()
	if err != nil {
		t.Fatalf("podman pod inspect %s: %v", k.wsPod, err)
	}
	ip, err := exec.CommandContext(ctx, "podman", "inspect", "--format",
		`{{(index .NetworkSettings.Networks "`+k.network+`").IPAddress}}`, strings.TrimSpace(string(infra))).Output()
	addr := strings.TrimSpace(string(ip))
	if err != nil || addr == "" {
		t.Fatalf("the workspace Pod's address on %s: %v %q", k.network, err, ip)
	}
	canary := net.JoinHostPort(addr, kube.ClusterCanaryPort)
	self := plan.HelperCommand(helperargs.Verify{ClusterCanaries: []string{canary}, Only: []string{"cluster-egress"}, Output: "json"})
	out, _ := exec.CommandContext(ctx, "podman", append([]string{"exec", k.wsCtr}, self...)...).Output()
	var report struct{ Rows []kubeVerifyRow }
	if err := json.Unmarshal(out, &report); err != nil || len(report.Rows) != 1 {
		t.Fatalf("cluster-egress in the workspace: %v\n%s", err, out)
	}
	if r := report.Rows[0]; r.Result != "FAIL" || strings.Contains(r.Detail, "not reached") {
		t.Fatalf("the workspace does not reach its own canary at %s over TCP and UDP: %s %s", canary, r.Result, r.Detail)
	}
	return canary
}

// kubePlayed is a pod rendered and played by kubePlay.
type kubePlayed struct {
	agentPod, agentCtr, wsPod, wsCtr string
	// network is the test's podman network the workspace's Pod is on.
	network string
	meta    corev1.ConfigMap
	plan    kubePlanFacts
	// agentErr is the agent Pod's play's error, agentOut its output.
	agentErr error
	agentOut string
}

// kubePlanFacts are what the handshake needs of the plan.
type kubePlanFacts struct {
	Workdir      string   `json:"workdir"`
	Placeholders []string `json:"placeholders"`
	MaskPatterns []string `json:"mask_patterns"`
}

// kubePlayOptions say how kubePlay renders and plays a pod.
type kubePlayOptions struct {
	// agentOnNetwork plays the agent's Pod on the workspace's network,
	// as a cluster that does not enforce its NetworkPolicy would run it.
	agentOnNetwork bool
	// hostPathSubPaths plays the agent Pod's subPath mounts as hostPath
	// mounts of the same paths (kubeHostPathSubPaths), for a podman that
	// ignores subPath.
	hostPathSubPaths bool
}

// kubePlay renders repo as pod name (kube render), plays
// the workspace's Pod on a podman network of its own (internal: no way
// off the machine), does the engine's handshake, then plays the agent's
// Pod with --network none, or on the workspace's network with
// opts.agentOnNetwork; the test's cleanup takes it all down and checks
// that nothing is left.
func kubePlay(ctx context.Context, t *testing.T, repo, cfg string, env []string, name, profiles string, opts kubePlayOptions) *kubePlayed {
	t.Helper()
	network := name + "-net"
	if out, err := exec.CommandContext(ctx, "podman", "network", "create", "--internal", network).CombinedOutput(); err != nil {
		t.Fatalf("podman network create: %v %s", err, out)
	}
	// Registered first, so that it runs last: after the Pods are gone.
	t.Cleanup(func() { podmanOut(t, "network", "rm", "-f", network) })
	args := []string{"--config", cfg, "kube", "render", repo, "--name", name, "--no-limits"}
	dryRun := []string{"--config", cfg, "up", repo, "--name", name, "--dry-run", "-o", "json"}

	render := mustDevaipod(t, env, args...)
	docs := splitYAML(render.stdout)
	var ws, agent []string
	var meta corev1.ConfigMap
	// playVolumes are the volumes podman 4.3 makes of emptyDirs and
	// ConfigMaps, named after them.
	var claims, playVolumes, secrets []string
	configMaps := map[string]corev1.ConfigMap{}
	var agentConfigMaps []string
	for _, doc := range docs {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if obj.Metadata.Labels[plan.LabelPod] != name {
			t.Errorf("%s %s lacks the label %s=%s", obj.Kind, obj.Metadata.Name, plan.LabelPod, name)
		}
		switch {
		case obj.Kind == "NetworkPolicy":
			continue // cluster-only: --network none stands in for the agent's
		case obj.Kind == "Pod" && obj.Metadata.Labels[plan.LabelRole] == plan.RoleAgent:
			agent = append(agent, doc)
		default:
			ws = append(ws, doc)
		}
		switch obj.Kind {
		case "PersistentVolumeClaim":
			claims = append(claims, obj.Metadata.Name)
		case "Secret":
			secrets = append(secrets, obj.Metadata.Name)
		case "ConfigMap":
			var cm corev1.ConfigMap
			if err := yaml.UnmarshalStrict([]byte(doc), &cm); err != nil {
				t.Fatal(err)
			}
			configMaps[cm.Name] = cm
			if cm.Name == kube.MetaConfigMap(name) {
				meta = cm
			} else {
				// kube play reads a Pod's ConfigMaps from its own
				// file: the agent's gets them too.
				agentConfigMaps = append(agentConfigMaps, doc)
				playVolumes = append(playVolumes, cm.Name)
			}
		case "Pod":
			var pod corev1.Pod
			if err := yaml.UnmarshalStrict([]byte(doc), &pod); err != nil {
				t.Fatal(err)
			}
			for _, v := range pod.Spec.Volumes {
				if v.EmptyDir != nil {
					playVolumes = append(playVolumes, v.Name)
				}
			}
		}
	}
	if len(agent) != 1 || len(ws) == 0 || meta.Data[plan.LabelVerify] == "" {
		t.Fatalf("want one agent Pod, the rest, and the verify arguments in %s:\n%s", kube.MetaConfigMap(name), render.stdout)
	}
	dir := t.TempDir()
	wsFile, agentFile := filepath.Join(dir, "workspace.yaml"), filepath.Join(dir, "agent.yaml")
	os.WriteFile(wsFile, []byte(strings.Join(ws, "\n---\n")), 0o644)
	os.WriteFile(agentFile, []byte(strings.Join(append(agent, agentConfigMaps...), "\n---\n")), 0o644)

	podName, agentPod := plan.PodName(name), plan.ContainerName(name, plan.RoleAgent)
	t.Cleanup(func() {
		// kube down, then what podman 4.3's kube down leaves: the volumes
		// of the claims, emptyDirs and ConfigMaps, the Secrets.
		for _, f := range []string{agentFile, wsFile} {
			podmanOut(t, "kube", "down", f)
		}
		podmanOut(t, "pod", "rm", "-f", "--ignore", podName, agentPod)
		for _, v := range append(append([]string{}, claims...), playVolumes...) {
			podmanOut(t, "volume", "rm", "-f", v)
		}
		for _, s := range secrets {
			podmanOut(t, "secret", "rm", s)
			podmanOut(t, "volume", "rm", "-f", s) // podman 4.3's Secret volume
		}
		if left := labelled(t, name); len(left) > 0 {
			t.Errorf("objects left after kube down: %v", left)
		}
		out, _ := exec.Command("podman", "volume", "ls", "-q").Output()
		for _, v := range strings.Fields(string(out)) {
			if strings.HasPrefix(v, plan.Prefix+name+"-") || strings.HasPrefix(v, name+"-") {
				t.Errorf("volume %s left after kube down", v)
			}
		}
	})

	// What up would copy (placeholders, masked blobs), from the same plan.
	// Before the play: podman holds the pod's lock while prepare waits.
	var pl kubePlanFacts
	if err := json.Unmarshal([]byte(mustDevaipod(t, env, dryRun...).stdout), &pl); err != nil {
		t.Fatal(err)
	}

	// The workspace Pod: its play ends only once "prepare" has (podman
	// runs init containers to completion first), and prepare waits for the
	// handshake's marker.
	play := exec.CommandContext(ctx, "podman", "kube", "play", "--network", network, wsFile)
	var playOut bytes.Buffer
	play.Stdout, play.Stderr = &playOut, &playOut
	if err := play.Start(); err != nil {
		t.Fatal(err)
	}
	played := make(chan error, 1)
	go func() { played <- play.Wait() }()
	prepare := podName + "-" + kube.PrepareContainer
	waitFor(t, 90*time.Second, "the prepare container to run", func() bool {
		out, _ := exec.Command("podman", "inspect", "--format", "{{.State.Status}}", prepare).Output()
		return strings.TrimSpace(string(out)) == "running"
	})

	// The handshake, as the engine does it (pod/kube's doc): the
	// repository as up's copy makes it, then the agent's git directory,
	// whose untar creates the marker.
	seed := func(cmd []string, tar func(io.Writer) error, makesMarker bool) {
		t.Helper()
		c := exec.CommandContext(ctx, "podman", append([]string{"exec", "-i", prepare}, cmd...)...)
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tar(pw)) }()
		c.Stdin = pr
		if out, err := c.CombinedOutput(); err != nil {
			// The untar that makes the marker ends prepare, and podman
			// 4.3 may remove the finished init container before its exec
			// has the untar's exit status. That untar made the marker
			// only once the whole stream was in, and the play below ends
			// only if prepare saw it: the check is the play's.
			if makesMarker && bytes.Contains(out, []byte("does not exist in database")) {
				t.Logf("%v: prepare ended and was removed before podman exec had the exit status: %s", cmd, out)
				return
			}
			t.Fatalf("%v: %v %s", cmd, err, out)
		}
	}
	var m kube.Seed
	m.Workspace = []string{"/devaipod-helper", "untar", "--dir", kube.VolumesDir + "/" + plan.VolumeWorkspace}
	m.Marker = kube.VolumesDir + "/" + plan.VolumeHostShare + "/" + kube.SeedMarker
	m.AgentGit = []string{"/devaipod-helper", "untar", "--dir", kube.VolumesDir + "/" + plan.VolumeAgentGit, "--done", m.Marker}
	seed(m.Workspace, func(w io.Writer) error {
		return source.TarTree(ctx, w, repo, filepath.Base(pl.Workdir), plan.AgentUID, plan.AgentGID, pl.Placeholders)
	}, false)
	gitDir := t.TempDir()
	if err := source.AgentGitDir(ctx, repo, gitDir, pl.MaskPatterns); err != nil {
		t.Fatal(err)
	}
	os.Chmod(gitDir, 0o755)
	seed(m.AgentGit, func(w io.Writer) error { return source.TarGitDir(w, gitDir, plan.AgentUID, plan.AgentGID) }, true)
	select {
	case err := <-played:
		if err != nil {
			t.Fatalf("podman kube play of the workspace Pod: %v\n%s", err, playOut.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("podman kube play of the workspace Pod did not end after the handshake:\n%s", playOut.String())
	}

	// The agent's Pod: no network but lo (or, with agentOnNetwork, the
	// workspace's network), and devaipod's seccomp profile.
	agentNet := "none"
	if opts.agentOnNetwork {
		agentNet = network
	}
	if opts.hostPathSubPaths {
		os.WriteFile(agentFile, []byte(kubeHostPathSubPaths(ctx, t, agent[0], configMaps)), 0o644)
	}
	out, err := exec.CommandContext(ctx, "podman", "kube", "play", "--network", agentNet, "--seccomp-profile-root", profiles, agentFile).CombinedOutput()
	return &kubePlayed{agentPod: agentPod, agentCtr: agentPod + "-" + plan.RoleAgent, wsPod: podName, wsCtr: podName + "-" + plan.RoleWorkspace,
		network: network, meta: meta, plan: pl, agentErr: err, agentOut: string(out)}
}

// kubeHostPathSubPaths rewrites a Pod's subPath mounts into what they
// mean, for a podman that ignores subPath (4.3): a claim's subPath becomes
// a hostPath mount of that path inside the claim's podman volume (which
// exists once the workspace's Pod is played and seeded), a ConfigMap's
// key (configMaps, by name) a hostPath mount of a file holding its value.
// Nothing else changes.
func kubeHostPathSubPaths(ctx context.Context, t *testing.T, doc string, configMaps map[string]corev1.ConfigMap) string {
	t.Helper()
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict([]byte(doc), &pod); err != nil {
		t.Fatal(err)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	dir := t.TempDir()
	n := 0
	rewrite := func(m *corev1.VolumeMount) {
		if m.SubPath == "" {
			return
		}
		v := volumes[m.Name]
		var hostPath string
		switch {
		case v.PersistentVolumeClaim != nil:
			out, err := exec.CommandContext(ctx, "podman", "volume", "inspect", "--format", "{{.Mountpoint}}", v.PersistentVolumeClaim.ClaimName).Output()
			if err != nil {
				t.Fatalf("podman volume inspect %s: %v", v.PersistentVolumeClaim.ClaimName, err)
			}
			hostPath = filepath.Join(strings.TrimSpace(string(out)), m.SubPath)
		case v.ConfigMap != nil:
			hostPath = filepath.Join(dir, v.ConfigMap.Name+"-"+m.SubPath)
			cm, ok := configMaps[v.ConfigMap.Name]
			if !ok {
				t.Fatalf("subPath mount %s of ConfigMap %s, which is not rendered", m.MountPath, v.ConfigMap.Name)
			}
			if err := os.WriteFile(hostPath, []byte(cm.Data[m.SubPath]), 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("subPath mount %s of volume %s: neither a claim nor a ConfigMap", m.MountPath, m.Name)
		}
		n++
		name := "subpath-" + strconv.Itoa(n)
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostPath}}})
		m.Name, m.SubPath = name, ""
	}
	used := map[string]bool{}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			for j := range cs[i].VolumeMounts {
				rewrite(&cs[i].VolumeMounts[j])
				used[cs[i].VolumeMounts[j].Name] = true
			}
		}
	}
	// A volume only subPath mounts used is no longer mounted at all.
	pod.Spec.Volumes = slices.DeleteFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return !used[v.Name] })
	out, err := yaml.Marshal(&pod)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// podmanVersion is the podman client's major and minor version.
func podmanVersion(t *testing.T) (int, int) {
	t.Helper()
	out, err := exec.Command("podman", "version", "--format", "{{.Client.Version}}").Output()
	if err != nil {
		t.Fatalf("podman version: %v", err)
	}
	parts := strings.SplitN(strings.TrimSpace(string(out)), ".", 3)
	if len(parts) < 2 {
		t.Fatalf("podman version %q", out)
	}
	major, _ := strconv.Atoi(parts[0])
	minor, _ := strconv.Atoi(parts[1])
	return major, minor
}

// exampleRepo is examples/hello as a repository of its own, as make demo
// makes it, with files added (name, content pairs) in its commit.
func exampleRepo(t *testing.T, files ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "hello")
	if out, err := exec.Command("cp", "-r", filepath.Join("..", "..", "examples", "hello"), dir).CombinedOutput(); err != nil {
		t.Fatalf("copy the example: %v %s", err, out)
	}
	for i := 0; i+1 < len(files); i += 2 {
		if err := os.WriteFile(filepath.Join(dir, files[i]), []byte(files[i+1]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."}, {"commit", "-q", "-m", "hello example"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	return dir
}

// seccompProfileDir is a directory holding the agent's seccomp profile as
// kube.AgentSeccompProfile, for kube play's --seccomp-profile-root. The
// podman engine writes the profile to the user's cache when it creates an
// agent; when no up has run as this user yet, one up makes it.
func seccompProfileDir(t *testing.T, bin, repo, cfg string) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	find := func() string {
		matches, _ := filepath.Glob(filepath.Join(cache, "devaipod", "seccomp-"+plan.SeccompAgent+"-*.json"))
		newest, when := "", time.Time{}
		for _, m := range matches {
			if st, err := os.Stat(m); err == nil && st.ModTime().After(when) {
				newest, when = m, st.ModTime()
			}
		}
		return newest
	}
	profile := find()
	if profile == "" {
		name := uniqueName("kube-profile")
		cleanup(t, name)
		mustDevaipod(t, nil, "--config", cfg, "up", repo, "--name", name, "--no-verify")
		devaipod(t, nil, "delete", name)
		if profile = find(); profile == "" {
			t.Fatal("up wrote no seccomp profile to the cache")
		}
	}
	data, err := os.ReadFile(profile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, kube.AgentSeccompProfile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func splitYAML(s string) []string {
	var docs []string
	for _, d := range strings.Split(s, "\n---\n") {
		if strings.TrimSpace(d) != "" {
			docs = append(docs, d)
		}
	}
	return docs
}

// podmanOut runs podman for a cleanup step; failures are logged only.
func podmanOut(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("podman", args...).CombinedOutput(); err != nil {
		t.Logf("podman %s: %v %s", strings.Join(args, " "), err, out)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devaipod/devaipod/internal/gittest"
	"github.com/devaipod/devaipod/pod/kube"
	"github.com/devaipod/devaipod/pod/kubeclient"
	"github.com/devaipod/devaipod/pod/plan"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/remotecommand"
)

// fakeCluster makes --engine kube reach a fake cluster holding pods names,
// each with a workspace and an agent Pod, a policy, a claim and a secret.
func fakeCluster(t *testing.T, names ...string) *fake.Clientset {
	t.Helper()
	var objs []runtime.Object
	for _, short := range names {
		meta := func(name string) metav1.ObjectMeta {
			return metav1.ObjectMeta{Name: name, Namespace: "agents", Labels: map[string]string{plan.LabelPod: short},
				Annotations: map[string]string{plan.LabelRepo: "https://example.test/" + short}}
		}
		running := func(names ...string) corev1.PodStatus {
			s := corev1.PodStatus{Phase: corev1.PodRunning}
			for _, n := range names {
				s.ContainerStatuses = append(s.ContainerStatuses, corev1.ContainerStatus{Name: n,
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
			}
			return s
		}
		objs = append(objs,
			&corev1.Pod{ObjectMeta: meta(plan.PodName(short)), Status: running("workspace", "proxy"),
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "workspace"}, {Name: "proxy"}}}},
			&corev1.Pod{ObjectMeta: meta(plan.ContainerName(short, plan.RoleAgent)), Status: running("agent"),
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent"}}}},
			&networkingv1.NetworkPolicy{ObjectMeta: meta(plan.ObjectName(short, "agent"))},
			&corev1.PersistentVolumeClaim{ObjectMeta: meta(plan.ObjectName(short, "workspace"))},
			&corev1.Secret{ObjectMeta: meta(plan.ObjectName(short, "workspace-secrets"))})
	}
	cs := fake.NewClientset(objs...)
	old := connectKube
	t.Cleanup(func() { connectKube = old })
	connectKube = func(o kubeclient.Options) (*kubeclient.Client, error) {
		if o.Context == "missing" {
			return nil, &kubeclient.ConnectError{Err: errString("context \"missing\" is not in the kubeconfig"), Hint: "kubectl config get-contexts lists the contexts"}
		}
		return kubeclient.New(cs, o.Namespace), nil
	}
	return cs
}

type errString string

func (e errString) Error() string { return string(e) }

func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, streams{in: strings.NewReader(""), out: &out, err: &errOut})
	return code, out.String(), errOut.String()
}

func TestKubeEngineVerbs(t *testing.T) {
	cs := fakeCluster(t, "one", "two")
	code, out, errOut := cli(t, "--engine", "kube", "--namespace", "agents", "list", "-o", "json")
	if code != 0 {
		t.Fatalf("list: %d %s", code, errOut)
	}
	var sums []struct{ Name, State, Repo string }
	if err := json.Unmarshal([]byte(out), &sums); err != nil {
		t.Fatal(err)
	}
	if len(sums) != 2 || sums[0].Name != "one" || sums[0].State != "running" || sums[0].Repo != "https://example.test/one" {
		t.Errorf("list: %+v", sums)
	}
	// DEVAIPOD_ENGINE chooses it too.
	t.Setenv("DEVAIPOD_ENGINE", "kube")
	if code, out, errOut := cli(t, "--namespace", "agents", "list", "-q"); code != 0 || out != "one\ntwo\n" {
		t.Errorf("list -q with DEVAIPOD_ENGINE=kube: %d %q %s", code, out, errOut)
	}
	if code, out, errOut := cli(t, "--namespace", "agents", "logs", "one", "-c", "workspace"); code != 0 || out != "fake logs" {
		t.Errorf("logs: %d %q %s", code, out, errOut)
	}
	code, out, errOut = cli(t, "--namespace", "agents", "delete", "one")
	if code != 0 || !strings.Contains(out, "Pod one deleted") {
		t.Fatalf("delete: %d %s %s", code, out, errOut)
	}
	pods, _ := cs.CoreV1().Pods("agents").List(context.Background(), metav1.ListOptions{})
	nps, _ := cs.NetworkingV1().NetworkPolicies("agents").List(context.Background(), metav1.ListOptions{})
	if len(pods.Items) != 2 || len(nps.Items) != 1 || pods.Items[0].Labels[plan.LabelPod] != "two" {
		t.Errorf("after delete: %d pods, %d policies", len(pods.Items), len(nps.Items))
	}
	code, _, errOut = cli(t, "--namespace", "agents", "status", "one")
	if code != 1 || !strings.Contains(errOut, "pod one: not found") || !strings.Contains(errOut, "Hint: `devaipod --engine kube list`") {
		t.Errorf("status of a deleted pod: %d %s", code, errOut)
	}
}

// TestKubeNotRunning: a pod whose Pods do not run yet is pending, and the
// hint is the cluster's, not podman's start.
func TestKubeNotRunning(t *testing.T) {
	cs := fakeCluster(t, "one")
	p, _ := cs.CoreV1().Pods("agents").Get(context.Background(), "devaipod-one", metav1.GetOptions{})
	p.Status = corev1.PodStatus{Phase: corev1.PodPending}
	cs.CoreV1().Pods("agents").UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
	p, _ = cs.CoreV1().Pods("agents").Get(context.Background(), "devaipod-one-agent", metav1.GetOptions{})
	p.Status = corev1.PodStatus{Phase: corev1.PodPending}
	cs.CoreV1().Pods("agents").UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
	code, _, errOut := cli(t, "--engine", "kube", "--namespace", "agents", "verify", "one")
	if code != 1 || !strings.Contains(errOut, "pod one is pending, not running") || !strings.Contains(errOut, "kubectl get pods -l io.devaipod.pod=one") ||
		strings.Contains(errOut, "devaipod start") {
		t.Errorf("verify of a pending pod: %d %s", code, errOut)
	}
}

func TestKubeEngineRefusals(t *testing.T) {
	fakeCluster(t)
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"--engine", "kube", "stop", "x"}, []string{"Error: stop does not work with --engine kube yet", "Hint: a Pod on a cluster is not stopped", "--keep-volumes"}},
		{[]string{"--engine", "kube", "diff", "x"}, []string{"Error: diff does not work with --engine kube yet", "Hint: with --engine kube: up, list"}},
		{[]string{"--engine", "docker", "list"}, []string{`--engine must be podman or kube, not "docker"`}},
		{[]string{"--namespace", "x", "list"}, []string{"--context and --namespace are for --engine kube", "Hint: add --engine kube"}},
		{[]string{"--engine", "kube", "--context", "missing", "list"}, []string{`context "missing" is not in the kubeconfig`, "Hint: kubectl config get-contexts"}},
	} {
		code, _, errOut := cli(t, tt.args...)
		if code != 1 {
			t.Errorf("%v: exit %d", tt.args, code)
		}
		for _, w := range tt.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: stderr %q lacks %q", tt.args, errOut, w)
			}
		}
	}
}

// TestKubeEngineNeitherEngine: what talks to neither engine works with
// DEVAIPOD_ENGINE=kube set.
func TestKubeEngineNeitherEngine(t *testing.T) {
	t.Setenv("DEVAIPOD_ENGINE", "kube")
	if code, out, errOut := cli(t, "version"); code != 0 || out == "" {
		t.Errorf("version: %d %q %s", code, out, errOut)
	}
}

func TestKubeHints(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{&kubeclient.WaitError{What: "ready", Pending: []string{"devaipod-x: container agent: ImagePullBackOff"}, Namespace: "agents"},
			"kubectl get pods -n agents -l io.devaipod.pod"},
		{&kubeclient.WaitError{What: "ready", Pending: []string{"devaipod-x: container agent: ImagePullBackOff"}},
			"must be pushed to a registry they reach"},
		{&kubeclient.WaitError{What: "ready", Pending: []string{"devaipod-x: not scheduled: Unschedulable"}}, "workspace's node"},
		{&kubeclient.ApplyError{Ref: kubeclient.Ref{Kind: "Pod", Name: "x"}, Err: errString(`pods "x" is forbidden: violates PodSecurity`)},
			"kubectl auth can-i"},
		{&kubeclient.NotSupportedError{Op: "stopping a pod", Hint: "delete it"}, "delete it"},
	} {
		var b bytes.Buffer
		printError(&b, tt.err)
		if !strings.Contains(b.String(), "Hint: ") || !strings.Contains(b.String(), tt.want) {
			t.Errorf("%v: printed %q, want %q", tt.err, b.String(), tt.want)
		}
	}
}

// kubelet plays the cluster for up --engine kube: the handshake's init
// container runs once the Pods exist; every container runs once the seed's
// last command (the one that writes the marker) came through exec.
func kubelet(t *testing.T, cs *fake.Clientset) func(method string, u *url.URL) (remotecommand.Executor, error) {
	var seeded atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
			pods, _ := cs.CoreV1().Pods("agents").List(ctx, metav1.ListOptions{})
			for _, p := range pods.Items {
				p.Status = corev1.PodStatus{Phase: corev1.PodPending}
				for _, c := range p.Spec.InitContainers {
					p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{Name: c.Name,
						State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
				}
				if seeded.Load() {
					p.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
					for _, c := range p.Spec.Containers {
						p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Ready: true,
							State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
					}
				}
				cs.CoreV1().Pods("agents").UpdateStatus(ctx, &p, metav1.UpdateOptions{})
			}
		}
	}()
	return func(method string, u *url.URL) (remotecommand.Executor, error) {
		return execFunc(func(so remotecommand.StreamOptions) error {
			if so.Stdin != nil {
				io.Copy(io.Discard, so.Stdin)
			}
			if strings.Contains(u.RawQuery, url.QueryEscape(kube.SeedMarker)) {
				seeded.Store(true)
			}
			return nil
		}), nil
	}
}

type execFunc func(so remotecommand.StreamOptions) error

func (f execFunc) Stream(so remotecommand.StreamOptions) error { return f(so) }
func (f execFunc) StreamWithContext(_ context.Context, so remotecommand.StreamOptions) error {
	return f(so)
}

func TestKubeUp(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	repo := gittest.Repo(t)
	cs := fakeCluster(t)
	exec := kubelet(t, cs)
	old := connectKube
	connectKube = func(o kubeclient.Options) (*kubeclient.Client, error) {
		c, err := old(o)
		if err == nil {
			c.SetExecutor(exec)
			c.SetPollInterval(10 * time.Millisecond)
		}
		return c, err
	}
	// The dry run: the plan and what would be applied; nothing is.
	code, out, errOut := cli(t, "--engine", "kube", "--namespace", "agents", "up", repo, "--name", "k", "--dry-run", "-o", "json")
	if code != 0 {
		t.Fatalf("dry run: %d %s", code, errOut)
	}
	var dry struct {
		Engine, Namespace string
		Objects           []kubeclient.Ref
	}
	if err := json.Unmarshal([]byte(out), &dry); err != nil {
		t.Fatal(err)
	}
	if dry.Engine != "kube" || dry.Namespace != "agents" || len(dry.Objects) < 5 || dry.Objects[len(dry.Objects)-1].Kind != "Pod" {
		t.Errorf("dry run: %+v", dry)
	}
	for _, a := range cs.Actions() {
		if v := a.GetVerb(); v != "list" && v != "get" {
			t.Errorf("the dry run did %s %s", v, a.GetResource().Resource)
		}
	}
	code, out, errOut = cli(t, "--engine", "kube", "--namespace", "agents", "up", repo, "--name", "k", "--helper-image", "registry.test/helper:1")
	if code != 0 {
		t.Fatalf("up: %d %s\n%s", code, out, errOut)
	}
	for _, want := range []string{"Pod k is ready", "namespace agents", "devaipod --engine kube --namespace agents exec k"} {
		if !strings.Contains(out, want) {
			t.Errorf("up's output %q lacks %q", out, want)
		}
	}
	for _, want := range []string{"applying Pod/devaipod-k-agent", "copying the repository", "waiting for the Pods to be ready"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("up's progress lacks %q:\n%s", want, errOut)
		}
	}
	p, err := cs.CoreV1().Pods("agents").Get(context.Background(), "devaipod-k-agent", metav1.GetOptions{})
	if err != nil || p.Spec.InitContainers[0].Image != "registry.test/helper:1" {
		t.Errorf("the agent's Pod: %v", err)
	}
	// Up again: it is there, and running.
	code, out, errOut = cli(t, "--engine", "kube", "--namespace", "agents", "up", repo, "--name", "k")
	if code != 0 || !strings.Contains(out, "Pod k is already running") || !strings.Contains(out, "--engine kube --namespace agents verify k") {
		t.Errorf("up again: %d %s %s", code, out, errOut)
	}
	code, out, _ = cli(t, "--engine", "kube", "--namespace", "agents", "list", "-q")
	if code != 0 || out != "k\n" {
		t.Errorf("list: %q", out)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/pod/kubeclient"
	"github.com/devaipod/devaipod/pod/plan"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
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
	if code != 1 || !strings.Contains(errOut, "pod one: not found") || !strings.Contains(errOut, "Hint: `devaipod list`") {
		t.Errorf("status of a deleted pod: %d %s", code, errOut)
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

package kubeclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/plan"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

const ns = "agents"

func labels(short string, extra ...string) map[string]string {
	l := map[string]string{plan.LabelPod: short, plan.LabelVersion: "test"}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return l
}

// manifestsFor is what the renderer makes of a pod, in the shape the
// engine relies on: the agent alone in a Pod, the rest in another, a
// deny-all policy for the agent, volumes and a secret; every object
// labelled.
func manifestsFor(short string) []runtime.Object {
	meta := func(name string, extra ...string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Labels: labels(short, extra...)}
	}
	uid := int64(1000)
	agentMeta := meta(plan.ContainerName(short, plan.RoleAgent), plan.LabelRole, plan.RoleAgent)
	agentMeta.Annotations = map[string]string{plan.LabelRepo: "https://example.test/org/repo.git"}
	mainMeta := meta(plan.PodName(short))
	mainMeta.Annotations = map[string]string{plan.LabelRepo: "https://example.test/org/repo.git", "unrelated": "x"}
	return []runtime.Object{
		// Out of order on purpose: Apply orders them.
		&corev1.Pod{ObjectMeta: agentMeta, Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: &uid},
			InitContainers:  []corev1.Container{{Name: "wait-copy", Image: "helper"}},
			Containers:      []corev1.Container{{Name: plan.RoleAgent, Image: "img"}}}},
		&corev1.Pod{ObjectMeta: mainMeta, Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "copy", Image: "img"}},
			Containers: []corev1.Container{{Name: plan.RoleWorkspace, Image: "img"},
				{Name: plan.RoleProxy, Image: "helper"}}}},
		&networkingv1.NetworkPolicy{ObjectMeta: meta(plan.ObjectName(short, "agent-deny-all")),
			Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}},
		&corev1.PersistentVolumeClaim{ObjectMeta: meta(plan.ObjectName(short, plan.VolumeWorkspace)),
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}},
		&corev1.Secret{ObjectMeta: meta(plan.ObjectName(short, "trusted-env")), StringData: map[string]string{"GH_TOKEN": "x"}},
		// pod/kube's: the labels that are no label values.
		&corev1.ConfigMap{ObjectMeta: meta(plan.ObjectName(short, "meta")), Data: map[string]string{
			plan.LabelVerify: `["--workspace","/workspaces/repo"]`, "other": "x"}},
	}
}

func newFake(t *testing.T) (*fake.Clientset, *Client) {
	t.Helper()
	cs := fake.NewClientset()
	c := New(cs, ns)
	c.SetPollInterval(5 * time.Millisecond)
	return cs, c
}

// actions are the client's calls of verb, as "resource/name".
func actions(cs *fake.Clientset, verb string) []string {
	var out []string
	for _, a := range cs.Actions() {
		if a.GetVerb() != verb {
			continue
		}
		name := ""
		switch a := a.(type) {
		case k8stesting.PatchAction:
			name = a.GetName()
		case k8stesting.DeleteAction:
			name = a.GetName()
		}
		out = append(out, a.GetResource().Resource+"/"+name)
	}
	return out
}

func TestApplyOrderLabelsAndIdempotence(t *testing.T) {
	cs, c := newFake(t)
	ctx := context.Background()
	var progress []string
	refs, err := c.Apply(ctx, manifestsFor("demo"), func(s string) { progress = append(progress, s) })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"secrets/devaipod-demo-trusted-env", "configmaps/devaipod-demo-meta", "persistentvolumeclaims/devaipod-demo-workspace",
		"networkpolicies/devaipod-demo-agent-deny-all", "pods/devaipod-demo-agent", "pods/devaipod-demo"}
	if got := actions(cs, "patch"); !slices.Equal(got, want) {
		t.Fatalf("applied %v, want %v (secrets and volumes, then the policy, then the Pods)", got, want)
	}
	if len(refs) != 6 || len(progress) != 6 || !strings.Contains(progress[3], "NetworkPolicy/") {
		t.Errorf("refs %v, progress %v", refs, progress)
	}
	for _, a := range cs.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			if p.GetPatchType() != "application/apply-patch+yaml" {
				t.Errorf("%s: patch type %s, want server-side apply", p.GetName(), p.GetPatchType())
			}
			if p.GetNamespace() != ns {
				t.Errorf("%s applied in %q", p.GetName(), p.GetNamespace())
			}
		}
	}
	p, err := cs.CoreV1().Pods(ns).Get(ctx, "devaipod-demo-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Labels[plan.LabelPod] != "demo" {
		t.Errorf("labels %v", p.Labels)
	}
	if len(p.ManagedFields) == 0 || p.ManagedFields[0].Manager != FieldManager {
		t.Errorf("managed fields %+v, want the manager %s", p.ManagedFields, FieldManager)
	}
	// Again: the same objects, nothing new.
	if _, err := c.Apply(ctx, manifestsFor("demo"), nil); err != nil {
		t.Fatalf("re-apply: %v", err)
	}
	pods, _ := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	secrets, _ := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if len(pods.Items) != 2 || len(secrets.Items) != 1 {
		t.Errorf("after re-apply: %d pods, %d secrets", len(pods.Items), len(secrets.Items))
	}
}

func TestApplyRefusesUnlabelledAndForeign(t *testing.T) {
	_, c := newFake(t)
	objs := []runtime.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x"}}}
	if _, err := c.Apply(context.Background(), objs, nil); err == nil || !strings.Contains(err.Error(), plan.LabelPod) {
		t.Errorf("unlabelled: %v", err)
	}
	objs = []runtime.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "other", Labels: labels("demo")}}}
	if _, err := c.Apply(context.Background(), objs, nil); err == nil || !strings.Contains(err.Error(), "namespace other") {
		t.Errorf("other namespace: %v", err)
	}
	objs = []runtime.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: labels("demo")}}}
	if _, err := c.Apply(context.Background(), objs, nil); err == nil || !strings.Contains(err.Error(), "kind Namespace") {
		t.Errorf("a namespace: %v", err)
	}
}

func TestApplyRollsBack(t *testing.T) {
	cs, c := newFake(t)
	ctx := context.Background()
	// The second Pod is refused: everything applied before goes again.
	cs.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.PatchAction).GetName() == "devaipod-demo" {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "devaipod-demo", errors.New("violates PodSecurity"))
		}
		return false, nil, nil
	})
	_, err := c.Apply(ctx, manifestsFor("demo"), nil)
	var ae *ApplyError
	if !errors.As(err, &ae) || ae.Ref.Name != "devaipod-demo" || ae.Cleanup != nil || !apierrors.IsForbidden(err) {
		t.Fatalf("err %v, want an ApplyError for Pod/devaipod-demo that unwraps to the API's", err)
	}
	objs, err := c.Objects(ctx, "demo")
	if err != nil || len(objs) != 0 {
		t.Errorf("left after rollback: %v (%v)", objs, err)
	}
	// Pods first, and the policy only after them.
	deletes := actions(cs, "delete")
	if len(deletes) == 0 || !strings.HasPrefix(deletes[0], "pods/") ||
		slices.Index(deletes, "networkpolicies/devaipod-demo-agent-deny-all") < slices.Index(deletes, "pods/devaipod-demo-agent") {
		t.Errorf("deleted %v: Pods first, the policy after them", deletes)
	}
}

func TestApplyRollsBackOnCancel(t *testing.T) {
	cs, c := newFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	cs.PrependReactor("patch", "networkpolicies", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cancel() // Ctrl-C while the policy is applied
		return false, nil, nil
	})
	_, err := c.Apply(ctx, manifestsFor("demo"), nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want cancelled", err)
	}
	objs, _ := c.Objects(context.Background(), "demo")
	if len(objs) != 0 {
		t.Errorf("left after a cancelled apply: %v", objs)
	}
	if got := actions(cs, "patch"); slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "pods/") }) {
		t.Errorf("applied Pods after the cancel: %v", got)
	}
}

// setStatus updates a Pod's status as the kubelet would.
func setStatus(t *testing.T, cs *fake.Clientset, name string, f func(*corev1.PodStatus)) {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Error(err)
		return
	}
	f(&p.Status)
	if _, err := cs.CoreV1().Pods(ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Error(err)
	}
}

func running(p *corev1.Pod) func(*corev1.PodStatus) {
	return func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		// Addresses, as a CNI gives them: the workspace's canary is
		// probed at its Pod's.
		s.PodIP = "10.244.0.7"
		if p.Labels[plan.LabelRole] == plan.RoleAgent {
			s.PodIP = "10.244.0.8"
		}
		s.PodIPs = []corev1.PodIP{{IP: s.PodIP}}
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		s.ContainerStatuses = nil
		for _, c := range p.Spec.Containers {
			s.ContainerStatuses = append(s.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
		}
	}
}

func applied(t *testing.T, short string) (*fake.Clientset, *Client) {
	t.Helper()
	cs, c := newFake(t)
	if _, err := c.Apply(context.Background(), manifestsFor(short), nil); err != nil {
		t.Fatal(err)
	}
	return cs, c
}

func TestWaitReady(t *testing.T) {
	cs, c := applied(t, "demo")
	ctx := context.Background()
	setStatus(t, cs, "devaipod-demo", func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		s.InitContainerStatuses = []corev1.ContainerStatus{{Name: "copy", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	})
	setStatus(t, cs, "devaipod-demo-agent", func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "agent", Image: "img",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}}}}
	})
	var mu sync.Mutex
	var progress []string
	go func() {
		time.Sleep(50 * time.Millisecond)
		for _, name := range []string{"devaipod-demo", "devaipod-demo-agent"} {
			p, _ := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			setStatus(t, cs, name, running(p))
		}
	}()
	err := c.Wait(ctx, "demo", 2, "ready", Ready, 5*time.Second, func(s string) {
		mu.Lock()
		defer mu.Unlock()
		progress = append(progress, s)
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(progress) == 0 || !strings.Contains(progress[0], "init container copy running") ||
		!strings.Contains(progress[0], "ImagePullBackOff (Back-off pulling image) [image img]") {
		t.Errorf("progress %q: want what holds each Pod back", progress)
	}
}

func TestWaitInitRunning(t *testing.T) {
	cs, c := applied(t, "demo")
	setStatus(t, cs, "devaipod-demo", func(s *corev1.PodStatus) {
		s.InitContainerStatuses = []corev1.ContainerStatus{{Name: "copy", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	})
	// The agent's Pod has no "copy" init container: it is not waited for.
	if err := c.Wait(context.Background(), "demo", 2, "copying", InitRunning("copy"), time.Second, nil); err != nil {
		t.Fatal(err)
	}
}

func TestWaitTimeoutUnschedulable(t *testing.T) {
	cs, c := applied(t, "demo")
	setStatus(t, cs, "devaipod-demo", func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
			Message: "0/1 nodes are available: 1 Insufficient memory."}}
	})
	err := c.Wait(context.Background(), "demo", 2, "ready", Ready, 100*time.Millisecond, nil)
	var we *WaitError
	if !errors.As(err, &we) || we.Fatal {
		t.Fatalf("err %v, want a WaitError after the timeout", err)
	}
	if !strings.Contains(err.Error(), "devaipod-demo: not scheduled: Unschedulable 0/1 nodes are available: 1 Insufficient memory.") ||
		!strings.Contains(err.Error(), "after 100ms") {
		t.Errorf("err %q: want the scheduler's message", err)
	}
}

func TestWaitFailsFast(t *testing.T) {
	cs, c := applied(t, "demo")
	setStatus(t, cs, "devaipod-demo-agent", func(s *corev1.PodStatus) {
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "agent",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: `secret "x" not found`}}}}
	})
	start := time.Now()
	err := c.Wait(context.Background(), "demo", 2, "ready", Ready, time.Minute, nil)
	var we *WaitError
	if !errors.As(err, &we) || !we.Fatal || !strings.Contains(err.Error(), `secret "x" not found`) {
		t.Fatalf("err %v, want a fatal WaitError", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Error("waited for the timeout")
	}
}

func TestWaitMissingPods(t *testing.T) {
	_, c := newFake(t)
	err := c.Wait(context.Background(), "nothing", 2, "ready", Ready, 50*time.Millisecond, nil)
	if err == nil || !strings.Contains(err.Error(), "0 of 2 Pods exist") {
		t.Errorf("err %v", err)
	}
}

func TestObjectsMapping(t *testing.T) {
	cs, c := applied(t, "demo")
	if _, err := c.Apply(context.Background(), manifestsFor("other"), nil); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range []string{"devaipod-demo", "devaipod-demo-agent"} {
		p, _ := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		setStatus(t, cs, name, running(p))
	}
	objs, err := c.Objects(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		if o.Pod != "demo" {
			t.Errorf("%s %s belongs to %q", o.Kind, o.Name, o.Pod)
		}
		got = append(got, o.Kind+" "+o.Name+" "+o.State)
	}
	want := []string{"pod devaipod-demo running", "container devaipod-demo-workspace running",
		"container devaipod-demo-proxy running", "container devaipod-demo-agent running",
		"volume devaipod-demo-workspace ", "secret devaipod-demo-trusted-env "}
	if !slices.Equal(got, want) {
		t.Errorf("objects\n%q, want\n%q", got, want)
	}
	podObj := objs[0]
	if podObj.Labels[plan.LabelVerify] == "" || podObj.Labels[plan.LabelRepo] == "" || podObj.Labels["unrelated"] != "" || podObj.Labels["other"] != "" {
		t.Errorf("pod labels %v: want the io.devaipod.* labels and annotations", podObj.Labels)
	}
	if !podObj.Started {
		t.Error("pod not started")
	}
	for _, o := range objs[1:4] {
		if o.Labels[plan.LabelRole] == "" {
			t.Errorf("container %s has no role label", o.Name)
		}
	}
	// What pod makes of it.
	sum, err := pod.List(ctx, c)
	if err != nil || len(sum) != 2 || sum[0].Name != "demo" || sum[0].State != "running" || len(sum[0].Containers) != 3 {
		t.Errorf("pod.List: %+v, %v", sum, err)
	}
	if _, err := pod.RunningPod(ctx, c, "demo", plan.RoleAgent); err != nil {
		t.Errorf("RunningPod: %v", err)
	}
	// The other pod is pending: its Pods have no status yet.
	all, _ := c.Objects(ctx, "")
	for _, o := range all {
		if o.Kind == pod.KindPod && o.Pod == "other" && o.State != "pending" {
			t.Errorf("other: state %q, want pending", o.State)
		}
	}
	if exists, err := c.PodExists(ctx, "devaipod-other"); err != nil || !exists {
		t.Errorf("PodExists(other) = %v, %v", exists, err)
	}
	if exists, err := c.PodExists(ctx, "devaipod-nothing"); err != nil || exists {
		t.Errorf("PodExists(nothing) = %v, %v", exists, err)
	}
}

func TestPodState(t *testing.T) {
	pd := func(phase corev1.PodPhase, states ...bool) corev1.Pod {
		p := corev1.Pod{Status: corev1.PodStatus{Phase: phase}}
		for i, run := range states {
			name := string(rune('a' + i))
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name})
			st := corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}
			if run {
				st.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
			}
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, st)
		}
		return p
	}
	for _, tc := range []struct {
		pods []corev1.Pod
		want string
	}{
		{nil, "incomplete"},
		{[]corev1.Pod{pd(corev1.PodRunning, true), pd(corev1.PodRunning, true, true)}, "running"},
		{[]corev1.Pod{pd(corev1.PodRunning, true), pd(corev1.PodRunning, true, false)}, "degraded"},
		{[]corev1.Pod{pd(corev1.PodPending, false), pd(corev1.PodPending)}, "pending"},
		{[]corev1.Pod{pd(corev1.PodFailed, false), pd(corev1.PodSucceeded, false)}, "exited"},
	} {
		if got := podState(tc.pods); got != tc.want {
			t.Errorf("podState = %q, want %q", got, tc.want)
		}
	}
}

func TestDeleteByLabel(t *testing.T) {
	cs, c := applied(t, "demo")
	if _, err := c.Apply(context.Background(), manifestsFor("other"), nil); err != nil {
		t.Fatal(err)
	}
	cs.ClearActions()
	ctx := context.Background()
	removed, err := pod.Delete(ctx, c, "demo", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 6 {
		t.Errorf("removed %v", removed)
	}
	if objs, _ := c.Objects(ctx, "demo"); len(objs) != 0 {
		t.Errorf("left: %v", objs)
	}
	nps, _ := cs.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{LabelSelector: plan.LabelPod + "=demo"})
	if len(nps.Items) != 0 {
		t.Errorf("the policy is left: %v", nps.Items)
	}
	if objs, _ := c.Objects(ctx, "other"); len(objs) != 6 {
		t.Errorf("the other pod lost objects: %v", objs)
	}
	deletes := actions(cs, "delete")
	if !strings.HasPrefix(deletes[0], "pods/") || slices.Index(deletes, "networkpolicies/devaipod-demo-agent-deny-all") < 2 {
		t.Errorf("deleted %v: the Pods, then the policy", deletes)
	}
	for _, a := range cs.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && d.GetResource().Resource == "pods" {
			if g := d.GetDeleteOptions().GracePeriodSeconds; g == nil || *g == 0 {
				t.Errorf("pod deleted with grace %v: 0 would leave its containers running unseen", g)
			}
		}
	}
	// --keep-volumes
	if _, err := pod.Delete(ctx, c, "other", true); err != nil {
		t.Fatal(err)
	}
	objs, _ := c.Objects(ctx, "other")
	if len(objs) != 1 || objs[0].Kind != pod.KindVolume {
		t.Errorf("left with --keep-volumes: %v", objs)
	}
	if _, err := pod.Delete(ctx, c, "nothing", false); !errors.Is(err, pod.ErrNotFound) {
		t.Errorf("delete of nothing: %v", err)
	}
}

func TestDeleteKeepsPolicyWhilePodsRemain(t *testing.T) {
	cs, c := applied(t, "demo")
	// The kubelet never confirms: the Pods stay.
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := c.Remove(ctx, pod.Object{Kind: pod.KindPod, Name: "devaipod-demo", Pod: "demo"})
	if err == nil || !strings.Contains(err.Error(), "kept NetworkPolicy") {
		t.Errorf("err %v, want the policy kept", err)
	}
	nps, _ := cs.NetworkingV1().NetworkPolicies(ns).List(context.Background(), metav1.ListOptions{})
	if len(nps.Items) != 1 {
		t.Error("the policy went while its Pods remain")
	}
}

func TestNotSupported(t *testing.T) {
	_, c := newFake(t)
	ctx := context.Background()
	for _, err := range []error{c.StartPod(ctx, "x"), c.StopPod(ctx, "x", 1), c.PullImage(ctx, "x", pod.PullOptions{}, nil),
		c.CreatePod(ctx, plan.PodSpec{}), c.CreateContainer(ctx, "x", plan.ContainerSpec{})} {
		var ne *NotSupportedError
		if !errors.As(err, &ne) || ne.Hint == "" || !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%v: want a NotSupportedError with a hint", err)
		}
	}
	if err := pod.Stop(ctx, c, "x"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("pod.Stop: %v", err)
	}
}

// fakeExecutor records one exec request and plays a command.
type fakeExecutor struct {
	url  *url.URL
	opts remotecommand.StreamOptions
	in   []byte
	run  func(so remotecommand.StreamOptions) error
}

func (f *fakeExecutor) Stream(so remotecommand.StreamOptions) error {
	return f.StreamWithContext(context.Background(), so)
}

func (f *fakeExecutor) StreamWithContext(_ context.Context, so remotecommand.StreamOptions) error {
	f.opts = so
	if so.Stdin != nil {
		f.in, _ = io.ReadAll(so.Stdin)
	}
	return f.run(so)
}

func withExecutor(c *Client, run func(so remotecommand.StreamOptions) error) *fakeExecutor {
	f := &fakeExecutor{run: run}
	c.SetExecutor(func(method string, u *url.URL) (remotecommand.Executor, error) {
		if method != "POST" {
			return nil, errors.New("method " + method)
		}
		f.url = u
		return f, nil
	})
	return f
}

func TestExecRequest(t *testing.T) {
	_, c := applied(t, "demo")
	ctx := context.Background()
	f := withExecutor(c, func(so remotecommand.StreamOptions) error {
		io.WriteString(so.Stdout, "out\n")
		io.WriteString(so.Stderr, "err\n")
		return utilexec.CodeExitError{Err: errors.New("command terminated with non-zero exit code"), Code: 3}
	})
	var stderr bytes.Buffer
	code, out, err := c.Exec(ctx, plan.ContainerName("demo", plan.RoleWorkspace), pod.ExecSpec{Cmd: []string{"ls", "-la"},
		Env: []string{"A=it's"}, Workdir: "/workspaces/repo", Stdin: strings.NewReader("input"), Stderr: &stderr})
	if err != nil || code != 3 || out != "out\n" || stderr.String() != "err\n" {
		t.Fatalf("Exec = %d, %q, %v (stderr %q)", code, out, err, stderr.String())
	}
	if f.url.Path != "/api/v1/namespaces/agents/pods/devaipod-demo/exec" {
		t.Errorf("path %s", f.url.Path)
	}
	q := f.url.Query()
	if q.Get("container") != "workspace" || q.Get("stdin") != "true" || q.Get("stdout") != "true" || q.Get("tty") != "" {
		t.Errorf("query %v", q)
	}
	wantCmd := []string{"/bin/sh", "-c", `cd '/workspaces/repo' || exit 127; export A='it'\''s'; exec "$@"`, "sh", "ls", "-la"}
	if got := q["command"]; !slices.Equal(got, wantCmd) {
		t.Errorf("command %q, want %q", got, wantCmd)
	}
	if string(f.in) != "input" {
		t.Errorf("stdin %q", f.in)
	}
	// The agent's Pod: its own container, found by role; a plain command
	// goes as it is.
	withExecutor(c, func(so remotecommand.StreamOptions) error { return nil })
	if code, _, err := c.Exec(ctx, plan.ContainerName("demo", plan.RoleAgent), pod.ExecSpec{Cmd: []string{"id"}, User: "1000"}); err != nil || code != 0 {
		t.Errorf("exec in the agent: %d, %v", code, err)
	}
	// The agent runs as 1000: root is refused, not silently ignored.
	_, _, err = c.Exec(ctx, plan.ContainerName("demo", plan.RoleAgent), pod.ExecSpec{Cmd: []string{"id"}, User: "0"})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("exec as root in the agent: %v", err)
	}
	if _, _, err := c.Exec(ctx, plan.ContainerName("demo", plan.RoleGator), pod.ExecSpec{Cmd: []string{"id"}}); !errors.Is(err, pod.ErrNotFound) {
		t.Errorf("exec in a missing container: %v", err)
	}
}

func TestCopyInto(t *testing.T) {
	_, c := applied(t, "demo")
	f := withExecutor(c, func(so remotecommand.StreamOptions) error { return nil })
	if err := c.CopyInto(context.Background(), "copy", "/workspaces", strings.NewReader("TAR")); err != nil {
		t.Fatal(err)
	}
	q := f.url.Query()
	if q.Get("container") != "copy" || !strings.Contains(f.url.Path, "/pods/devaipod-demo/") || string(f.in) != "TAR" {
		t.Errorf("url %s, stdin %q", f.url, f.in)
	}
	if got := q["command"]; !slices.Equal(got, []string{plan.HelperBin, "untar", "--dir", "/workspaces"}) {
		t.Errorf("command %q", got)
	}
	withExecutor(c, func(so remotecommand.StreamOptions) error {
		io.WriteString(so.Stderr, "tar: not found")
		return utilexec.CodeExitError{Err: errors.New("exit"), Code: 127}
	})
	if err := c.CopyInto(context.Background(), "copy", "/workspaces", strings.NewReader("TAR")); err == nil || !strings.Contains(err.Error(), "tar: not found") {
		t.Errorf("failed copy: %v", err)
	}
}

func TestLogs(t *testing.T) {
	cs, c := applied(t, "demo")
	var opts *corev1.PodLogOptions
	cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "log" {
			return false, nil, nil
		}
		opts = a.(k8stesting.GenericAction).GetValue().(*corev1.PodLogOptions)
		return true, &runtime.Unknown{Raw: []byte("line 1\nline 2\n")}, nil
	})
	var out bytes.Buffer
	if err := pod.Logs(context.Background(), c, "demo", plan.RoleProxy, 5, true, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "line 1\nline 2\n" {
		t.Errorf("logs %q", out.String())
	}
	if opts.Container != "proxy" || !opts.Follow || opts.TailLines == nil || *opts.TailLines != 5 {
		t.Errorf("options %+v", opts)
	}
	err := pod.Logs(context.Background(), c, "demo", plan.RoleGator, -1, false, &out)
	if err == nil || !strings.Contains(err.Error(), "has no gator container") {
		t.Errorf("logs of a missing container: %v", err)
	}
}

const kubeconfig = `apiVersion: v1
kind: Config
current-context: one
clusters:
- name: c1
  cluster: {server: "https://one.example.test:6443"}
- name: c2
  cluster: {server: "https://two.example.test"}
users:
- name: u
  user: {token: abc}
contexts:
- name: one
  context: {cluster: c1, user: u, namespace: team}
- name: two
  context: {cluster: c2, user: u}
`

func TestConnect(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config")
	if err := os.WriteFile(file, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", file)
	for _, tc := range []struct {
		o                 Options
		host, ns, context string
	}{
		{Options{}, "https://one.example.test:6443", "team", "one"},
		{Options{Namespace: "mine"}, "https://one.example.test:6443", "mine", "one"},
		{Options{Context: "two"}, "https://two.example.test", "default", "two"},
		{Options{Context: "two", Namespace: "x"}, "https://two.example.test", "x", "two"},
	} {
		c, err := Connect(tc.o)
		if err != nil {
			t.Errorf("%+v: %v", tc.o, err)
			continue
		}
		if c.Host != tc.host || c.Namespace != tc.ns || c.Context != tc.context {
			t.Errorf("%+v: host %s, namespace %s, context %s; want %s, %s, %s", tc.o, c.Host, c.Namespace, c.Context, tc.host, tc.ns, tc.context)
		}
	}
	// An exec URL goes to the context's server.
	c, _ := Connect(Options{Context: "one"})
	u := c.execURL(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team"}}, &corev1.PodExecOptions{Container: "c", Command: []string{"id"}, Stdout: true})
	if u.String() != "https://one.example.test:6443/api/v1/namespaces/team/pods/p/exec?command=id&container=c&stdout=true" {
		t.Errorf("exec URL %s", u)
	}

	_, err := Connect(Options{Context: "three"})
	var ce *ConnectError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `context "three"`) || ce.Hint == "" {
		t.Errorf("unknown context: %v", err)
	}
	t.Setenv("KUBECONFIG", filepath.Join(dir, "missing"))
	t.Setenv("HOME", dir)
	_, err = Connect(Options{})
	if !errors.As(err, &ce) || ce.Hint == "" {
		t.Errorf("no kubeconfig: %v", err)
	}
	// --kubeconfig-like explicit file.
	c, err = Connect(Options{Kubeconfig: file, Context: "two"})
	if err != nil || c.Host != "https://two.example.test" {
		t.Errorf("explicit file: %v", err)
	}
}

func TestAttachRequest(t *testing.T) {
	_, c := applied(t, "demo")
	f := withExecutor(c, func(so remotecommand.StreamOptions) error {
		if so.Stderr != nil || !so.Tty {
			return errors.New("a terminal has one output")
		}
		io.WriteString(so.Stdout, "$ ")
		return utilexec.CodeExitError{Err: errors.New("exit"), Code: 130}
	})
	var out bytes.Buffer
	code, err := c.Attach(context.Background(), plan.ContainerName("demo", plan.RoleWorkspace),
		pod.ExecSpec{Cmd: []string{"bash"}, Stdin: strings.NewReader(""), Output: &out, Stderr: io.Discard}, true)
	if err != nil || code != 130 || out.String() != "$ " {
		t.Fatalf("Attach = %d, %v, %q", code, err, out.String())
	}
	q := f.url.Query()
	if q.Get("tty") != "true" || q.Get("stdin") != "true" || q.Get("stderr") != "" || q.Get("container") != "workspace" {
		t.Errorf("query %v", q)
	}
}

func TestUnreachable(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config")
	// Port 1 on loopback: nothing listens.
	cfg := strings.Replace(kubeconfig, "https://one.example.test:6443", "https://127.0.0.1:1", 1)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Connect(Options{Kubeconfig: file})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Objects(context.Background(), "")
	var ce *ConnectError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "the cluster of context one (https://127.0.0.1:1) does not answer") || ce.Hint == "" {
		t.Errorf("err %v", err)
	}
}

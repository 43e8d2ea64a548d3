package kubeclient

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devaipod/devaipod/internal/gittest"
	"github.com/devaipod/devaipod/internal/helperargs"
	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/kube"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/source"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

// cluster plays the kubelet for Up: it runs the handshake's init
// container once the Pods exist, and makes them ready once the marker is
// written (the seed's last command); execs answer as run says.
type cluster struct {
	t      *testing.T
	cs     *fake.Clientset
	seeded atomic.Bool
	mu     sync.Mutex
	execs  [][]string // container, then the command
	tars   map[string][]string
	run    func(container string, argv []string) int
}

func (k *cluster) executor(method string, u *url.URL) (remotecommand.Executor, error) {
	fe := &fakeExecutor{}
	fe.run = func(so remotecommand.StreamOptions) error {
		q := u.Query()
		argv := q["command"]
		k.mu.Lock()
		k.execs = append(k.execs, append([]string{q.Get("container")}, argv...))
		k.mu.Unlock()
		if so.Stdin != nil && slices.Contains(argv, "untar") {
			var names []string
			tr := tar.NewReader(bytes.NewReader(fe.in))
			for {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					return err
				}
				names = append(names, h.Name)
			}
			k.mu.Lock()
			k.tars[strings.Join(argv, " ")] = names
			k.mu.Unlock()
			if slices.ContainsFunc(argv, func(a string) bool { return strings.Contains(a, kube.SeedMarker) }) {
				k.seeded.Store(true)
			}
		}
		if q.Get("container") == plan.RoleWorkspace && slices.Contains(argv, "cluster-egress") {
			// The workspace reaches its own Pod's canary (clusterCanaries).
			io.WriteString(so.Stdout, reachedSelf)
			return utilexec.CodeExitError{Err: errors.New("exit"), Code: 1}
		}
		if code := k.run(q.Get("container"), argv); code != 0 {
			return utilexec.CodeExitError{Err: errors.New("exit"), Code: code}
		}
		return nil
	}
	return fe, nil
}

// kubelet moves the Pods on until ctx ends.
func (k *cluster) kubelet(ctx context.Context) {
	var seen time.Time
	for ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
		pods, _ := k.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if len(pods.Items) > 0 && seen.IsZero() {
			seen = time.Now()
		}
		if time.Since(seen) < 50*time.Millisecond {
			continue // as a scheduler takes its time
		}
		for _, p := range pods.Items {
			p := p
			if k.seeded.Load() {
				running(&p)(&p.Status)
			} else {
				p.Status.Phase = corev1.PodPending
				p.Status.InitContainerStatuses = nil
				for _, c := range p.Spec.InitContainers {
					p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{Name: c.Name,
						State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
				}
			}
			k.cs.CoreV1().Pods(ns).UpdateStatus(ctx, &p, metav1.UpdateOptions{})
		}
	}
}

func upFixture(t *testing.T, run func(container string, argv []string) int) (*cluster, *Client, *plan.Plan, string) {
	t.Helper()
	repo := gittest.Repo(t)
	ctx := context.Background()
	src, err := source.Resolve(ctx, repo, source.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(t.TempDir(), "repo")
	if err := src.Checkout(ctx, tree); err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Build(plan.PlanInput{Name: "demo", Config: &config.Config{}, Source: src,
		AgentPassword: "pw", PlaceholderSalt: "salt0123", HostEnv: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	cs, c := newFake(t)
	k := &cluster{t: t, cs: cs, tars: map[string][]string{}, run: run}
	c.SetExecutor(k.executor)
	kctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go k.kubelet(kctx)
	return k, c, pl, tree
}

func TestUp(t *testing.T) {
	k, c, pl, tree := upFixture(t, func(string, []string) int { return 0 })
	var steps []string
	var mu sync.Mutex
	err := c.Up(context.Background(), pl, tree, UpOptions{PodTimeout: 10 * time.Second,
		Progress: func(s string) { mu.Lock(); steps = append(steps, s); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	objs, _ := c.Objects(context.Background(), "demo")
	if len(objs) == 0 || objs[0].Kind != pod.KindPod || objs[0].State != "running" {
		t.Fatalf("objects after up: %v", objs)
	}
	// The labels the renderer keeps in its ConfigMap are the pod's.
	if objs[0].Labels[plan.LabelVerify] == "" || objs[0].Labels[plan.LabelRepo] == "" {
		t.Errorf("pod labels %v: want verify's and the repository", objs[0].Labels)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	// The seed: the repository, then the agent's git directory (which
	// writes the marker), both through "prepare".
	var seeds []string
	for _, e := range k.execs {
		if slices.Contains(e, "untar") {
			if e[0] != kube.PrepareContainer {
				t.Errorf("untar in %s", e[0])
			}
			seeds = append(seeds, strings.Join(e[1:], " "))
		}
	}
	if len(seeds) != 2 || strings.Contains(seeds[0], kube.SeedMarker) || !strings.Contains(seeds[1], kube.SeedMarker) {
		t.Fatalf("seed commands %q: the tree, then the git directory with the marker", seeds)
	}
	if files := k.tars[seeds[0]]; !slices.ContainsFunc(files, func(n string) bool { return strings.HasSuffix(n, "README.md") }) {
		t.Errorf("the tree's tar holds %v, no README.md", files)
	}
	if files := k.tars[seeds[1]]; !slices.ContainsFunc(files, func(n string) bool { return strings.Contains(n, "HEAD") }) {
		t.Errorf("the git directory's tar holds %v", files)
	}
	// Then the probe in the workspace and each check where the plan says.
	containers := map[string]bool{}
	for _, e := range k.execs[2:] {
		containers[e[0]] = true
	}
	if !containers[plan.RoleWorkspace] || (len(pl.Checks) > 0 && !containers[plan.RoleAgent]) {
		t.Errorf("execs after the seed went to %v", containers)
	}
	// The battery (and pod.Verify's) gets the workspace Pod's canary,
	// once the workspace reached it itself.
	var batteries, selfRuns int
	for _, e := range k.execs {
		switch {
		case e[0] == plan.RoleWorkspace && slices.Contains(e, "cluster-egress"):
			selfRuns++
		case e[0] == plan.RoleAgent && slices.Contains(e, "verify"):
			batteries++
			if !strings.Contains(strings.Join(e, " "), "--cluster-canary 10.244.0.7:3129") {
				t.Errorf("the battery ran as %q: want the workspace Pod's canary", e)
			}
		}
	}
	if batteries == 0 || selfRuns != batteries {
		t.Errorf("%d batteries, %d runs in the workspace: want one of each per battery", batteries, selfRuns)
	}
	if len(k.execs) != 2+1+len(pl.Checks)+selfRuns {
		t.Errorf("%d execs, want the seed's 2, the probe, %d checks and %d runs of cluster-egress in the workspace: %q", len(k.execs), len(pl.Checks), selfRuns, k.execs)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.ContainsFunc(steps, func(s string) bool { return strings.HasPrefix(s, "waiting: ") }) {
		t.Errorf("steps %q: no progress of the wait", steps)
	}
	// Up again: the pod exists.
	if err := c.Up(context.Background(), pl, tree, UpOptions{}); !errors.Is(err, pod.ErrExists) {
		t.Errorf("second up: %v", err)
	}
}

func TestUpRemovesAllOnFailure(t *testing.T) {
	_, c, pl, tree := upFixture(t, func(container string, argv []string) int {
		if slices.Contains(argv, "verify") {
			return 1 // verify --fast finds a hole
		}
		return 0
	})
	if len(pl.Checks) == 0 {
		t.Fatal("the fixture's plan has no checks: this test needs verify --fast among them")
	}
	err := c.Up(context.Background(), pl, tree, UpOptions{PodTimeout: 10 * time.Second})
	var ce *pod.CheckError
	if !errors.As(err, &ce) {
		t.Fatalf("err %v, want a CheckError", err)
	}
	if objs, _ := c.Objects(context.Background(), "demo"); len(objs) != 0 {
		t.Errorf("left after a failed up: %v", objs)
	}
}

func TestUpKeepOnFailure(t *testing.T) {
	_, c, pl, tree := upFixture(t, func(container string, argv []string) int {
		if container == plan.RoleWorkspace {
			return 1 // the agent's server never answers
		}
		return 0
	})
	err := c.Up(context.Background(), pl, tree, UpOptions{PodTimeout: 10 * time.Second, KeepOnFailure: true})
	var re *pod.ReadyError
	if !errors.As(err, &re) {
		t.Fatalf("err %v, want a ReadyError", err)
	}
	if re.Logs != "fake logs" {
		t.Errorf("logs %q: want the agent's", re.Logs)
	}
	if objs, _ := c.Objects(context.Background(), "demo"); len(objs) == 0 {
		t.Error("--keep-on-failure removed the pod")
	}
}

// TestUpRefusesKeptVolumes: after delete --keep-volumes, an up of the name
// refuses, as podman refuses a volume that exists, and leaves the kept
// claims alone (apply would have adopted them, and a failed up's rollback
// deleted them).
func TestUpRefusesKeptVolumes(t *testing.T) {
	k, c, pl, tree := upFixture(t, func(string, []string) int { return 0 })
	ctx := context.Background()
	if err := c.Up(ctx, pl, tree, UpOptions{PodTimeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := pod.Delete(ctx, c, "demo", true); err != nil {
		t.Fatal(err)
	}
	kept, _ := k.cs.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if len(kept.Items) == 0 {
		t.Fatal("delete --keep-volumes kept no claim")
	}
	err := c.Up(ctx, pl, tree, UpOptions{PodTimeout: 10 * time.Second})
	if !errors.Is(err, pod.ErrExists) || !strings.Contains(err.Error(), "keep-volumes") {
		t.Errorf("up over kept claims: %v; want ErrExists naming them", err)
	}
	after, _ := k.cs.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if len(after.Items) != len(kept.Items) {
		t.Errorf("%d claims after the refused up; want the %d kept", len(after.Items), len(kept.Items))
	}
	if pods, _ := k.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); len(pods.Items) > 0 {
		t.Errorf("the refused up made %d Pods", len(pods.Items))
	}
}

// TestUpClaimsTheName: the name is claimed by a create, so that an up that
// lost a race for it (another host's, between the existence check and the
// apply) touches nothing of the winner's.
func TestUpClaimsTheName(t *testing.T) {
	k, c, pl, tree := upFixture(t, func(string, []string) int { return 0 })
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: kube.MetaConfigMap("demo"), Namespace: ns,
		Labels: map[string]string{"other": "up"}}}
	if _, err := k.cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Up(ctx, pl, tree, UpOptions{}); !errors.Is(err, pod.ErrExists) {
		t.Fatalf("err %v, want ErrExists", err)
	}
	if _, err := k.cs.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the winner's claim is gone: %v", err)
	}
	for _, a := range k.cs.Actions() {
		if a.GetVerb() == "patch" || a.GetVerb() == "delete" {
			t.Errorf("the loser did %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

// reachedSelf is the workspace's own run of cluster-egress: it reaches
// its Pod's canary over TCP and UDP, as it must.
const reachedSelf = `{"rows":[{"id":"cluster-egress","result":"FAIL","detail":"tcp 10.244.0.7:3129: reached (the canary answered); udp 10.244.0.7:3129: reached (port unreachable came back: the datagram arrived)"}]}`

// checkExecs plays the exec subresource for the cluster checks: the
// workspace's cluster-egress run answers self, every other command out,
// each with exit 1 (a FAIL row); it records every command, container
// first.
type checkExecs struct {
	mu    sync.Mutex
	execs [][]string
}

func (x *checkExecs) install(c *Client, self, out string) {
	c.SetExecutor(func(method string, u *url.URL) (remotecommand.Executor, error) {
		q := u.Query()
		x.mu.Lock()
		x.execs = append(x.execs, append([]string{q.Get("container")}, q["command"]...))
		x.mu.Unlock()
		return &fakeExecutor{run: func(so remotecommand.StreamOptions) error {
			if q.Get("container") == plan.RoleWorkspace && slices.Contains(q["command"], "cluster-egress") {
				io.WriteString(so.Stdout, self)
			} else {
				io.WriteString(so.Stdout, out)
			}
			return utilexec.CodeExitError{Err: errors.New("exit"), Code: 1}
		}}, nil
	})
}

// withAddress gives the applied Pods of pod demo their addresses, as the
// kubelet would: the workspace's 10.244.0.7 (and ips, if any), the agent's
// 10.244.0.8.
func withAddress(t *testing.T, cs *fake.Clientset, ips ...string) {
	t.Helper()
	setStatus(t, cs, plan.PodName("demo"), func(s *corev1.PodStatus) {
		s.PodIP = "10.244.0.7"
		s.PodIPs = []corev1.PodIP{{IP: "10.244.0.7"}}
		for _, ip := range ips {
			s.PodIPs = append(s.PodIPs, corev1.PodIP{IP: ip})
		}
	})
	setStatus(t, cs, plan.ContainerName("demo", plan.RoleAgent), func(s *corev1.PodStatus) {
		s.PodIP, s.PodIPs = "10.244.0.8", []corev1.PodIP{{IP: "10.244.0.8"}}
	})
}

// TestClusterChecks: the battery's rows that need podman's agent without
// an interface FAIL on a cluster by design. tcp-direct and udp-direct pass
// there when cluster-egress, against the workspace Pod's canary that the
// workspace itself reached, PASSed: the network dropped the agent's TCP
// and UDP. The others pass when a deny-all policy selects the agent;
// nothing else does.
func TestClusterChecks(t *testing.T) {
	row := func(id, result, detail string) string {
		return `{"id":"` + id + `","attack":"a","expected":"e","result":"` + result + `","detail":"` + detail + `"}`
	}
	notTried := "not tried: this network namespace has a route (x), so a packet would leave"
	policyOnly := []string{row("net-interfaces", "FAIL", "up besides loopback: eth0"), row("net-routes", "FAIL", "routes: 0.0.0.0/0 via 10.0.0.1"),
		row("dns-direct", "FAIL", notTried), row("trusted-env", "PASS", "none")}
	direct := []string{row("tcp-direct", "FAIL", notTried), row("udp-direct", "FAIL", notTried)}
	dropped := row("cluster-egress", "PASS", "tcp 10.244.0.7:3129: not reached (i/o timeout); udp 10.244.0.7:3129: not reached (no answer and no refusal within 1s)")
	reached := row("cluster-egress", "FAIL", "tcp 10.244.0.7:3129: reached (the canary answered); udp 10.244.0.7:3129: not reached (no answer and no refusal within 1s)")
	rows := func(rs ...[]string) string { return `{"rows":[` + strings.Join(slices.Concat(rs...), ",") + `]}` }
	byDesign := rows(policyOnly, direct, []string{dropped})

	verify := plan.Check{Container: plan.ContainerName("demo", plan.RoleAgent), What: "the fast verify battery",
		Command: plan.HelperCommand(helperargs.Verify{Fast: true})}
	egress := plan.Check{Container: plan.ContainerName("demo", plan.RoleAgent), What: "the agent has no direct way out",
		Command: plan.HelperCommand(helperargs.EgressCheck{Canary: "127.0.0.1:1"})}
	for _, tt := range []struct {
		name   string
		check  plan.Check
		out    string
		self   string                      // the workspace's own cluster-egress run
		ips    []string                    // the workspace Pod's addresses besides 10.244.0.7; "none": no address
		drop   bool                        // the policy is gone
		extra  *networkingv1.NetworkPolicy // another policy in the namespace
		want   string                      // "" passes with a note; else in the CheckError
		shown  []string                    // the rows cluster-egress stood in for
		policy []string                    // the rows the policy alone answers for
	}{
		{name: "by design", check: verify, out: byDesign,
			shown: []string{"tcp-direct", "udp-direct"}, policy: []string{"net-interfaces", "net-routes", "dns-direct"}},
		{name: "dual stack: ipv6-direct shown too", check: verify, ips: []string{"fd00:10:244::7"},
			out:   rows(policyOnly, direct, []string{row("ipv6-direct", "FAIL", notTried), dropped}),
			shown: []string{"tcp-direct", "udp-direct", "ipv6-direct"}, policy: []string{"net-interfaces", "net-routes", "dns-direct"}},
		{name: "ipv4 only: ipv6-direct is the policy's", check: verify,
			out:   rows(policyOnly, direct, []string{row("ipv6-direct", "FAIL", notTried), dropped}),
			shown: []string{"tcp-direct", "udp-direct"}, policy: []string{"net-interfaces", "net-routes", "dns-direct", "ipv6-direct"}},
		{name: "the network lets the agent reach the workspace", check: verify, out: rows(policyOnly, direct, []string{reached}),
			want: "FAIL cluster-egress (a): tcp 10.244.0.7:3129: reached"},
		{name: "no cluster-egress row", check: verify, out: rows(policyOnly, direct),
			want: "did not show that the network drops it"},
		{name: "cluster-egress did not run", check: verify, out: rows(policyOnly, direct, []string{row("cluster-egress", "N-A", "no --cluster-canary given")}),
			want: "FAIL tcp-direct"},
		{name: "the workspace does not reach its own canary", check: verify, out: byDesign,
			self: `{"rows":[` + row("cluster-egress", "FAIL", "tcp 10.244.0.7:3129: not reached (connection refused); udp 10.244.0.7:3129: reached (port unreachable came back)") + `]}`,
			want: "does not answer at its own Pod's addresses"},
		{name: "the workspace has no address", check: verify, ips: []string{"none"},
			out: rows(policyOnly, direct, []string{row("cluster-egress", "N-A", "no --cluster-canary given")}), want: "no address yet"},
		{name: "another row fails", check: verify, out: rows(policyOnly, direct, []string{dropped, row("proc-mem", "FAIL", "read it")}), want: "FAIL proc-mem (a): read it"},
		{name: "a direct probe got out", check: verify, out: rows([]string{row("tcp-direct", "FAIL", "reached 192.0.2.1:9"), dropped}), want: "FAIL tcp-direct"},
		{name: "no policy", check: verify, out: byDesign, drop: true, want: "no NetworkPolicy denies"},
		{name: "a namespace policy opens egress for every Pod", check: verify, out: byDesign,
			extra: namespacePolicy(metav1.LabelSelector{}, []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}}}, nil),
			want:  "NetworkPolicy allow-out also selects the agent's Pod devaipod-demo-agent and allows it egress"},
		{name: "a namespace policy lets DNS out", check: egress, out: "FAIL no interface but loopback: eth0 is up\nok   no direct connection to 127.0.0.1:1",
			extra: namespacePolicy(metav1.LabelSelector{}, []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: new(intstr.FromInt32(53))}}}}, nil),
			want:  "allows it egress"},
		{name: "a namespace policy lets others in", check: verify, out: byDesign,
			extra: namespacePolicy(metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: plan.LabelPod, Operator: metav1.LabelSelectorOpExists}}}, nil, []networkingv1.NetworkPolicyIngressRule{{}}),
			want:  "allows it ingress"},
		{name: "a namespace policy for other Pods", check: verify, out: byDesign,
			extra: namespacePolicy(metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, []networkingv1.NetworkPolicyEgressRule{{}}, nil),
			shown: []string{"tcp-direct", "udp-direct"}, policy: []string{"net-interfaces", "net-routes", "dns-direct"}},
		{name: "not json", check: verify, out: "garbage", want: "garbage"},
		{name: "egress by design", check: egress, out: "FAIL no interface but loopback: eth0 is up\nok   no direct connection to 127.0.0.1:1",
			policy: []string{"no interface but loopback"}},
		{name: "egress reached the canary", check: egress, out: "FAIL no interface but loopback: eth0\nFAIL no direct connection to 127.0.0.1:1: reached", want: "reached"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs, c := applied(t, "demo")
			if !slices.Equal(tt.ips, []string{"none"}) {
				withAddress(t, cs, tt.ips...)
			}
			if tt.drop {
				cs.NetworkingV1().NetworkPolicies(ns).Delete(context.Background(), "devaipod-demo-agent-deny-all", metav1.DeleteOptions{})
			}
			if tt.extra != nil {
				if _, err := cs.NetworkingV1().NetworkPolicies(ns).Create(context.Background(), tt.extra, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			var x checkExecs
			x.install(c, cmp.Or(tt.self, reachedSelf), tt.out)
			note, err := c.runClusterCheck(context.Background(), "demo", tt.check)
			if tt.check.What == verify.What && len(x.execs) == 2 {
				self, battery := x.execs[0], x.execs[1]
				wantCanaries := []string{"--cluster-canary", "10.244.0.7:3129"}
				if len(tt.ips) > 0 {
					wantCanaries = append(wantCanaries, "--cluster-canary", "[fd00:10:244::7]:3129")
				}
				if self[0] != plan.RoleWorkspace || !strings.Contains(strings.Join(self, " "), strings.Join(wantCanaries, " ")+" --only cluster-egress") {
					t.Errorf("the workspace's own run: %q", self)
				}
				if battery[0] != plan.RoleAgent || !slices.Equal(battery[len(battery)-len(wantCanaries):], wantCanaries) || !slices.Contains(battery, "json") {
					t.Errorf("the battery ran as %q: want JSON and the workspace's addresses %q", battery, wantCanaries)
				}
			}
			if tt.want == "" {
				if err != nil || note == nil || !slices.Equal(note.Shown, tt.shown) || !slices.Equal(note.Rows, tt.policy) {
					t.Fatalf("note %+v, err %v: want a pass with a note of %q and %q", note, err, tt.shown, tt.policy)
				}
				s := note.String()
				if len(tt.shown) > 0 && (!strings.Contains(s, "enforced") || !strings.Contains(s, "10.244.0.7:3129") || !slices.Equal(note.Canaries[:1], []string{"10.244.0.7:3129"})) {
					t.Errorf("note %q: want what cluster-egress showed, and where", s)
				}
				if len(tt.policy) > 0 && !strings.Contains(s, "NetworkPolicy") {
					t.Errorf("note %q: want what rests on the policy", s)
				}
				return
			}
			var ce *pod.CheckError
			if !errors.As(err, &ce) || !strings.Contains(ce.Output, tt.want) || note != nil {
				t.Errorf("err %v: want a CheckError with %q", err, tt.want)
			}
		})
	}
}

// TestExecAddsClusterCanaries: the battery in the agent's own Pod, as
// pod.Verify runs it (devaipod verify), gets the workspace Pod's canary
// addresses, once the workspace reached them itself; other commands, and
// a battery that names its own, go as they are.
func TestExecAddsClusterCanaries(t *testing.T) {
	ctx := context.Background()
	cs, c := applied(t, "demo")
	withAddress(t, cs)
	var x checkExecs
	x.install(c, reachedSelf, `{"rows":[]}`)
	agent := plan.ContainerName("demo", plan.RoleAgent)
	battery := append(plan.HelperCommand(helperargs.Verify{Output: "json", SecretHashesFile: "-"}), "--workspace", "/workspaces/repo")
	if _, _, err := c.Exec(ctx, agent, pod.ExecSpec{Cmd: battery, Stdin: strings.NewReader("hashes\n")}); err != nil {
		t.Fatal(err)
	}
	if len(x.execs) != 2 || x.execs[0][0] != plan.RoleWorkspace || !slices.Equal(x.execs[1][1:], append(slices.Clone(battery), "--cluster-canary", "10.244.0.7:3129")) {
		t.Errorf("execs %q: want the workspace's own run, then the battery with --cluster-canary", x.execs)
	}
	x.execs = nil
	for _, cmd := range [][]string{{"id"}, append(slices.Clone(battery), "--cluster-canary", "10.0.0.1:1")} {
		c.Exec(ctx, agent, pod.ExecSpec{Cmd: cmd})
	}
	c.Exec(ctx, plan.ContainerName("demo", plan.RoleWorkspace), pod.ExecSpec{Cmd: battery})
	if len(x.execs) != 3 || slices.ContainsFunc(x.execs, func(e []string) bool { return slices.Contains(e, "--only") }) {
		t.Errorf("execs %q: want three, as they were", x.execs)
	}
	// A workspace that does not reach its own canary: verify cannot say
	// anything of the agent's policy, and says why.
	x.install(c, `{"rows":[]}`, `{"rows":[]}`)
	if _, _, err := c.Exec(ctx, agent, pod.ExecSpec{Cmd: battery}); err == nil || !strings.Contains(err.Error(), "cluster-egress") {
		t.Errorf("err %v: want cluster-egress's", err)
	}
}

// TestUpFailedClaimRemovesOnlyItsOwn: a claim whose create failed, yet was
// made (a cancelled context), is removed again, so the name is free; a
// claim another up made is left.
func TestUpFailedClaimRemovesOnlyItsOwn(t *testing.T) {
	for _, othersFirst := range []bool{false, true} {
		k, c, pl, tree := upFixture(t, func(string, []string) int { return 0 })
		ctx := context.Background()
		k.cs.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
			cm := a.(k8stesting.CreateAction).GetObject().(*corev1.ConfigMap).DeepCopy()
			if othersFirst {
				cm.Annotations = map[string]string{claimAnnotation: "another up's"}
			}
			if err := k.cs.Tracker().Add(cm); err != nil {
				return true, nil, err
			}
			return true, nil, context.Canceled
		})
		if err := c.Up(ctx, pl, tree, UpOptions{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("othersFirst=%v: err %v, want the create's", othersFirst, err)
		}
		_, err := k.cs.CoreV1().ConfigMaps(ns).Get(ctx, kube.MetaConfigMap("demo"), metav1.GetOptions{})
		if left := err == nil; left != othersFirst {
			t.Errorf("othersFirst=%v: the claim is there: %v", othersFirst, left)
		}
	}
}

// namespacePolicy is a NetworkPolicy of the namespace's own, not
// devaipod's, named allow-out.
func namespacePolicy(sel metav1.LabelSelector, egress []networkingv1.NetworkPolicyEgressRule, ingress []networkingv1.NetworkPolicyIngressRule) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-out", Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: sel, Egress: egress, Ingress: ingress}}
	if egress != nil {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
	}
	if ingress != nil {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
	}
	return np
}

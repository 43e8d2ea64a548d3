package kubeclient

import (
	"archive/tar"
	"bytes"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
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
	if len(k.execs) != 2+1+len(pl.Checks) {
		t.Errorf("%d execs, want the seed's 2, the probe and %d checks: %q", len(k.execs), len(pl.Checks), k.execs)
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
		t.Skip("the plan has no checks")
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

// TestClusterChecks: the battery's rows that need podman's agent without
// an interface FAIL on a cluster by design and pass there when a deny-all
// policy selects the agent; nothing else does.
func TestClusterChecks(t *testing.T) {
	row := func(id, result, detail string) string {
		return `{"id":"` + id + `","attack":"a","expected":"e","result":"` + result + `","detail":"` + detail + `"}`
	}
	byDesign := []string{row("net-interfaces", "FAIL", "up besides loopback: eth0"), row("net-routes", "FAIL", "routes: 0.0.0.0/0 via 10.0.0.1"),
		row("tcp-direct", "FAIL", "not tried: this network namespace has a route (x), so a packet would leave"), row("trusted-env", "PASS", "none")}
	verify := plan.Check{Container: plan.ContainerName("demo", plan.RoleAgent), What: "the fast verify battery",
		Command: plan.HelperCommand(helperargs.Verify{Fast: true})}
	egress := plan.Check{Container: plan.ContainerName("demo", plan.RoleAgent), What: "the agent has no direct way out",
		Command: plan.HelperCommand(helperargs.EgressCheck{Canary: "127.0.0.1:1"})}
	for _, tt := range []struct {
		name  string
		check plan.Check
		out   string
		drop  bool   // the policy is gone
		want  string // "" passes with a note; else in the CheckError
	}{
		{"by design", verify, `{"rows":[` + strings.Join(byDesign, ",") + `]}`, false, ""},
		{"another row fails", verify, `{"rows":[` + strings.Join(append(byDesign, row("proc-mem", "FAIL", "read it")), ",") + `]}`, false, "FAIL proc-mem (a): read it"},
		{"a direct probe got out", verify, `{"rows":[` + row("tcp-direct", "FAIL", "reached 192.0.2.1:9") + `]}`, false, "FAIL tcp-direct"},
		{"no policy", verify, `{"rows":[` + strings.Join(byDesign, ",") + `]}`, true, "no NetworkPolicy denies"},
		{"not json", verify, "garbage", false, "garbage"},
		{"egress by design", egress, "FAIL no interface but loopback: eth0 is up\nok   no direct connection to 127.0.0.1:1", false, ""},
		{"egress reached the canary", egress, "FAIL no interface but loopback: eth0\nFAIL no direct connection to 127.0.0.1:1: reached", false, "reached"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs, c := applied(t, "demo")
			if tt.drop {
				cs.NetworkingV1().NetworkPolicies(ns).Delete(context.Background(), "devaipod-demo-agent-deny-all", metav1.DeleteOptions{})
			}
			f := withExecutor(c, func(so remotecommand.StreamOptions) error {
				io.WriteString(so.Stdout, tt.out)
				return utilexec.CodeExitError{Err: errors.New("exit"), Code: 1}
			})
			note, err := c.runClusterCheck(context.Background(), "demo", tt.check)
			if tt.check.What == verify.What {
				if q := f.url.Query()["command"]; !slices.Equal(q[len(q)-2:], []string{"--output", "json"}) {
					t.Errorf("the battery ran as %q: want JSON", q)
				}
			}
			if tt.want == "" {
				if err != nil || note == nil || !strings.Contains(note.String(), "NetworkPolicy") {
					t.Errorf("note %v, err %v: want a pass with a note", note, err)
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

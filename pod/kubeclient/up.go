package kubeclient

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/kube"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/source"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/remotecommand"
)

// UpOptions tune Up. Zero values mean the defaults.
type UpOptions struct {
	// Render says how the plan becomes objects (the namespace is the
	// client's).
	Render kube.Options
	// PodTimeout bounds each wait for the Pods: until the handshake's
	// init container runs, and until they are ready (scheduling and
	// image pulls included). Default 5 minutes.
	PodTimeout time.Duration
	// ReadyTimeout bounds the wait for the agent's server (default 60s).
	ReadyTimeout time.Duration
	// KeepOnFailure leaves what was applied for inspection.
	KeepOnFailure bool
	// Progress hears each step, Warn what the user should know, Output
	// the lifecycle commands' output; each may be nil.
	Progress func(string)
	Warn     func(string)
	Output   io.Writer
}

// Up makes the plan's pod on the cluster, the way pod.Up does on podman:
// it renders the plan (pod/kube), applies the objects (Apply), waits for
// the handshake's init container, streams the repository (the clone in
// tree that the plan was built from, see pod.Request.Apply) and the
// agent's git directory into it, waits for the Pods to be ready, then runs what pod.Up runs after it
// starts a pod: the readiness probe and the lifecycle commands in the
// workspace, the plan's checks (verify --fast in the agent), the task.
//
// It is all or nothing: on any failure, including cancellation of ctx,
// it deletes what it applied (unless opts.KeepOnFailure), Pods first and
// their NetworkPolicies once they are gone.
//
// The checks are judged as on podman but for the battery's rows that
// need podman's agent without an interface, which FAIL on a cluster by
// design (see byDesignOnACluster): the direct TCP and UDP probes pass
// when cluster-egress showed that the network drops the agent's traffic
// to the workspace's Pod, the others when a deny-all NetworkPolicy
// selects the agent's Pod; opts.Warn hears which, and what is not shown.
func (c *Client) Up(ctx context.Context, pl *plan.Plan, tree string, opts UpOptions) (err error) {
	progress := func(s string) {
		if opts.Progress != nil {
			opts.Progress(s)
		}
	}
	warn := func(s string) {
		if opts.Warn != nil {
			opts.Warn(s)
		}
	}
	opts.PodTimeout = cmp.Or(opts.PodTimeout, 5*time.Minute)
	opts.ReadyTimeout = cmp.Or(opts.ReadyTimeout, 60*time.Second)

	ro := opts.Render
	ro.Namespace = c.Namespace
	m, err := kube.Render(pl, ro)
	if err != nil {
		return fmt.Errorf("render pod %s: %w", pl.Name, err)
	}
	for _, w := range m.Warnings {
		warn(w)
	}
	if local := localImages(m); len(local) > 0 {
		warn(fmt.Sprintf("the nodes pull every image themselves; %s exist(s) only on this host unless loaded onto the nodes (kind load, minikube image load) or pushed to a registry they reach (--image, --helper-image)",
			strings.Join(local, ", ")))
	}
	if exists, err := c.PodExists(ctx, pl.Pod.Name); err != nil {
		return err
	} else if exists {
		return fmt.Errorf("pod %s: %w", pl.Name, pod.ErrExists)
	}
	// Claims kept by delete --keep-volumes: apply would adopt them (and a
	// rollback delete them), where podman refuses a volume that exists.
	kept, err := c.cs.CoreV1().PersistentVolumeClaims(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector(pl.Name), Limit: 1})
	if err != nil {
		return err
	}
	if len(kept.Items) > 0 {
		why := "kept by delete --keep-volumes?"
		if kept.Items[0].DeletionTimestamp != nil {
			why = "being deleted: try again in a moment"
		}
		return fmt.Errorf("pod %s: its volumes are still there (PersistentVolumeClaim %s, %s): %w",
			pl.Name, kept.Items[0].Name, why, pod.ErrExists)
	}

	// The name is claimed with a create, which the API server does once:
	// of two ups of one name (from any host), one gets ErrExists and
	// touches nothing. Apply then takes the claim over with the rest.
	claim, err := c.claim(ctx, m, pl.Name)
	if err != nil {
		return err
	}
	progress(fmt.Sprintf("applying %d objects in namespace %s", len(m.Objects()), c.Namespace))
	refs, err := c.Apply(ctx, m.Objects(), progress)
	if err != nil {
		// Apply removed what it applied; the claim too, unless it failed
		// before it came to it.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = c.deleteOne(cctx, claim)
		return err
	}
	defer func() {
		if err == nil || opts.KeepOnFailure {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if cerr := c.deleteRefs(cctx, refs); cerr != nil {
			err = fmt.Errorf("%w (and removing what was applied failed: %v)", err, cerr)
		}
	}()
	pods := 1
	if m.Agent != nil {
		pods = 2
	}
	waitLine := func(s string) { progress("waiting: " + s) }
	progress("waiting for the Pods to be scheduled and their images pulled")
	if err := c.Wait(ctx, pl.Name, pods, "ready for the copy", InitRunning(m.Seed.Container), opts.PodTimeout, waitLine); err != nil {
		return err
	}
	progress("copying the repository into the workspace volume")
	if err := c.seed(ctx, m.Seed, pl, tree); err != nil {
		return err
	}
	progress("waiting for the Pods to be ready")
	if err := c.Wait(ctx, pl.Name, pods, "ready", Ready, opts.PodTimeout, waitLine); err != nil {
		return err
	}
	return c.afterStart(ctx, pl, opts, progress)
}

// claim creates the pod's meta ConfigMap (pod/kube's, which every
// rendered pod has): ErrExists when it exists.
func (c *Client) claim(ctx context.Context, m *kube.Manifests, short string) (Ref, error) {
	name := kube.MetaConfigMap(short)
	i := slices.IndexFunc(m.ConfigMaps, func(cm *corev1.ConfigMap) bool { return cm.Name == name })
	if i < 0 {
		return Ref{}, fmt.Errorf("render pod %s: no ConfigMap %s", short, name)
	}
	cm := m.ConfigMaps[i].DeepCopy()
	cm.Namespace = c.Namespace
	// A create that fails otherwise than AlreadyExists (a cancelled
	// context, a dropped connection) may have been made all the same: a
	// random annotation tells this call's claim, which is removed again,
	// from another up's, which is left alone.
	var nonce [8]byte
	rand.Read(nonce[:])
	claimID := hex.EncodeToString(nonce[:])
	cm.Annotations = maps.Clone(cm.Annotations)
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[claimAnnotation] = claimID
	_, err := c.cs.CoreV1().ConfigMaps(c.Namespace).Create(ctx, cm, metav1.CreateOptions{FieldManager: FieldManager})
	if apierrors.IsAlreadyExists(err) {
		return Ref{}, fmt.Errorf("pod %s: %w", short, pod.ErrExists)
	}
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if got, gerr := c.cs.CoreV1().ConfigMaps(c.Namespace).Get(cctx, name, metav1.GetOptions{}); gerr == nil && got.Annotations[claimAnnotation] == claimID {
			_ = c.deleteOne(cctx, Ref{Kind: "ConfigMap", Name: name})
		}
		return Ref{}, fmt.Errorf("create ConfigMap %s: %w", name, err)
	}
	return Ref{Kind: "ConfigMap", Name: name}, nil
}

// claimAnnotation is on the meta ConfigMap an up creates to claim a pod's
// name: a random id of that up's.
const claimAnnotation = "io.devaipod/claim"

// localImages are the images of m's Pods under localhost/: podman's name
// for images built on this host.
func localImages(m *kube.Manifests) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range []*corev1.Pod{m.Workspace, m.Agent} {
		if p == nil {
			continue
		}
		for _, ct := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
			if strings.HasPrefix(ct.Image, "localhost/") && !seen[ct.Image] {
				seen[ct.Image] = true
				out = append(out, ct.Image)
			}
		}
	}
	return out
}

// seed is the engine's side of the handshake (pod/kube's package doc):
// the repository's files, then the agent's git directory, which ends with
// the marker that lets the Pods go on.
func (c *Client) seed(ctx context.Context, s kube.Seed, pl *plan.Plan, tree string) error {
	p, err := c.cs.CoreV1().Pods(c.Namespace).Get(ctx, s.Pod, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("copy the repository: %w", err)
	}
	project := filepath.Base(pl.Workdir)
	err = c.pipe(ctx, p, s.Container, s.Workspace, func(w io.Writer) error {
		return source.TarTree(ctx, w, tree, project, plan.AgentUID, plan.AgentGID, pl.Placeholders)
	})
	if err != nil {
		return fmt.Errorf("copy the repository into %s/%s: %w", s.Pod, s.Container, err)
	}
	// Next to the clone, in the folder pod.Create made for it: if up is
	// killed, gc removes it with the clone (see pod.MakeTempDir).
	gitDir, err := os.MkdirTemp(filepath.Dir(tree), "agent-git-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(gitDir)
	if err := source.AgentGitDir(ctx, tree, gitDir, pl.MaskPatterns); err != nil {
		return fmt.Errorf("make the agent's git directory: %w", err)
	}
	// The tar's root entry is the volume's root: MkdirTemp's 0700 would
	// shut out the gator, another uid, which pushes the agent's commits.
	if err := os.Chmod(gitDir, 0o755); err != nil {
		return err
	}
	err = c.pipe(ctx, p, s.Container, s.AgentGit, func(w io.Writer) error {
		return source.TarGitDir(w, gitDir, plan.AgentUID, plan.AgentGID)
	})
	if err != nil {
		return fmt.Errorf("copy the agent's git directory into %s/%s: %w", s.Pod, s.Container, err)
	}
	return nil
}

// pipe runs argv in a container of p with what write writes on its
// standard input.
func (c *Client) pipe(ctx context.Context, p *corev1.Pod, container string, argv []string, write func(io.Writer) error) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(write(pw)) }()
	var out pod.SyncBuffer
	code, err := c.stream(ctx, p, container, argv, remotecommand.StreamOptions{Stdin: pr, Stdout: &out, Stderr: &out})
	pr.CloseWithError(errors.New("the copy ended")) // unblocks the writer if the exec stopped early
	if err == nil && code != 0 {
		err = fmt.Errorf("%s exited %d: %s", strings.Join(argv, " "), code, strings.TrimSpace(out.String()))
	}
	return err
}

// afterStart is pod.AfterStart with the cluster's checks, whose notes
// (what the cluster does not enforce) are said once they have run.
func (c *Client) afterStart(ctx context.Context, pl *plan.Plan, opts UpOptions, progress func(string)) error {
	notes := make([]*ClusterNote, len(pl.Checks))
	err := pod.AfterStart(ctx, c, pl, pod.AfterStartOptions{ReadyTimeout: opts.ReadyTimeout, Output: opts.Output, Progress: progress,
		RunCheck: func(i int, ch plan.Check) (err error) {
			notes[i], err = c.runClusterCheck(ctx, pl.Name, ch)
			return err
		}})
	for _, n := range notes {
		if n != nil && opts.Warn != nil {
			opts.Warn(n.String())
		}
	}
	return err
}

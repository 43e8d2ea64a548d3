package kubeclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/plan"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var _ pod.Engine = (*Client)(nil)

// NotSupportedError says what pod asked of the engine has no meaning on
// a cluster; Hint says what to do instead (cmd prints it). It unwraps to
// errors.ErrUnsupported.
type NotSupportedError struct {
	Op   string
	Hint string
}

func (e *NotSupportedError) Error() string { return e.Op + " is not supported on kubernetes" }
func (e *NotSupportedError) Unwrap() error { return errors.ErrUnsupported }

func podmanOnly(op string) error {
	return &NotSupportedError{Op: op, Hint: "the cluster pulls the images the manifests name; build and push an image, then pass it with --image"}
}

// ImageConfig implements pod.Engine: the cluster's nodes pull images, and
// the API says nothing of what an image sets.
func (c *Client) ImageConfig(context.Context, string) (plan.ImageConfig, error) {
	return plan.ImageConfig{}, podmanOnly("reading an image's configuration")
}

// PullImage implements pod.Engine: the nodes pull.
func (c *Client) PullImage(context.Context, string, pod.PullOptions, io.Writer) error {
	return podmanOnly("pulling an image")
}

// BuildImage implements pod.Engine: nothing builds on a cluster.
func (c *Client) BuildImage(context.Context, pod.BuildSpec, io.Writer) (string, error) {
	return "", podmanOnly("building an image")
}

// Info implements pod.Engine with the API server's version; the rest of
// plan.HostInfo is podman's.
func (c *Client) Info(context.Context) (plan.HostInfo, error) {
	v, err := c.cs.Discovery().ServerVersion()
	if err != nil {
		return plan.HostInfo{}, err
	}
	return plan.HostInfo{Version: v.GitVersion, CgroupVersion: "v2"}, nil
}

func oneByOne(op string) error {
	return &NotSupportedError{Op: op, Hint: "on kubernetes, up renders the whole plan and applies it at once (kubeclient.Client.Apply)"}
}

// CreatePod implements pod.Engine: see Apply.
func (c *Client) CreatePod(context.Context, plan.PodSpec) error { return oneByOne("creating a pod") }

// CreateVolume implements pod.Engine: see Apply.
func (c *Client) CreateVolume(context.Context, plan.VolumeSpec) error {
	return oneByOne("creating a volume")
}

// CreateSecret implements pod.Engine: see Apply.
func (c *Client) CreateSecret(context.Context, plan.SecretSpec) error {
	return oneByOne("creating a secret")
}

// CreateContainer implements pod.Engine: see Apply.
func (c *Client) CreateContainer(context.Context, string, plan.ContainerSpec) error {
	return oneByOne("creating a container")
}

// StartPod implements pod.Engine: a Kubernetes Pod that has stopped does
// not start again.
func (c *Client) StartPod(context.Context, string) error {
	return &NotSupportedError{Op: "starting a pod", Hint: "a Pod on a cluster runs until it is deleted: `devaipod delete NAME` and `devaipod up` again (its volumes stay with --keep-volumes)"}
}

// StopPod implements pod.Engine: a Kubernetes Pod is not stopped and
// started again; deleting it is the only stop.
func (c *Client) StopPod(context.Context, string, uint) error {
	return &NotSupportedError{Op: "stopping a pod", Hint: "a Pod on a cluster is not stopped and started again: `devaipod delete NAME --keep-volumes` removes its Pods and keeps its volumes"}
}

// selector is the label selector of pod short's objects ("" for every
// devaipod pod's).
func selector(short string) string {
	if short == "" {
		return plan.LabelPod
	}
	return plan.LabelPod + "=" + short
}

// listed is what one Objects call found, by kind.
type listed struct {
	pods     []corev1.Pod
	pvcs     []corev1.PersistentVolumeClaim
	secrets  []corev1.Secret
	podLevel map[string][]Ref // by short name: NetworkPolicies, ConfigMaps, Services
	created  map[string]time.Time
	// labels are, by short name, the io.devaipod.* labels of the
	// pod-level objects and the data of its ConfigMaps (pod/kube keeps
	// there the labels whose values are not label values: the repository,
	// the task, the verify arguments).
	labels map[string]map[string]string
}

// list lists devaipod's objects in the namespace, at once.
func (c *Client) list(ctx context.Context, short string) (*listed, error) {
	opts := metav1.ListOptions{LabelSelector: selector(short)}
	ns := c.Namespace
	l := &listed{podLevel: map[string][]Ref{}, created: map[string]time.Time{}, labels: map[string]map[string]string{}}
	var mu sync.Mutex
	podLevel := func(kind string, m metav1.ObjectMeta, data map[string]string) {
		mu.Lock()
		defer mu.Unlock()
		s := m.Labels[plan.LabelPod]
		l.podLevel[s] = append(l.podLevel[s], Ref{Kind: kind, Name: m.Name})
		if t := m.CreationTimestamp.Time; l.created[s].IsZero() || t.Before(l.created[s]) {
			l.created[s] = t
		}
		if l.labels[s] == nil {
			l.labels[s] = map[string]string{}
		}
		maps.Copy(l.labels[s], devaipodLabels(m))
		for k, v := range data {
			if strings.HasPrefix(k, "io.devaipod.") {
				l.labels[s][k] = v
			}
		}
	}
	calls := []func() error{
		func() error {
			r, err := c.cs.CoreV1().Pods(ns).List(ctx, opts)
			if err == nil {
				l.pods = r.Items
			}
			return err
		},
		func() error {
			r, err := c.cs.CoreV1().PersistentVolumeClaims(ns).List(ctx, opts)
			if err == nil {
				l.pvcs = r.Items
			}
			return err
		},
		func() error {
			r, err := c.cs.CoreV1().Secrets(ns).List(ctx, opts)
			if err == nil {
				l.secrets = r.Items
			}
			return err
		},
		func() error {
			r, err := c.cs.NetworkingV1().NetworkPolicies(ns).List(ctx, opts)
			if err == nil {
				for _, o := range r.Items {
					podLevel("NetworkPolicy", o.ObjectMeta, nil)
				}
			}
			return err
		},
		func() error {
			r, err := c.cs.CoreV1().ConfigMaps(ns).List(ctx, opts)
			if err == nil {
				for _, o := range r.Items {
					podLevel("ConfigMap", o.ObjectMeta, o.Data)
				}
			}
			return err
		},
		func() error {
			r, err := c.cs.CoreV1().Services(ns).List(ctx, opts)
			if err == nil {
				for _, o := range r.Items {
					podLevel("Service", o.ObjectMeta, nil)
				}
			}
			return err
		},
	}
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = call() }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, c.unreachable(fmt.Errorf("list devaipod's objects in namespace %s: %w", ns, err))
	}
	slices.SortFunc(l.pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return l, nil
}

// devaipodLabels are an object's io.devaipod.* labels and annotations (a
// label's value is limited to 63 characters of a small alphabet: the
// renderer keeps the longer ones, a repository URL or JSON, in
// annotations).
func devaipodLabels(m metav1.ObjectMeta) map[string]string {
	out := map[string]string{}
	for _, src := range []map[string]string{m.Annotations, m.Labels} {
		for k, v := range src {
			if strings.HasPrefix(k, "io.devaipod.") {
				out[k] = v
			}
		}
	}
	return out
}

// Objects implements pod.Engine. The Pods (with the NetworkPolicies,
// ConfigMaps and Services) of one devaipod pod are one pod.KindPod object,
// whose labels are the io.devaipod.* labels and annotations of them all
// and the io.devaipod.* keys of the ConfigMaps' data (pod/kube's
// devaipod-NAME-meta), and whose state sums up the Pods' (see podState); each of their containers
// is a pod.KindContainer, named as on podman. PersistentVolumeClaims are
// pod.KindVolume, Secrets pod.KindSecret.
func (c *Client) Objects(ctx context.Context, short string) ([]pod.Object, error) {
	l, err := c.list(ctx, short)
	if err != nil {
		return nil, err
	}
	var objs []pod.Object
	byPod := map[string][]corev1.Pod{}
	for _, p := range l.pods {
		s := p.Labels[plan.LabelPod]
		byPod[s] = append(byPod[s], p)
	}
	shorts := slices.Sorted(maps.Keys(byPod))
	for s := range l.podLevel {
		if _, ok := byPod[s]; !ok {
			shorts = append(shorts, s)
		}
	}
	for _, s := range shorts {
		pods := byPod[s]
		o := pod.Object{Kind: pod.KindPod, Name: plan.PodName(s), Pod: s, Labels: map[string]string{},
			State: podState(pods), Created: l.created[s]}
		maps.Copy(o.Labels, l.labels[s])
		for _, p := range slices.Backward(pods) { // the first Pod's labels win
			maps.Copy(o.Labels, devaipodLabels(p.ObjectMeta))
			if t := p.CreationTimestamp.Time; o.Created.IsZero() || t.Before(o.Created) {
				o.Created = t
			}
		}
		var containers []pod.Object
		for _, p := range pods {
			for _, ct := range containerObjects(s, p) {
				o.Started = o.Started || ct.Started
				containers = append(containers, ct)
			}
		}
		objs = append(objs, o)
		objs = append(objs, containers...)
	}
	for _, v := range l.pvcs {
		objs = append(objs, pod.Object{Kind: pod.KindVolume, Name: v.Name, Pod: v.Labels[plan.LabelPod],
			State: strings.ToLower(string(v.Status.Phase)), Labels: devaipodLabels(v.ObjectMeta), Created: v.CreationTimestamp.Time})
	}
	for _, sec := range l.secrets {
		objs = append(objs, pod.Object{Kind: pod.KindSecret, Name: sec.Name, Pod: sec.Labels[plan.LabelPod],
			Labels: devaipodLabels(sec.ObjectMeta), Created: sec.CreationTimestamp.Time})
	}
	return objs, nil
}

// roleOf is the role of a container of pod short's: its name is the role,
// or podman's name for it (devaipod-NAME-ROLE), or its io.devaipod.role
// annotation says; "" when none of them does (the handshake's init
// containers).
func roleOf(short string, p *corev1.Pod, name string) string {
	for _, r := range plan.Roles {
		if name == r || name == plan.ContainerName(short, r) {
			return r
		}
	}
	if r := p.Annotations[plan.LabelRole+"."+name]; slices.Contains(plan.Roles, r) {
		return r
	}
	// A Pod of one container whose role the Pod's label says.
	if r := p.Labels[plan.LabelRole]; len(p.Spec.Containers) == 1 && slices.Contains(plan.Roles, r) {
		return r
	}
	return ""
}

// containerObjects are the containers of Pod p of pod short (not its init
// containers).
func containerObjects(short string, p corev1.Pod) []pod.Object {
	var out []pod.Object
	for _, ct := range p.Spec.Containers {
		role := roleOf(short, &p, ct.Name)
		name := ct.Name
		if role != "" {
			name = plan.ContainerName(short, role)
		}
		labels := devaipodLabels(p.ObjectMeta)
		labels[plan.LabelPod] = short
		if role != "" {
			labels[plan.LabelRole] = role
		}
		state, started := containerState(p, ct.Name)
		out = append(out, pod.Object{Kind: pod.KindContainer, Name: name, Pod: short, State: state,
			Started: started, Labels: labels, Created: p.CreationTimestamp.Time})
	}
	return out
}

// containerState is a container's state in podman's words (running,
// created, exited; "waiting: REASON" while Kubernetes holds it back) and
// whether it ever started.
func containerState(p corev1.Pod, name string) (string, bool) {
	if p.DeletionTimestamp != nil {
		return "terminating", true
	}
	for _, st := range p.Status.ContainerStatuses {
		if st.Name != name {
			continue
		}
		started := st.RestartCount > 0 || st.State.Running != nil || st.State.Terminated != nil ||
			st.LastTerminationState.Terminated != nil
		switch s := st.State; {
		case s.Running != nil:
			return "running", true
		case s.Terminated != nil:
			return "exited", started
		case s.Waiting != nil && s.Waiting.Reason != "":
			return "waiting: " + s.Waiting.Reason, started
		}
		return "created", started
	}
	return "created", false // not yet scheduled, or its init containers run
}

// podState sums up the Pods of one devaipod pod in podman's words:
// running (every container of every Pod runs), degraded (some do),
// pending (Kubernetes is still scheduling, pulling or running init
// containers), exited (all ended), terminating, or incomplete (no Pods:
// what a failed up or delete left).
func podState(pods []corev1.Pod) string {
	if len(pods) == 0 {
		return "incomplete"
	}
	var running, total, ended, pending int
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			return "terminating"
		}
		switch p.Status.Phase {
		case corev1.PodSucceeded, corev1.PodFailed:
			ended++
		case corev1.PodPending, "":
			pending++
		}
		for _, ct := range p.Spec.Containers {
			total++
			if s, _ := containerState(p, ct.Name); s == "running" {
				running++
			}
		}
	}
	switch {
	case running == total:
		return "running"
	case ended == len(pods):
		return "exited"
	case running == 0 && pending > 0:
		return "pending"
	}
	return "degraded"
}

// shortOf is the short name of a podman-style pod name.
func shortOf(name string) string { return strings.TrimPrefix(name, plan.Prefix) }

// PodExists implements pod.Engine: whether any Pod, or a NetworkPolicy
// (what is left of a pod being deleted), carries the pod's label.
func (c *Client) PodExists(ctx context.Context, name string) (bool, error) {
	opts := metav1.ListOptions{LabelSelector: selector(shortOf(name)), Limit: 1}
	pods, err := c.cs.CoreV1().Pods(c.Namespace).List(ctx, opts)
	if err != nil {
		return false, c.unreachable(err)
	}
	if len(pods.Items) > 0 {
		return true, nil
	}
	nps, err := c.cs.NetworkingV1().NetworkPolicies(c.Namespace).List(ctx, opts)
	if err != nil {
		return false, err
	}
	return len(nps.Items) > 0, nil
}

// Remove implements pod.Engine. A pod.KindPod takes its Pods, then (once
// they are gone) its NetworkPolicies, ConfigMaps and Services; a
// container, which cannot leave its Pod, takes its Pod; a volume is a
// PersistentVolumeClaim, a secret a Secret.
func (c *Client) Remove(ctx context.Context, o pod.Object) error {
	switch o.Kind {
	case pod.KindPod:
		short := o.Pod
		if short == "" {
			short = shortOf(o.Name)
		}
		l, err := c.list(ctx, short)
		if err != nil {
			return err
		}
		var refs []Ref
		for _, p := range l.pods {
			refs = append(refs, Ref{Kind: "Pod", Name: p.Name})
		}
		refs = append(refs, l.podLevel[short]...)
		if len(refs) == 0 {
			return fmt.Errorf("pod %s: %w", short, pod.ErrNotFound)
		}
		return c.deleteRefs(ctx, refs)
	case pod.KindContainer:
		p, _, err := c.locate(ctx, o.Name)
		if err != nil {
			return err
		}
		return c.deleteOne(ctx, Ref{Kind: "Pod", Name: p.Name})
	case pod.KindVolume:
		return notFound(c.cs.CoreV1().PersistentVolumeClaims(c.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{}))
	case pod.KindSecret:
		return notFound(c.cs.CoreV1().Secrets(c.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{}))
	}
	return fmt.Errorf("unknown object kind %q", o.Kind)
}

// unreachable turns an error of a cluster that does not answer (no
// route, refused, a name that does not resolve, TLS) into a
// *ConnectError that says which cluster; other errors pass.
func (c *Client) unreachable(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	where := c.Host
	if c.Context != "" {
		where = "context " + c.Context + " (" + c.Host + ")"
	}
	return &ConnectError{Err: fmt.Errorf("the cluster of %s does not answer: %w", where, err),
		Hint: "`kubectl cluster-info` checks the same kubeconfig; --context picks another cluster"}
}

// notFound maps the API's NotFound to pod.ErrNotFound.
func notFound(err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%v: %w", err, pod.ErrNotFound)
	}
	return err
}

// locate finds the Pod and the container of a podman-style container
// name (devaipod-NAME-ROLE), or of a container's own name in a devaipod
// Pod (the init containers of the handshake).
func (c *Client) locate(ctx context.Context, container string) (*corev1.Pod, string, error) {
	short, role := "", ""
	for _, r := range plan.Roles {
		if s, ok := strings.CutSuffix(container, "-"+r); ok && strings.HasPrefix(s, plan.Prefix) {
			short, role = shortOf(s), r
			break
		}
	}
	list, err := c.cs.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector(short)})
	if err != nil {
		return nil, "", err
	}
	for i := range list.Items {
		p := &list.Items[i]
		if role != "" {
			for _, ct := range p.Spec.Containers {
				if roleOf(short, p, ct.Name) == role {
					return p, ct.Name, nil
				}
			}
		}
		for _, ct := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
			if ct.Name == container {
				return p, ct.Name, nil
			}
		}
	}
	return nil, "", fmt.Errorf("container %s in namespace %s: %w", container, c.Namespace, pod.ErrNotFound)
}

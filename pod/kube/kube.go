package kube

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/devaipod/devaipod/internal/helperargs"
	"github.com/devaipod/devaipod/internal/size"
	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Names and paths of the rendered Pods that the engine needs (see the
// package doc, "The handshake").
const (
	// PrepareContainer is the workspace Pod's init container, through
	// which the engine copies the repository in.
	PrepareContainer = "prepare"
	// InstallContainer is the agent Pod's init container.
	InstallContainer = "install"
	// VolumesDir is where the init containers mount the volumes, each at
	// VolumesDir/SUFFIX (SUFFIX: the plan volume's name after
	// devaipod-NAME-, e.g. workspace, agent-git).
	VolumesDir = "/volumes"
	// InstallDir is where the init containers mount the emptyDir they
	// copy the helper's files into.
	InstallDir = "/devaipod-install"
	// SeedMarker is the file, in the host-share volume's root, that the
	// engine creates once the repository is copied in.
	SeedMarker = ".devaipod-seeded"
	// AgentSeccompProfile is the name of the agent's seccomp profile on
	// the nodes (kubelet's seccomp directory; podman kube play's
	// --seccomp-profile-root): podman's default profile with new
	// namespaces and ptrace refused (plan.SeccompAgent).
	AgentSeccompProfile = "devaipod-agent.json"
	// subPathProbe is the directory, in the host-share volume's root,
	// that "prepare" makes and "install" mounts by subPath: a runtime
	// that ignores subPath mounts the whole volume, and install refuses
	// to let the agent start.
	subPathProbe = ".devaipod-subpath"
	// subPathCheck is where install mounts it.
	subPathCheck = "/devaipod-subpath-check"
	// helperBin is the helper at the helper image's root, which the init
	// containers run.
	helperBin = plan.ProxyBin
	// secretsDir and secretCopiesDir hold, in "prepare", the proxy's and
	// the gator's Secret volumes and the emptyDirs they are copied to.
	secretsDir      = "/secrets"
	secretCopiesDir = "/secret-copies"
)

// The cluster canary. On podman the workspace's canary (plan.CanaryAddr)
// listens on the pod's loopback, which only a container that shares the
// pod's network reaches. On a cluster the agent's Pod has the CNI's
// interface and routes, and only a NetworkPolicy enforced by the CNI keeps
// it in: so the canary listens on every address of the workspace's Pod,
// and verify's cluster-egress row, given those addresses by the engine
// (ClusterCanaries), shows that the agent's Pod cannot reach them. The
// workspace's policy lets the agent's Pod in to that port alone, so that
// the agent's own deny-all egress is what the row tests.
var (
	// ClusterCanaryPort is the canary's port: plan.CanaryAddr's.
	ClusterCanaryPort = canaryPort()
	// clusterCanaryListen is where the workspace's init listens instead
	// of plan.CanaryAddr: every address (IPv6 and IPv4) of its Pod,
	// loopback included.
	clusterCanaryListen = "tcp::" + ClusterCanaryPort
)

func canaryPort() string {
	_, port, err := net.SplitHostPort(plan.CanaryAddr)
	if err != nil {
		panic(err)
	}
	return port
}

// ClusterCanaries are the cluster canary's addresses, IP:PORT, for the
// workspace Pod's addresses (status.podIPs).
func ClusterCanaries(podIPs []string) []string {
	var out []string
	for _, ip := range podIPs {
		if ip != "" {
			out = append(out, net.JoinHostPort(ip, ClusterCanaryPort))
		}
	}
	return out
}

// Seccomp choices for the agent (Options.AgentSeccomp).
const (
	SeccompLocalhost      = "localhost"
	SeccompRuntimeDefault = "runtime-default"
)

// Options tune Render. Zero values mean the defaults.
type Options struct {
	// Namespace of every object ("" leaves it to kubectl's context).
	Namespace string
	// AgentSeccomp is SeccompLocalhost (default: AgentSeccompProfile,
	// installed on every node, which also refuses ptrace and new
	// namespaces, as on podman) or SeccompRuntimeDefault (the runtime's
	// default: the verify rows ptrace and unshare may then FAIL).
	AgentSeccomp string
	// StorageClass of the claims ("" for the cluster's default).
	StorageClass string
	// WorkspaceSize is the workspace claim's request (default 10Gi),
	// VolumeSize every other claim's (default 1Gi).
	WorkspaceSize, VolumeSize string
	// HelperImage replaces the helper image (proxy, gator, init
	// containers): localhost/devaipod-helper is local to this host's
	// podman, and a cluster's nodes pull it from a registry.
	HelperImage string
	// NoLimits leaves the memory and CPU limits out (rootless podman on
	// cgroup v1 cannot apply them, and its kube play refuses the Pod).
	NoLimits bool
}

// Seed is the engine's side of the handshake: the commands to run in
// Container of Pod, each with a tar stream on standard input.
type Seed struct {
	Pod       string `json:"pod"`
	Container string `json:"container"`
	// Workspace extracts source.TarTree's stream into the workspace
	// volume's root; AgentGit extracts source.TarGitDir's into agent-git
	// and then creates Marker, which lets the Pods start.
	Workspace []string `json:"workspace"`
	AgentGit  []string `json:"agent_git"`
	Marker    string   `json:"marker"`
}

// Manifests are a plan's Kubernetes objects, typed, in the order they are
// applied.
type Manifests struct {
	Secrets    []*corev1.Secret
	ConfigMaps []*corev1.ConfigMap
	Claims     []*corev1.PersistentVolumeClaim
	Policies   []*networkingv1.NetworkPolicy
	// Workspace is the trusted Pod (workspace, proxy, gator); Agent the
	// agent's (nil in network mode open, where the agent is in
	// Workspace).
	Workspace *corev1.Pod
	Agent     *corev1.Pod
	Seed      Seed
	// Warnings are what of the plan Kubernetes cannot express.
	Warnings []string
}

// Objects lists every object, in apply order: Secrets, ConfigMaps,
// claims, policies, the workspace's Pod, the agent's.
func (m *Manifests) Objects() []runtime.Object {
	var objs []runtime.Object
	for _, o := range m.Secrets {
		objs = append(objs, o)
	}
	for _, o := range m.ConfigMaps {
		objs = append(objs, o)
	}
	for _, o := range m.Claims {
		objs = append(objs, o)
	}
	for _, o := range m.Policies {
		objs = append(objs, o)
	}
	objs = append(objs, m.Workspace)
	if m.Agent != nil {
		objs = append(objs, m.Agent)
	}
	return objs
}

// YAML is every object as one YAML stream ("---" between documents), as
// kubectl apply -f and podman kube play read it.
func (m *Manifests) YAML() ([]byte, error) {
	var out []byte
	for i, o := range m.Objects() {
		b, err := yaml.Marshal(o)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, b...)
	}
	return out, nil
}

// JSON is every object in a v1 List.
func (m *Manifests) JSON() ([]byte, error) {
	list := &corev1.List{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}}
	for _, o := range m.Objects() {
		raw, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		list.Items = append(list.Items, runtime.RawExtension{Raw: raw})
	}
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// renderer holds what Render's parts share.
type renderer struct {
	p       *plan.Plan
	o       Options
	short   string
	helper  string
	secrets map[string]plan.SecretSpec
	// labels are those of the plan's own objects (pod, version, repo,
	// commit): the Pods carry the pod's too (agent URL, task, verify).
	labels   map[string]string
	warnings []string
	// pids are the containers' process limits ("agent 512"), which have
	// no counterpart: Render warns of them once.
	pids []string
	// volumes collects the Pod volumes a Pod's containers need, by name.
	volumes map[string]corev1.Volume
}

func (r *renderer) warn(format string, args ...any) {
	r.warnings = append(r.warnings, fmt.Sprintf(format, args...))
}

// Render turns a plan into Kubernetes objects. It touches nothing.
func Render(p *plan.Plan, o Options) (*Manifests, error) {
	if p == nil || p.Workspace() == nil || p.Agent() == nil {
		return nil, errors.New("the plan has no workspace or no agent")
	}
	o.AgentSeccomp = cmp.Or(o.AgentSeccomp, SeccompLocalhost)
	if o.AgentSeccomp != SeccompLocalhost && o.AgentSeccomp != SeccompRuntimeDefault {
		return nil, fmt.Errorf("agent seccomp %q: want %s or %s", o.AgentSeccomp, SeccompLocalhost, SeccompRuntimeDefault)
	}
	o.WorkspaceSize = cmp.Or(o.WorkspaceSize, "10Gi")
	o.VolumeSize = cmp.Or(o.VolumeSize, "1Gi")
	for _, s := range []string{o.WorkspaceSize, o.VolumeSize} {
		if _, err := resource.ParseQuantity(s); err != nil {
			return nil, fmt.Errorf("volume size %q: %w", s, err)
		}
	}
	if o.Namespace != "" {
		if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
			return nil, fmt.Errorf("namespace %q: %s", o.Namespace, strings.Join(errs, "; "))
		}
	}
	r := &renderer{p: p, o: o, short: p.Name, secrets: map[string]plan.SecretSpec{}}
	r.helper = config.DefaultHelperImage
	if ims := p.Agent().ImageMounts; len(ims) > 0 {
		r.helper = ims[0].Image
	}
	if o.HelperImage != "" {
		p = withHelperImage(p, r.helper, o.HelperImage)
		r.p, r.helper = p, o.HelperImage
	}
	for _, s := range p.Secrets {
		r.secrets[s.Name] = s
	}
	r.labels = p.Pod.Labels
	if len(p.Volumes) > 0 {
		r.labels = p.Volumes[0].Labels
	}
	if !slices.ContainsFunc(p.Volumes, func(v plan.VolumeSpec) bool { return v.Name == plan.ObjectName(p.Name, plan.VolumeHostShare) }) {
		return nil, errors.New("the plan has no host-share volume, where the handshake's marker goes")
	}
	m := &Manifests{}
	m.Seed = Seed{Pod: p.Pod.Name, Container: PrepareContainer,
		Workspace: append([]string{helperBin}, helperargs.Untar{Dir: r.volumeDir(plan.VolumeWorkspace)}.Args()...),
		AgentGit:  append([]string{helperBin}, helperargs.Untar{Dir: r.volumeDir(plan.VolumeAgentGit), Done: r.marker()}.Args()...),
		Marker:    r.marker()}

	if err := r.secretObjects(m); err != nil {
		return nil, err
	}
	for _, v := range p.Volumes {
		m.Claims = append(m.Claims, r.claim(v))
	}
	m.ConfigMaps = append(m.ConfigMaps, r.metaConfigMap())
	if len(r.maskedFiles()) > 0 {
		// What masked files are bound to in the agent: an empty file (a
		// host's /dev/null cannot be mounted under Pod Security).
		m.ConfigMaps = append(m.ConfigMaps, &corev1.ConfigMap{TypeMeta: typeMeta("v1", "ConfigMap"),
			ObjectMeta: r.meta(plan.ObjectName(r.short, "empty"), r.labels), Data: map[string]string{"empty": ""}})
	}
	open := p.Agent().Network != plan.NetworkNone
	ws, err := r.workspacePod(open)
	if err != nil {
		return nil, err
	}
	m.Workspace = ws
	wsPolicy := r.policy(plan.RoleWorkspace, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress})
	if !open {
		wsPolicy.Spec.Ingress = r.canaryIngress()
	}
	m.Policies = append(m.Policies, wsPolicy)
	if !open {
		agent, err := r.agentPod()
		if err != nil {
			return nil, err
		}
		m.Agent = agent
		m.Policies = append(m.Policies, r.policy(plan.RoleAgent, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}))
	} else {
		r.warn("network mode %q: the agent is in the workspace's Pod and shares its network and IPC namespace; no NetworkPolicy restricts it, so it reaches whatever the Pod reaches on the cluster's network (the API server, the kubelets, a cloud's metadata endpoint, other tenants' Services)", p.Network)
	}
	if p.Pod.HostLoopback {
		r.warn("[network] host_loopback has no Kubernetes counterpart: the pod cannot reach this host's loopback")
	}
	if len(r.pids) > 0 {
		r.warn("the process limits (%s) are not rendered: Kubernetes bounds a Pod's processes only by the kubelet's podPidsLimit, a setting of the node (devaipod --engine kube verify, row limit-pids, shows what the agent gets)",
			strings.Join(r.pids, ", "))
	}
	m.Warnings = r.warnings
	return m, nil
}

// withHelperImage is a copy of the plan with the helper image replaced.
func withHelperImage(p *plan.Plan, from, to string) *plan.Plan {
	c := *p
	c.Containers = slices.Clone(p.Containers)
	for i := range c.Containers {
		ctr := &c.Containers[i]
		if ctr.Image == from {
			ctr.Image = to
		}
		ctr.ImageMounts = slices.Clone(ctr.ImageMounts)
		for j := range ctr.ImageMounts {
			if ctr.ImageMounts[j].Image == from {
				ctr.ImageMounts[j].Image = to
			}
		}
	}
	return &c
}

func typeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

// suffix is a plan object's name without devaipod-NAME-.
func (r *renderer) suffix(name string) string {
	return strings.TrimPrefix(name, plan.ObjectName(r.short, ""))
}

func (r *renderer) volumeDir(what string) string { return VolumesDir + "/" + what }

func (r *renderer) marker() string {
	return r.volumeDir(plan.VolumeHostShare) + "/" + SeedMarker
}

// meta is an object's metadata: the labels whose values Kubernetes
// accepts as label values. The others (URLs, the task, JSON) are in the
// pod's ConfigMap (see metaConfigMap), not in annotations: podman 4.3's
// kube play refuses an annotation value longer than 63 characters.
func (r *renderer) meta(name string, labels map[string]string, extra ...string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: name, Namespace: r.o.Namespace, Labels: map[string]string{}}
	for k, v := range labels {
		if validLabel(k, v) {
			m.Labels[k] = v
		}
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m.Labels[extra[i]] = extra[i+1]
	}
	return m
}

func validLabel(k, v string) bool {
	return len(validation.IsQualifiedName(k)) == 0 && len(validation.IsValidLabelValue(v)) == 0
}

// MetaConfigMap names the ConfigMap that holds the plan's labels whose
// values are not label values (io.devaipod.repo, io.devaipod.task,
// io.devaipod.verify, ...), keyed by label.
func MetaConfigMap(short string) string { return plan.ObjectName(short, "meta") }

func (r *renderer) metaConfigMap() *corev1.ConfigMap {
	data := map[string]string{}
	for k, v := range r.p.Pod.Labels {
		if !validLabel(k, v) {
			data[k] = v
		}
	}
	return &corev1.ConfigMap{TypeMeta: typeMeta("v1", "ConfigMap"), ObjectMeta: r.meta(MetaConfigMap(r.short), r.labels), Data: data}
}

// secretObjects makes one Secret per container with secret variables,
// keyed by variable. A variable whose podman secret is not the plan's own
// (a user's [trusted.env] secrets or [credentials] secret) names a Secret
// the user makes, of the same name with "_" as "-", key "value".
func (r *renderer) secretObjects(m *Manifests) error {
	for _, c := range r.p.Containers {
		if len(c.SecretEnv) == 0 {
			continue
		}
		s := &corev1.Secret{TypeMeta: typeMeta("v1", "Secret"), Type: corev1.SecretTypeOpaque,
			ObjectMeta: r.meta(r.secretName(c.Role), r.labels, plan.LabelRole, c.Role), Data: map[string][]byte{}}
		for _, v := range slices.Sorted(maps.Keys(c.SecretEnv)) {
			if errs := validation.IsConfigMapKey(v); len(errs) > 0 {
				return fmt.Errorf("secret variable %q: %s", v, strings.Join(errs, "; "))
			}
			spec, own := r.secrets[c.SecretEnv[v]]
			if !own {
				continue // the user's Secret: see secretVolume
			}
			s.Data[v] = []byte(spec.Value)
		}
		m.Secrets = append(m.Secrets, s)
	}
	return nil
}

func (r *renderer) secretName(role string) string {
	return plan.ContainerName(r.short, role) + "-secrets"
}

// userSecret is the Secret a user makes for a podman secret the plan names
// but does not hold.
func userSecret(name string) string {
	return strings.ToLower(strings.ReplaceAll(name, "_", "-"))
}

func (r *renderer) claim(v plan.VolumeSpec) *corev1.PersistentVolumeClaim {
	size := r.o.VolumeSize
	if v.Name == plan.ObjectName(r.short, plan.VolumeWorkspace) {
		size = r.o.WorkspaceSize
	}
	c := &corev1.PersistentVolumeClaim{TypeMeta: typeMeta("v1", "PersistentVolumeClaim"), ObjectMeta: r.meta(v.Name, v.Labels),
		Spec: corev1.PersistentVolumeClaimSpec{
			// ReadWriteOnce: the node's, shared by the two Pods that the
			// agent's podAffinity puts on it.
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		}}
	if r.o.StorageClass != "" {
		c.Spec.StorageClassName = &r.o.StorageClass
	}
	return c
}

func (r *renderer) policy(role string, types []networkingv1.PolicyType) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{TypeMeta: typeMeta("networking.k8s.io/v1", "NetworkPolicy"),
		ObjectMeta: r.meta(plan.ContainerName(r.short, role), r.labels, plan.LabelRole, role),
		// No rules: nothing of the listed directions is allowed.
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: r.selector(role)}, PolicyTypes: types}}
}

// canaryIngress lets the agent's Pod, and nothing else, in to the
// workspace Pod's canary port (TCP, and UDP where nothing listens: the
// probe's proof of arrival is the kernel's port unreachable). Without it a
// CNI that enforces ingress but not egress would drop the probe at the
// workspace and pass the agent's open egress; with it, only the agent's
// own deny-all egress stands between them.
func (r *renderer) canaryIngress() []networkingv1.NetworkPolicyIngressRule {
	port := intstr.FromInt32(mustPort(ClusterCanaryPort))
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	return []networkingv1.NetworkPolicyIngressRule{{
		From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: r.selector(plan.RoleAgent)}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}, {Protocol: &udp, Port: &port}},
	}}
}

func mustPort(s string) int32 {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		panic(err)
	}
	return int32(n)
}

func (r *renderer) selector(role string) map[string]string {
	return map[string]string{plan.LabelPod: r.short, plan.LabelRole: role}
}

// addVolume records a Pod volume; the same name twice is the same volume.
func (r *renderer) addVolume(v corev1.Volume) {
	r.volumes[v.Name] = v
}

func (r *renderer) podVolumes() []corev1.Volume {
	var vs []corev1.Volume
	for _, name := range slices.Sorted(maps.Keys(r.volumes)) {
		vs = append(vs, r.volumes[name])
	}
	return vs
}

// claimVolume is the Pod volume of a plan volume: named by its suffix.
func (r *renderer) claimVolume(planName string) string {
	name := r.suffix(planName)
	r.addVolume(corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: planName}}})
	return name
}

// emptyDir records an emptyDir. Its name starts with the pod's short name:
// podman 4.3's kube play makes a named volume of an emptyDir's name, which
// two Pods (or two devaipod pods) would otherwise share.
func (r *renderer) emptyDir(what string, memory bool, limit string) (string, error) {
	name := r.short + "-" + what
	src := &corev1.EmptyDirVolumeSource{}
	if memory {
		src.Medium = corev1.StorageMediumMemory
	}
	if limit != "" {
		n, err := size.Parse(limit)
		if err != nil {
			return "", fmt.Errorf("size %q: %w", limit, err)
		}
		src.SizeLimit = resource.NewQuantity(n, resource.BinarySI)
	}
	r.addVolume(corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: src}})
	return name, nil
}

func (r *renderer) helperVolume() string {
	name, _ := r.emptyDir("helper", false, "")
	return name
}

func (r *renderer) maskedFiles() []plan.Bind {
	var binds []plan.Bind
	for _, b := range r.p.Agent().Binds {
		if b.HostPath == "/dev/null" {
			binds = append(binds, b)
		}
	}
	return binds
}

// agentSubPaths tells whether the agent's mounts include subPath ones
// (its folder and protected paths in the copy, masked files).
func (r *renderer) agentSubPaths() bool {
	for _, b := range r.p.Agent().Binds {
		if b.Volume != "" || b.HostPath == "/dev/null" {
			return true
		}
	}
	return false
}

// copySecrets tells whether a container's secrets go through prepare's
// copy (an owner other than root) rather than a Secret volume.
func copySecrets(c plan.ContainerSpec) bool { return len(c.SecretEnv) > 0 && c.SecretUID != 0 }

// secretVolume is the volume of a container's Secret: a projected one when
// the user's own Secrets join the plan's, else a plain Secret volume.
func (r *renderer) secretVolume(c plan.ContainerSpec, mode int32) string {
	name := "secrets-" + c.Role
	optional := false // podman 4.3's kube play crashes when it is unset
	var items []corev1.KeyToPath
	var users []corev1.VolumeProjection
	for _, v := range slices.Sorted(maps.Keys(c.SecretEnv)) {
		if _, own := r.secrets[c.SecretEnv[v]]; own {
			items = append(items, corev1.KeyToPath{Key: v, Path: v})
			continue
		}
		users = append(users, corev1.VolumeProjection{Secret: &corev1.SecretProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: userSecret(c.SecretEnv[v])},
			Items:                []corev1.KeyToPath{{Key: "value", Path: v}}}})
	}
	if len(users) == 0 {
		r.addVolume(corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: r.secretName(c.Role), DefaultMode: &mode, Optional: &optional}}})
		return name
	}
	sources := append([]corev1.VolumeProjection{{Secret: &corev1.SecretProjection{
		LocalObjectReference: corev1.LocalObjectReference{Name: r.secretName(c.Role)}, Items: items}}}, users...)
	r.addVolume(corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: sources, DefaultMode: &mode}}})
	r.warn("the %s's secrets %s are your own podman secrets: make a Secret of each in the namespace, named as the podman secret with \"_\" as \"-\", key \"value\"",
		c.Role, strings.Join(r.userSecretNames(c), ", "))
	return name
}

func (r *renderer) userSecretNames(c plan.ContainerSpec) []string {
	var names []string
	for _, v := range slices.Sorted(maps.Keys(c.SecretEnv)) {
		if _, own := r.secrets[c.SecretEnv[v]]; !own {
			names = append(names, c.SecretEnv[v])
		}
	}
	return names
}

// container translates a planned container. Pod-level settings it implies
// (a deadline) are returned with it.
func (r *renderer) container(c plan.ContainerSpec, inAgentPod bool) (corev1.Container, *int64, error) {
	k := corev1.Container{Name: c.Role, Image: c.Image, Args: c.Command, WorkingDir: c.Workdir,
		ImagePullPolicy: corev1.PullIfNotPresent}
	k.Command = c.Entrypoint
	if c.Umask != "" && len(c.Entrypoint) > 0 && strings.HasPrefix(c.Entrypoint[0], plan.HelperMount+"/") {
		// Kubernetes has no umask: the helper sets it and becomes the init.
		k.Command = plan.HelperCommand(helperargs.Umask{Mask: c.Umask, Command: c.Entrypoint})
	}
	for _, name := range slices.Sorted(maps.Keys(c.Env)) {
		k.Env = append(k.Env, corev1.EnvVar{Name: name, Value: c.Env[name]})
	}
	sc, err := r.securityContext(c, inAgentPod)
	if err != nil {
		return k, nil, err
	}
	k.SecurityContext = sc
	for _, port := range r.portsOf(c) {
		k.Ports = append(k.Ports, corev1.ContainerPort{ContainerPort: int32(port), Protocol: corev1.ProtocolTCP})
	}

	for _, m := range c.Mounts {
		k.VolumeMounts = append(k.VolumeMounts, corev1.VolumeMount{Name: r.claimVolume(m.Volume), MountPath: m.Dest, ReadOnly: m.ReadOnly})
	}
	for _, b := range c.Binds {
		switch {
		case b.Volume != "":
			k.VolumeMounts = append(k.VolumeMounts, corev1.VolumeMount{Name: r.claimVolume(b.Volume), MountPath: b.Dest, SubPath: b.SubPath, ReadOnly: b.ReadOnly})
		case b.HostPath == "/dev/null":
			r.addVolume(corev1.Volume{Name: "empty", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: plan.ObjectName(r.short, "empty")}}}})
			k.VolumeMounts = append(k.VolumeMounts, corev1.VolumeMount{Name: "empty", MountPath: b.Dest, SubPath: "empty", ReadOnly: true})
		default:
			r.warn("the %s's mount of %s at %s is a path of this host: not rendered (mount a volume of the cluster instead)", c.Role, b.HostPath, b.Dest)
		}
	}
	for _, im := range c.ImageMounts {
		if im.Image != r.helper {
			r.warn("the %s's mount of image %s at %s: image mounts other than the helper's are not rendered", c.Role, im.Image, im.Dest)
			continue
		}
		k.VolumeMounts = append(k.VolumeMounts, corev1.VolumeMount{Name: r.helperVolume(), MountPath: im.Dest, ReadOnly: true})
	}
	for i, t := range c.Tmpfs {
		what := c.Role + "-tmp"
		if i > 0 {
			what += strconv.Itoa(i)
		}
		name, err := r.emptyDir(what, true, t.Size)
		if err != nil {
			return k, nil, fmt.Errorf("%s: tmpfs %s: %w", c.Role, t.Dest, err)
		}
		k.VolumeMounts = append(k.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: t.Dest})
	}
	if c.ShmSize != "" {
		name, err := r.emptyDir(c.Role+"-shm", true, c.ShmSize)
		if err != nil {
			return k, nil, fmt.Errorf("%s: shm size: %w", c.Role, err)
		}
		k.VolumeMounts = append(k.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: "/dev/shm"})
	}
	switch {
	case copySecrets(c):
		name, err := r.emptyDir(c.Role+"-secrets", true, "1m")
		if err != nil {
			return k, nil, err
		}
		k.VolumeMounts = append(k.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: plan.SecretDir, ReadOnly: true})
	case len(c.SecretEnv) > 0:
		// Root's alone, as podman mounts them (devaipod exec reads them
		// as root).
		k.VolumeMounts = append(k.VolumeMounts, corev1.VolumeMount{Name: r.secretVolume(c, 0o400), MountPath: plan.SecretDir, ReadOnly: true})
	}
	if len(c.Devices) > 0 {
		r.warn("the %s's devices (%s) are not rendered: Kubernetes gives devices through device plugins", c.Role, strings.Join(c.Devices, ", "))
	}
	if len(c.Ulimits) > 0 {
		r.warn("the %s's ulimits (%s) have no Kubernetes counterpart", c.Role, strings.Join(c.Ulimits, ", "))
	}
	var deadline *int64
	if l := c.Limits; l != nil {
		if !r.o.NoLimits {
			res := corev1.ResourceList{}
			if l.Memory != "" {
				n, err := size.Parse(l.Memory)
				if err != nil {
					return k, nil, fmt.Errorf("%s: memory limit: %w", c.Role, err)
				}
				res[corev1.ResourceMemory] = *resource.NewQuantity(n, resource.BinarySI)
			}
			if l.CPUs > 0 {
				res[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(l.CPUs*1000), resource.DecimalSI)
			}
			if len(res) > 0 {
				k.Resources.Limits = res
			}
			if l.Pids > 0 {
				r.pids = append(r.pids, fmt.Sprintf("%s %d", c.Role, l.Pids))
			}
		}
		if l.Timeout != "" {
			d, err := parseSeconds(l.Timeout)
			if err != nil {
				return k, nil, fmt.Errorf("%s: timeout: %w", c.Role, err)
			}
			deadline = &d
		}
	}
	return k, deadline, nil
}

// portsOf are the pod's published ports, on the workspace.
func (r *renderer) portsOf(c plan.ContainerSpec) []int {
	if c.Role != plan.RoleWorkspace {
		return nil
	}
	return r.p.Pod.Ports
}

// securityContext is a container's. In the agent's Pod the user and the
// seccomp profile are the Pod's.
func (r *renderer) securityContext(c plan.ContainerSpec, inAgentPod bool) (*corev1.SecurityContext, error) {
	sc := &corev1.SecurityContext{}
	if !inAgentPod && c.User != "" {
		uid, gid, err := numericUser(c.User)
		if err != nil {
			r.warn("the %s runs as its image's user: user %q is not numeric, and Kubernetes takes numbers only", c.Role, c.User)
		} else {
			sc.RunAsUser, sc.RunAsGroup = &uid, gid
			if uid != 0 {
				yes := true
				sc.RunAsNonRoot = &yes
			}
		}
	}
	if len(c.CapDrop) > 0 || len(c.CapAdd) > 0 {
		sc.Capabilities = &corev1.Capabilities{}
		for _, cap := range c.CapDrop {
			sc.Capabilities.Drop = append(sc.Capabilities.Drop, corev1.Capability(strings.TrimPrefix(cap, "CAP_")))
		}
		for _, cap := range c.CapAdd {
			sc.Capabilities.Add = append(sc.Capabilities.Add, corev1.Capability(strings.TrimPrefix(cap, "CAP_")))
		}
	}
	if c.NoNewPrivileges {
		no := false
		sc.AllowPrivilegeEscalation = &no
	}
	if c.ReadOnlyRoot {
		yes := true
		sc.ReadOnlyRootFilesystem = &yes
	}
	if c.Privileged {
		yes := true
		sc.Privileged = &yes
	}
	if c.Seccomp == plan.SeccompAgent && !inAgentPod {
		sc.SeccompProfile = r.agentSeccomp()
	}
	for _, opt := range c.SecurityOpt {
		key, val, _ := strings.Cut(opt, "=")
		switch {
		case key == "seccomp" && val == "unconfined":
			sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		case key == "apparmor" && val == "unconfined":
			sc.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		case key == "apparmor":
			sc.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: &val}
		case key == "no-new-privileges":
			allow := !(val == "" || val == "true")
			sc.AllowPrivilegeEscalation = &allow
		case key == "label" && strings.HasPrefix(val, "type:"):
			sc.SELinuxOptions = &corev1.SELinuxOptions{Type: strings.TrimPrefix(val, "type:")}
		default:
			r.warn("the %s's security option %q is not rendered", c.Role, opt)
		}
	}
	if *sc == (corev1.SecurityContext{}) {
		return nil, nil
	}
	return sc, nil
}

func (r *renderer) agentSeccomp() *corev1.SeccompProfile {
	if r.o.AgentSeccomp == SeccompRuntimeDefault {
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	name := AgentSeccompProfile
	return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &name}
}

// seccompAnnotation is the profile as the annotation podman's kube play
// reads (it ignores the field); Kubernetes checks that the two agree.
func (r *renderer) seccompAnnotation() string {
	if r.o.AgentSeccomp == SeccompRuntimeDefault {
		return corev1.SeccompProfileRuntimeDefault
	}
	return corev1.SeccompLocalhostProfileNamePrefix + AgentSeccompProfile
}

func numericUser(user string) (int64, *int64, error) {
	u, g, hasGroup := strings.Cut(user, ":")
	uid, err := strconv.ParseInt(u, 10, 64)
	if err != nil {
		return 0, nil, err
	}
	if !hasGroup {
		return uid, nil, nil
	}
	gid, err := strconv.ParseInt(g, 10, 64)
	if err != nil {
		return 0, nil, err
	}
	return uid, &gid, nil
}

func parseSeconds(d string) (int64, error) {
	dur, err := time.ParseDuration(d)
	if err != nil {
		return 0, err
	}
	return int64(dur.Seconds()), nil
}

// podBase is what both Pods set the same way.
func (r *renderer) podBase(p *corev1.Pod, grace uint, deadline *int64) {
	no, g := false, int64(grace)
	p.Spec.AutomountServiceAccountToken = &no
	p.Spec.EnableServiceLinks = &no
	// OnFailure, not Always: podman 4.3's kube play applies the Pod's
	// policy to init containers too and would rerun a finished one for
	// ever; on a cluster a crashed server is restarted all the same.
	p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	p.Spec.TerminationGracePeriodSeconds = &g
	p.Spec.ActiveDeadlineSeconds = deadline
	p.Spec.Volumes = r.podVolumes()
}

func (r *renderer) workspacePod(withAgent bool) (*corev1.Pod, error) {
	r.volumes = map[string]corev1.Volume{}
	pod := &corev1.Pod{TypeMeta: typeMeta("v1", "Pod"), ObjectMeta: r.meta(r.p.Pod.Name, r.p.Pod.Labels, plan.LabelRole, plan.RoleWorkspace)}
	var grace uint
	var deadline *int64
	for _, c := range r.p.Containers {
		if c.Role == plan.RoleAgent && !withAgent {
			continue
		}
		k, d, err := r.container(c, false)
		if err != nil {
			return nil, err
		}
		if c.Role == plan.RoleWorkspace && !withAgent {
			if k.Command, err = canaryOnPodAddresses(k.Command); err != nil {
				return nil, err
			}
		}
		pod.Spec.Containers = append(pod.Spec.Containers, k)
		grace = max(grace, c.StopTimeout)
		if c.Role == plan.RoleWorkspace {
			deadline = d
		}
		if c.Seccomp == plan.SeccompAgent {
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[corev1.SeccompContainerAnnotationKeyPrefix+c.Role] = r.seccompAnnotation()
		}
	}
	for _, h := range r.p.Pod.ExtraHosts {
		name, ip, ok := strings.Cut(h, ":")
		if !ok {
			return nil, fmt.Errorf("extra host %q: want NAME:IP", h)
		}
		pod.Spec.HostAliases = append(pod.Spec.HostAliases, corev1.HostAlias{IP: ip, Hostnames: []string{name}})
	}
	if len(r.p.Pod.Ports) > 0 {
		r.warn("ports %v are the workspace's container ports, not published on this host: use kubectl port-forward", r.p.Pod.Ports)
	}
	prepare, err := r.prepare()
	if err != nil {
		return nil, err
	}
	pod.Spec.InitContainers = []corev1.Container{prepare}
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	r.podBase(pod, grace, deadline)
	return pod, nil
}

// canaryOnPodAddresses makes the workspace's init listen for the canary on
// every address of its Pod rather than its loopback (see
// ClusterCanaryPort). Only where the agent has a Pod of its own: in
// network mode open it shares the workspace's, and on podman the canary
// stays on the pod's loopback.
func canaryOnPodAddresses(argv []string) ([]string, error) {
	for i := 0; i+1 < len(argv); i++ {
		if argv[i] == "--canary" && argv[i+1] == "tcp:"+plan.CanaryAddr {
			argv = slices.Clone(argv) // the plan's own, maybe
			argv[i+1] = clusterCanaryListen
			return argv, nil
		}
	}
	return nil, fmt.Errorf("the workspace's command %q has no canary at %s, which verify's cluster-egress row needs", argv, plan.CanaryAddr)
}

// prepare is the workspace Pod's init container (the package doc's
// handshake, step 1).
func (r *renderer) prepare() (corev1.Container, error) {
	args := helperargs.KubeInit{Install: InstallDir, Wait: r.marker()}
	if r.p.Agent().Network == plan.NetworkNone && r.agentSubPaths() {
		args.SubPathProbe = r.volumeDir(plan.VolumeHostShare) + "/" + subPathProbe
	}
	k := corev1.Container{Name: PrepareContainer, Image: r.helper, Command: []string{helperBin}, ImagePullPolicy: corev1.PullIfNotPresent}
	for _, v := range r.p.Volumes {
		dir := r.volumeDir(r.suffix(v.Name))
		k.VolumeMounts = append(k.VolumeMounts, corev1.VolumeMount{Name: r.claimVolume(v.Name), MountPath: dir})
		args.Chowns = append(args.Chowns, helperargs.Chown(dir, v.UID, v.GID))
	}
	k.VolumeMounts = append(k.VolumeMounts, corev1.VolumeMount{Name: r.helperVolume(), MountPath: InstallDir})
	for _, c := range r.p.Containers {
		if !copySecrets(c) {
			continue
		}
		src, dest := secretsDir+"/"+c.Role, secretCopiesDir+"/"+c.Role
		copies, err := r.emptyDir(c.Role+"-secrets", true, "1m")
		if err != nil {
			return k, err
		}
		k.VolumeMounts = append(k.VolumeMounts,
			corev1.VolumeMount{Name: r.secretVolume(c, 0o400), MountPath: src, ReadOnly: true},
			corev1.VolumeMount{Name: copies, MountPath: dest})
		args.Secrets = append(args.Secrets, helperargs.SecretCopy(src, dest, c.SecretUID))
	}
	k.Args = args.Args()
	root, no, yes := int64(0), false, true
	k.SecurityContext = &corev1.SecurityContext{
		RunAsUser: &root, RunAsGroup: &root,
		// What an extraction as root needs: owners, modes (setgid
		// directories), writing into the agent's directories. Nothing
		// else.
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"}},
		AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
	}
	return k, nil
}

func (r *renderer) agentPod() (*corev1.Pod, error) {
	r.volumes = map[string]corev1.Volume{}
	a := *r.p.Agent()
	uid, gid, err := numericUser(a.User)
	if err != nil || gid == nil || uid == 0 {
		return nil, fmt.Errorf("the agent's user %q: want a numeric UID:GID other than root", a.User)
	}
	agent, deadline, err := r.container(a, true)
	if err != nil {
		return nil, err
	}
	pod := &corev1.Pod{TypeMeta: typeMeta("v1", "Pod"), ObjectMeta: r.meta(plan.ContainerName(r.short, plan.RoleAgent), r.p.Pod.Labels, plan.LabelRole, plan.RoleAgent)}
	pod.Annotations = map[string]string{corev1.SeccompPodAnnotationKey: r.seccompAnnotation()}
	yes, no := true, false
	installArgs := helperargs.KubeInit{Install: InstallDir, Wait: r.marker()}
	if r.agentSubPaths() {
		installArgs.SubPathCheck = subPathCheck
	}
	install := corev1.Container{Name: InstallContainer, Image: r.helper, Command: []string{helperBin},
		Args:            installArgs.Args(),
		ImagePullPolicy: corev1.PullIfNotPresent,
		SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes},
		VolumeMounts: []corev1.VolumeMount{
			{Name: r.helperVolume(), MountPath: InstallDir},
			{Name: r.claimVolume(plan.ObjectName(r.short, plan.VolumeHostShare)), MountPath: r.volumeDir(plan.VolumeHostShare), ReadOnly: true},
		}}
	if installArgs.SubPathCheck != "" {
		install.VolumeMounts = append(install.VolumeMounts, corev1.VolumeMount{Name: r.claimVolume(plan.ObjectName(r.short, plan.VolumeHostShare)),
			MountPath: subPathCheck, SubPath: subPathProbe, ReadOnly: true})
	}
	pod.Spec.InitContainers = []corev1.Container{install}
	pod.Spec.Containers = []corev1.Container{agent}
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid, RunAsGroup: gid, RunAsNonRoot: &yes, SeccompProfile: r.agentSeccomp()}
	pod.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: r.selector(plan.RoleWorkspace)},
			TopologyKey:   corev1.LabelHostname,
		}}}}
	r.podBase(pod, a.StopTimeout, deadline)
	return pod, nil
}

package kubeclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/devaipod/devaipod/internal/helperargs"
	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/kube"
	"github.com/devaipod/devaipod/pod/plan"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/remotecommand"
)

// On podman the agent's network namespace has no interface but loopback
// and no route: the battery's network rows check exactly that, and its
// direct probes send only where no route exists. On a cluster the agent's
// Pod has the CNI's interface and routes; its deny-all NetworkPolicy, not
// their absence, keeps it in (docs/kubernetes.md). Those rows FAIL there
// by design, with these details; any other FAIL, or one of these rows
// with another detail, fails up as on podman.
var byDesignOnACluster = map[string]string{
	"net-interfaces": "up besides loopback",
	"net-routes":     "routes: ",
	"tcp-direct":     "not tried: this network namespace has a route",
	"udp-direct":     "not tried: this network namespace has a route",
	"ipv6-direct":    "not tried: this network namespace has a route",
	"dns-direct":     "not tried: this network namespace has a route",
}

// clusterEgressRow is the battery's row that tries TCP and UDP from the
// agent's Pod to the workspace Pod's canary on its cluster addresses
// (kube.ClusterCanaries): a PASS shows that the network drops what the
// agent sends there, which is what tcp-direct and udp-direct (and
// ipv6-direct, given an IPv6 address) would show without a route.
const clusterEgressRow = "cluster-egress"

// shownByClusterEgress are the rows of byDesignOnACluster that a PASS of
// clusterEgressRow stands in for: with an IPv6 canary, ipv6-direct too.
func shownByClusterEgress(canaries []string) []string {
	rows := []string{"tcp-direct", "udp-direct"}
	if slices.ContainsFunc(canaries, func(a string) bool {
		ap, err := netip.ParseAddrPort(a)
		return err == nil && ap.Addr().Is6() && !ap.Addr().Is4In6()
	}) {
		rows = append(rows, "ipv6-direct")
	}
	return rows
}

// egressCheckByDesign is the egress check's line that FAILs on a cluster
// by design (the check up runs in the agent under --no-verify).
const egressCheckByDesign = "FAIL no interface but loopback"

// ClusterNote is what the checks could not show on a cluster, for the
// user to know: the rows that FAILed by design, what cluster-egress showed
// in their place, and what rests on the NetworkPolicy object alone.
type ClusterNote struct {
	Check string // what the check is
	// Shown are the rows that FAILed by design (they do not send where a
	// route exists) whose attack cluster-egress made against Canaries,
	// and the network dropped.
	Shown    []string
	Canaries []string
	// Rows are the rows, or lines, that FAILed by design and that only
	// the deny-all NetworkPolicy selecting the agent's Pod answers for.
	Rows []string
}

func (n ClusterNote) String() string {
	var s []string
	if len(n.Shown) > 0 {
		s = append(s, fmt.Sprintf("%s FAIL on a cluster by design (the agent's Pod has the CNI's interface and routes, so they do not send), and %s showed in their place that the network drops the agent's TCP and UDP to its workspace's Pod (%s): the agent's NetworkPolicy is enforced",
			strings.Join(n.Shown, ", "), clusterEgressRow, strings.Join(n.Canaries, ", ")))
	}
	if len(n.Rows) > 0 {
		if len(n.Shown) > 0 {
			s = append(s, fmt.Sprintf("%s FAIL by design too; a deny-all NetworkPolicy selects the agent's Pod, but that it also stops DNS to the cluster's resolver, IPv6 and other destinations is not tried",
				strings.Join(n.Rows, ", ")))
		} else {
			s = append(s, fmt.Sprintf("%s FAIL on a cluster by design (the agent's Pod has the CNI's interface and routes); its deny-all NetworkPolicy keeps it in, which only a CNI plugin that enforces NetworkPolicy does: `devaipod verify`'s %s row tests that",
				strings.Join(n.Rows, ", "), clusterEgressRow))
		}
	}
	return n.Check + ": " + strings.Join(s, "; ")
}

type verifyRow struct {
	ID, Attack, Result, Detail string
}

// runClusterCheck runs one of the plan's checks. The verify battery runs
// with JSON output, so that its rows are judged by id, and with the
// workspace Pod's canary addresses (clusterCanaries). It passes when the
// only rows that FAIL are byDesignOnACluster's, with their details: those
// that cluster-egress stands in for (shownByClusterEgress) when it
// PASSed, the others when the agent's Pod is selected by a deny-all
// NetworkPolicy; the note then says what was let through, and why. The
// egress check (no cluster-egress there) likewise, on the policy alone.
func (c *Client) runClusterCheck(ctx context.Context, short string, ch plan.Check) (*ClusterNote, error) {
	argv := ch.Command
	battery := len(argv) > 1 && argv[0] == plan.HelperBin && argv[1] == "verify"
	var canaries []string
	var canaryErr error
	if battery {
		argv = append(slices.Clone(argv), "--output", "json")
		own, err := c.agentOwnPod(ctx, short)
		if err != nil {
			return nil, fmt.Errorf("containment check in %s: %w", ch.Container, err)
		}
		if own {
			// Without an address the battery runs without the row, and
			// the rows it stands in for FAIL, saying why (canaryErr).
			canaries, canaryErr = c.clusterCanaries(ctx, short)
			if canaryErr != nil && !errors.Is(canaryErr, errNoAddress) {
				return nil, &pod.CheckError{Check: ch, Output: canaryErr.Error()}
			}
			for _, a := range canaries {
				argv = append(argv, "--cluster-canary", a)
			}
		}
	}
	code, out, err := c.Exec(ctx, ch.Container, pod.ExecSpec{Cmd: argv})
	if err != nil {
		return nil, fmt.Errorf("containment check in %s: %w", ch.Container, err)
	}
	if code == 0 {
		return nil, nil
	}
	fail := &pod.CheckError{Check: ch, Output: strings.TrimSpace(out)}
	note := &ClusterNote{Check: ch.What}
	switch {
	case battery:
		var rep struct{ Rows []verifyRow }
		if json.Unmarshal([]byte(out), &rep) != nil {
			return nil, fail
		}
		clusterPass := slices.ContainsFunc(rep.Rows, func(r verifyRow) bool { return r.ID == clusterEgressRow && r.Result == "PASS" })
		shown := shownByClusterEgress(canaries)
		var text []string
		for _, r := range rep.Rows {
			if r.Result != "FAIL" {
				continue
			}
			want, ok := byDesignOnACluster[r.ID]
			switch {
			case !ok || !strings.HasPrefix(r.Detail, want):
				text = append(text, fmt.Sprintf("FAIL %s (%s): %s", r.ID, r.Attack, r.Detail))
			case slices.Contains(shown, r.ID) && clusterPass:
				note.Shown = append(note.Shown, r.ID)
			case slices.Contains(shown, r.ID):
				why := ""
				if canaryErr != nil {
					why = " (" + canaryErr.Error() + ")"
				}
				text = append(text, fmt.Sprintf("FAIL %s (%s): %s; and %s did not show that the network drops it%s", r.ID, r.Attack, r.Detail, clusterEgressRow, why))
			default:
				note.Rows = append(note.Rows, r.ID)
			}
		}
		if len(text) > 0 || len(note.Rows)+len(note.Shown) == 0 {
			if len(text) > 0 {
				fail.Output = strings.Join(text, "\n")
			}
			return nil, fail
		}
		if len(note.Shown) > 0 {
			note.Canaries = canaries
		}
	case len(argv) > 1 && argv[0] == plan.HelperBin && argv[1] == "egress-check":
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			switch {
			case strings.HasPrefix(line, egressCheckByDesign):
				note.Rows = append(note.Rows, "no interface but loopback")
			case strings.HasPrefix(line, "FAIL"):
				return nil, fail
			}
		}
		if len(note.Rows) == 0 {
			return nil, fail
		}
	default:
		return nil, fail
	}
	if len(note.Rows) > 0 {
		if err := c.agentDenyAll(ctx, short); err != nil {
			fail.Output += "\n(" + err.Error() + ")"
			return nil, fail
		}
	}
	return note, nil
}

// agentOwnPod tells whether the agent of pod short has a Pod of its own
// (network modes allowlist and none), rather than sharing the
// workspace's (open), where the canary stays on loopback.
func (c *Client) agentOwnPod(ctx context.Context, short string) (bool, error) {
	p, _, err := c.locate(ctx, plan.ContainerName(short, plan.RoleAgent))
	if err != nil {
		return false, err
	}
	return p.Labels[plan.LabelRole] == plan.RoleAgent, nil
}

// batteryInAgent tells whether an exec is the verify battery in the agent
// of a pod (pod.Verify's, or a check's), and of which pod; not when it
// names its cluster canaries already.
func batteryInAgent(container string, argv []string) (string, bool) {
	s, ok := strings.CutSuffix(container, "-"+plan.RoleAgent)
	if !ok || !strings.HasPrefix(s, plan.Prefix) || len(argv) < 2 || argv[0] != plan.HelperBin || argv[1] != "verify" ||
		slices.Contains(argv, "--cluster-canary") {
		return "", false
	}
	return shortOf(s), true
}

// clusterCanaries are the addresses of the workspace Pod's canary (its
// Pod's addresses, kube.ClusterCanaries) for verify's cluster-egress row
// in the agent, once the same row, run in the workspace, has reached them
// all over TCP and UDP: the canary listens there and the Pod's kernel
// refuses UDP to its port, so that the agent's failure to reach them is
// the network's doing, not the target's absence.
func (c *Client) clusterCanaries(ctx context.Context, short string) ([]string, error) {
	p, ct, err := c.locate(ctx, plan.ContainerName(short, plan.RoleWorkspace))
	if err != nil {
		return nil, err
	}
	canaries := kube.ClusterCanaries(podIPs(p))
	if len(canaries) == 0 {
		return nil, fmt.Errorf("the workspace's Pod %s: %w, so %s cannot test the agent's NetworkPolicy", p.Name, errNoAddress, clusterEgressRow)
	}
	argv := plan.HelperCommand(helperargs.Verify{ClusterCanaries: canaries, Only: []string{clusterEgressRow}, Output: "json"})
	var out pod.SyncBuffer
	if _, err := c.stream(ctx, p, ct, argv, remotecommand.StreamOptions{Stdout: &out, Stderr: &out}); err != nil {
		return nil, fmt.Errorf("reach the canary from the workspace's Pod: %w", err)
	}
	var rep struct{ Rows []verifyRow }
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		return nil, fmt.Errorf("reach the canary from the workspace's Pod: %s", strings.TrimSpace(out.String()))
	}
	for _, r := range rep.Rows {
		if r.ID == clusterEgressRow && r.Result == "FAIL" && !strings.Contains(r.Detail, "not reached") {
			return canaries, nil
		}
	}
	return nil, fmt.Errorf("the workspace's canary does not answer at its own Pod's addresses (%s): %s cannot test the agent's NetworkPolicy against it (a pod rendered before the canary listened there: recreate it)",
		strings.TrimSpace(out.String()), clusterEgressRow)
}

// errNoAddress: the workspace's Pod has no address (yet): the battery
// runs without cluster-egress, and what only that row shows is not shown.
var errNoAddress = errors.New("no address yet")

func podIPs(p *corev1.Pod) []string {
	var ips []string
	for _, ip := range p.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if len(ips) == 0 && p.Status.PodIP != "" {
		ips = append(ips, p.Status.PodIP)
	}
	return ips
}

// agentDenyAll checks that a NetworkPolicy of the pod selects its agent's
// Pod and allows it no egress and no ingress, and that no other policy in
// the namespace selects the Pod with a rule: the policies that select a Pod
// add up, so a namespace's "allow DNS" or "allow the internet" for every
// Pod would open the agent's way out past the proxy. Policies of other
// kinds (AdminNetworkPolicy, a CNI plugin's own global policies) are not
// seen; docs/kubernetes.md says so.
func (c *Client) agentDenyAll(ctx context.Context, short string) error {
	agent, _, err := c.locate(ctx, plan.ContainerName(short, plan.RoleAgent))
	if err != nil {
		return err
	}
	list, err := c.cs.NetworkingV1().NetworkPolicies(c.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	denied := false
	for _, np := range list.Items {
		if !selects(np, agent) {
			continue
		}
		if opens := policyOpens(np); opens != "" {
			return fmt.Errorf("NetworkPolicy %s also selects the agent's Pod %s and allows it %s; policies add up, so the agent is not denied all traffic: narrow its podSelector to leave out Pods labelled %s=%s",
				np.Name, agent.Name, opens, plan.LabelRole, plan.RoleAgent)
		}
		if np.Labels[plan.LabelPod] == short && denyAll(np) {
			denied = true
		}
	}
	if !denied {
		return fmt.Errorf("no NetworkPolicy denies the agent's Pod %s all traffic", agent.Name)
	}
	return nil
}

// policyOpens says what np allows the Pods it selects ("" for nothing):
// any rule, even one that names no peer, lets something through.
func policyOpens(np networkingv1.NetworkPolicy) string {
	var opens []string
	if len(np.Spec.Egress) > 0 {
		opens = append(opens, "egress")
	}
	if len(np.Spec.Ingress) > 0 {
		opens = append(opens, "ingress")
	}
	return strings.Join(opens, " and ")
}

func selects(np networkingv1.NetworkPolicy, p *corev1.Pod) bool {
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	return err == nil && sel.Matches(k8slabels.Set(p.Labels))
}

func denyAll(np networkingv1.NetworkPolicy) bool {
	return slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) &&
		slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) &&
		len(np.Spec.Egress) == 0 && len(np.Spec.Ingress) == 0
}

package kubeclient

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/plan"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
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

// egressCheckByDesign is the egress check's line that FAILs on a cluster
// by design (the check up runs in the agent under --no-verify).
const egressCheckByDesign = "FAIL no interface but loopback"

// ClusterNote is what the checks could not show on a cluster, for the
// user to know: the rows that FAILed by design, and what stands in for
// them.
type ClusterNote struct {
	Check string   // what the check is
	Rows  []string // the rows, or lines, that FAILed by design
}

func (n ClusterNote) String() string {
	return fmt.Sprintf("%s: %s FAIL on a cluster by design (the agent's Pod has the CNI's interface and routes); its deny-all NetworkPolicy keeps it in, which only a CNI plugin that enforces NetworkPolicy does: `devaipod verify` cannot see that",
		n.Check, strings.Join(n.Rows, ", "))
}

type verifyRow struct {
	ID, Attack, Result, Detail string
}

// runClusterCheck runs one of the plan's checks. The verify battery runs
// with JSON output, so that its rows are judged by id: it passes when the
// only rows that FAIL are byDesignOnACluster's, with their details, and
// the agent's Pod is selected by a deny-all NetworkPolicy; the note then
// says what was let through. The egress check likewise.
func (c *Client) runClusterCheck(ctx context.Context, short string, ch plan.Check) (*ClusterNote, error) {
	argv := ch.Command
	battery := len(argv) > 1 && argv[0] == plan.HelperBin && argv[1] == "verify"
	if battery {
		argv = append(slices.Clone(argv), "--output", "json")
	}
	code, out, err := c.Exec(ctx, ch.Container, pod.ExecSpec{Cmd: argv})
	if err != nil {
		return nil, fmt.Errorf("containment check in %s: %w", ch.Container, err)
	}
	if code == 0 {
		return nil, nil
	}
	fail := &pod.CheckError{Check: ch, Output: strings.TrimSpace(out)}
	var rows []string
	switch {
	case battery:
		var rep struct{ Rows []verifyRow }
		if json.Unmarshal([]byte(out), &rep) != nil {
			return nil, fail
		}
		var text []string
		for _, r := range rep.Rows {
			if r.Result != "FAIL" {
				continue
			}
			if want, ok := byDesignOnACluster[r.ID]; ok && strings.HasPrefix(r.Detail, want) {
				rows = append(rows, r.ID)
				continue
			}
			text = append(text, fmt.Sprintf("FAIL %s (%s): %s", r.ID, r.Attack, r.Detail))
		}
		if len(text) > 0 || len(rows) == 0 {
			if len(text) > 0 {
				fail.Output = strings.Join(text, "\n")
			}
			return nil, fail
		}
	case len(argv) > 1 && argv[0] == plan.HelperBin && argv[1] == "egress-check":
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			switch {
			case strings.HasPrefix(line, egressCheckByDesign):
				rows = append(rows, "no interface but loopback")
			case strings.HasPrefix(line, "FAIL"):
				return nil, fail
			}
		}
		if len(rows) == 0 {
			return nil, fail
		}
	default:
		return nil, fail
	}
	if err := c.agentDenyAll(ctx, short); err != nil {
		fail.Output += "\n(" + err.Error() + ")"
		return nil, fail
	}
	return &ClusterNote{Check: ch.What, Rows: rows}, nil
}

// agentDenyAll checks that a NetworkPolicy of the pod selects its agent's
// Pod and allows it no egress and no ingress.
func (c *Client) agentDenyAll(ctx context.Context, short string) error {
	agent, _, err := c.locate(ctx, plan.ContainerName(short, plan.RoleAgent))
	if err != nil {
		return err
	}
	list, err := c.cs.NetworkingV1().NetworkPolicies(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector(short)})
	if err != nil {
		return err
	}
	for _, np := range list.Items {
		if selects(np, agent) && denyAll(np) {
			return nil
		}
	}
	return fmt.Errorf("no NetworkPolicy denies the agent's Pod %s all traffic", agent.Name)
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

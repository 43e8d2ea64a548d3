// Package kubeclient is devaipod's Kubernetes engine: the only code that
// talks to a cluster (client-go). It applies the objects pod/kube renders
// from a plan with server-side apply (field manager "devaipod"), all or
// nothing; waits for their Pods with progress; and implements pod.Engine
// where a cluster can do what podman does, so that list, status, logs,
// exec, delete and verify work on a cluster as on podman:
//
//   - Objects finds everything labelled io.devaipod.pod in the namespace and
//     maps it to pod.Object kinds: the Pods of one devaipod pod become one
//     KindPod object (its labels are the io.devaipod.* labels and
//     annotations of its Pods, its state aggregated) and a KindContainer per
//     container (named as on podman, devaipod-NAME-ROLE); PersistentVolumeClaims
//     are KindVolume, Secrets KindSecret. NetworkPolicies go with the pod
//     (KindPod's Remove deletes them after its Pods are gone, so that the
//     agent is never left running without its deny-all policy).
//   - Exec, Attach and CopyInto run through the API server's exec
//     subresource (websocket, falling back to SPDY, as kubectl does). A
//     cluster's exec cannot switch user, environment or directory: Exec
//     wraps a command that asks for a directory or variables in sh -c, and
//     refuses a user other than the one the container runs as.
//   - Logs reads the container's log (follow, tail).
//   - StartPod and StopPod, and what only podman does (images, builds,
//     creating objects one by one), return a *NotSupportedError.
//
// Up is the cluster's side of `devaipod up --engine kube`: render the plan
// (pod/kube), claim the name (a create of the pod's meta ConfigMap),
// apply, wait for the workspace Pod's init container, stream the
// repository and the agent's git directory into it (pod/kube's handshake),
// wait for the Pods, then run what pod.Up runs after it starts a pod: the
// readiness probe, the lifecycle commands, the plan's checks and the task.
// The checks are judged as on podman, but for the verify battery's rows
// that need an agent without an interface (see byDesignOnACluster): the
// direct TCP and UDP probes pass when the battery's cluster-egress row
// PASSed, which the engine gives the workspace Pod's addresses (Exec adds
// --cluster-canary to every battery in an agent's own Pod, pod.Verify's
// too, once the workspace reached its own canary there): the network
// dropped the agent's TCP and UDP to a target that answers. The others
// pass when a deny-all NetworkPolicy selects the agent's Pod.
//
// Connect reads the kubeconfig as kubectl does (KUBECONFIG, else
// ~/.kube/config), with a context and a namespace that override its own.
package kubeclient

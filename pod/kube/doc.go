// Package kube renders a plan (pod/plan) as Kubernetes objects: the same
// pod, with the same promises, for a cluster or for `podman kube play`.
// Render is pure, like plan.Build: it returns typed k8s.io/api objects
// (Manifests), which YAML and JSON print and which an engine applies.
//
// # Layout
//
// Containers of one Kubernetes Pod share one network namespace, so the
// agent, which must have no network, cannot share a Pod with the workspace
// and the proxy. As on podman, it gets a namespace of its own:
//
//   - Pod devaipod-NAME: the init container "prepare", then the workspace,
//     the proxy and the gator (the pod's network, trusted side);
//   - Pod devaipod-NAME-agent: the init container "install", then the
//     agent; Pod Security "restricted" (non-root uid 1000, every capability
//     dropped, no privilege escalation, read-only root, seccomp Localhost
//     devaipod-agent.json or RuntimeDefault, no service-account token, no
//     service links);
//   - a NetworkPolicy that selects the agent's Pod and allows nothing in
//     and nothing out (it reaches the proxy and the gator through unix
//     sockets on shared volumes, as on podman); a second one refuses every
//     connection into the workspace's Pod but the agent Pod's to the
//     canary's port. A NetworkPolicy is enforced only by a CNI plugin that
//     implements it: on a cluster without one the agent's egress is open.
//     So the workspace's canary listens on every address of its Pod, not
//     on its loopback as on podman (ClusterCanaryPort), and verify's
//     cluster-egress row, given those addresses (ClusterCanaries), tries
//     TCP and UDP to it from the agent's Pod: it FAILs where the policy is
//     not enforced. Under `podman kube play`, which ignores NetworkPolicy,
//     the agent's Pod is played with --network none instead;
//   - one PersistentVolumeClaim per volume of the plan (same names), and a
//     required podAffinity on kubernetes.io/hostname that puts the agent's
//     Pod on the workspace's node, where ReadWriteOnce volumes and the unix
//     sockets on them can be shared;
//   - Secrets for the trusted values and credentials, one per container
//     that needs any (keys: the variables). The workspace mounts its own
//     root-only (0400) at plan.SecretDir, as on podman; the proxy's and the
//     gator's are mounted only into "prepare", which copies them into a
//     memory emptyDir owned by that container's uid, readable by it alone
//     (a Secret volume cannot be given to one uid without an fsGroup,
//     which would re-own the shared workspace volume too).
//
// In network mode "open" the agent joins the workspace's Pod (it shares
// the pod's network by definition) and no agent Pod or policy is made.
//
// The helper binary cannot be mounted as an image (image volumes are new
// in Kubernetes and absent from podman 4.3): each Pod's init container
// copies it from the helper image into an emptyDir that the containers
// mount read-only at plan.HelperMount.
//
// # The handshake
//
// On podman, pod.Up copies the repository into the workspace volume, and
// the agent's git directory into agent-git, before it starts the pod. Here
// the objects are applied at once, so the copy is an explicit handshake,
// the same on a cluster and under `podman kube play`:
//
//  1. The workspace Pod's init container (Seed.Container, "prepare") runs
//     as root with CHOWN, DAC_OVERRIDE, FOWNER and FSETID only. It copies
//     the helper out, gives each volume's root its owner (plan.VolumeSpec
//     UID/GID), copies the proxy's and the gator's secrets, then waits for
//     the marker Seed.Marker. No other container of the Pod starts before
//     it ends.
//  2. The engine waits for that container to run, then streams into it on
//     standard input, with an exec (kubectl exec -i, podman exec -i):
//     source.TarTree of the clone (as pod.Up's copyTree makes it) to
//     Seed.Workspace, then source.TarGitDir of source.AgentGitDir to
//     Seed.AgentGit, which creates the marker once the stream is in.
//  3. "prepare" sees the marker and ends; the workspace Pod's containers
//     start. The agent Pod's init container ("install") waits for the same
//     marker (it mounts the host-share volume read-only) before the agent
//     starts: the agent's subPath mounts of paths inside the copy need them
//     to exist. A Pod restarted later finds the marker and goes on. When
//     the agent has subPath mounts, "install" also requires a probe that
//     "prepare" made, mounted by subPath: a runtime that ignores subPath
//     (podman before 4.4) mounts the whole volume there, and the agent
//     does not start, rather than start with the wrong mounts.
//
// Then the engine does what pod.Up does after StartPod: the lifecycle
// commands and the readiness probe in the workspace container, the checks
// in the agent container (Manifests.Agent names the Pod; the container is
// plan.RoleAgent).
//
// Under `podman kube play` the play of the workspace Pod's file blocks
// until "prepare" ends (podman runs init containers to completion before
// it starts the others): run it in the background, do step 2 against the
// container devaipod-NAME-prepare, then play the agent's Pod with
// --network none.
//
// # Labels
//
// Every object carries the plan's labels whose values Kubernetes accepts
// as label values (io.devaipod.pod, role, version, commit, pr, pool...), so
// that label selection works as with the podman engine. The pod's labels
// whose values it refuses (the repository URL, the task, the verify
// arguments as JSON) are the data of the ConfigMap MetaConfigMap(NAME),
// keyed by label: not annotations, which podman 4.3's kube play refuses
// longer than 63 characters.
package kube

// Package pod is devaipod as a library: Create turns a Request (a
// repository, the user's configuration, flags) into a running pod, and
// Delete, List, Status, Attach, Verify, RunLifecycle, EditPolicy and
// AuditLog act on pods that exist. It builds the plan with package plan
// (a pure value that lists every podman object, with its security
// settings) and applies it through Engine, a small interface defined here
// and implemented by package pod/podman, the only code that talks to
// podman. docs/architecture.md maps the packages and how a request becomes
// a pod.
package pod

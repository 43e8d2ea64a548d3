// Package podman is the podman engine: it implements pod.Engine over
// podman's REST API with podman's Go bindings, and is the only package of
// devaipod that imports them (a test in internal/layering holds that).
// Connect finds or starts the user's podman service.
package podman

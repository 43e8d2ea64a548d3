// Package pod composes and runs a devaipod pod: it turns the user's
// configuration and a source repository into a plan (a pure value that lists
// every podman object to create, with its security settings) and applies that
// plan through a small engine interface. It is the only package that talks to
// podman; the helper binary that runs inside the containers never links it.
package pod

// Package plan turns a configuration and a source into a Plan: every podman
// object a pod consists of (pod, volumes, secrets, containers), with the
// settings that contain the agent, and what up checks before it says ready.
// Build is a pure function: it touches nothing but the ResolveImage function
// it is given, links no podman, and is golden-tested (testdata/); --dry-run
// prints its result. The podman adapter (package pod/podman) translates
// the plan's specs into podman's, and its tests read the same golden files.
package plan

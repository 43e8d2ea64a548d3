// Package layering holds the test that keeps devaipod's packages in the
// layers docs/architecture.md draws: which package may import which, that
// only pod/podman talks to podman, and that the doc names every package.
// It has no code of its own.
package layering

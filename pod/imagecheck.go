package pod

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/devaipod/devaipod/pod/plan"
)

// The helper image says what it is and which devaipod built it: LabelImage
// is "helper" (images/helper/Containerfile) and plan.LabelVersion the
// version of the binaries in it (hack/build-images.sh asks them).
const (
	LabelImage  = "io.devaipod.image"
	ImageHelper = "helper"
)

// RebuildImages is the one command that rebuilds devaipod's images, run in
// devaipod's source tree by the user who runs devaipod (the images live in
// that user's podman storage).
const RebuildImages = "make images"

// StaleImageError says that the helper image was built by another devaipod
// than this one: the host writes the helper's command lines
// (internal/helperargs), and a helper of another version may not read them
// as they were meant.
type StaleImageError struct {
	Image        string
	ImageVersion string // "" when the image carries no version (built before devaipod labelled it)
	Version      string // this devaipod's
	// Refuse is set when both are release versions and the image's is the
	// older: up refuses such an image, and warns about every other
	// mismatch (development builds rebuild the image often, and a dirty
	// tree keeps its version).
	Refuse bool
}

func (e *StaleImageError) Error() string {
	if e.ImageVersion == "" {
		return fmt.Sprintf("the helper image %s carries no devaipod version (it was built before devaipod labelled it); this devaipod is %s", e.Image, e.Version)
	}
	older := ""
	if e.Refuse {
		older = " (older)"
	}
	return fmt.Sprintf("the helper image %s is from devaipod %s%s, this devaipod is %s", e.Image, e.ImageVersion, older, e.Version)
}

// Fix is what to run about it.
func (e *StaleImageError) Fix() string {
	return fmt.Sprintf("rebuild it with `%s` in devaipod's source tree at version %s, as the user who runs devaipod", RebuildImages, e.Version)
}

// CheckImageVersion compares the version a helper image carries with
// version (devaipod's own, plan.Version). It returns nil when the image is
// not a helper image (the workspace's, for one) or the versions are equal.
func CheckImageVersion(image string, c plan.ImageConfig, version string) *StaleImageError {
	if c.Labels[LabelImage] != ImageHelper {
		return nil
	}
	have := c.Labels[plan.LabelVersion]
	if have == version {
		return nil
	}
	e := &StaleImageError{Image: image, ImageVersion: have, Version: version}
	if a, ok := releaseVersion(have); ok {
		if b, ok := releaseVersion(version); ok {
			e.Refuse = compareRelease(a, b) < 0
		}
	}
	return e
}

var releaseRe = regexp.MustCompile(`^v?(\d+)\.(\d+)\.(\d+)$`)

// releaseVersion parses a release version, vMAJOR.MINOR.PATCH (what `git
// describe` prints on a tag, and go install MODULE@TAG records). Anything
// else (a commit, a -dirty tree, commits past a tag, "dev") is not one.
func releaseVersion(v string) ([3]int, bool) {
	m := releaseRe.FindStringSubmatch(v)
	if m == nil {
		return [3]int{}, false
	}
	var r [3]int
	for i := range r {
		n, err := strconv.Atoi(m[i+1])
		if err != nil {
			return [3]int{}, false
		}
		r[i] = n
	}
	return r, true
}

func compareRelease(a, b [3]int) int {
	for i := range a {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

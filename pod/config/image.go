package config

import (
	"fmt"
	"strings"

	"github.com/distribution/reference"
)

// ValidateImage checks an image reference before anything is pulled or
// created: an image ID (64 hexadecimal digits, with or without "sha256:"),
// or a name in the grammar that podman and docker read
// ([HOST[:PORT]/]PATH[:TAG][@DIGEST], the path in lower case; a name
// without a host is a short name, which podman resolves through its
// registries.conf). The error names the reference and says why.
func ValidateImage(ref string) error {
	if ref == "" {
		return fmt.Errorf("image reference is empty")
	}
	if id := strings.TrimPrefix(ref, "sha256:"); len(id) == 64 && strings.Trim(id, "0123456789abcdef") == "" {
		return nil
	}
	if strings.Contains(ref, "://") {
		return fmt.Errorf("image %q: give the image's name, without a scheme (such as docker.io/library/debian:12)", ref)
	}
	if _, err := reference.ParseNormalizedNamed(ref); err != nil {
		why := strings.TrimPrefix(err.Error(), "invalid reference format: ")
		if why == "invalid reference format" {
			why = "not an image name"
		}
		return fmt.Errorf("image %q: %s (a name is [HOST[:PORT]/]PATH[:TAG][@DIGEST], such as docker.io/library/debian:12 or localhost/NAME:TAG)", ref, why)
	}
	return nil
}

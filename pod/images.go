package pod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/distribution/reference"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
)

// Pull policies of up --pull, as podman's --pull names them.
const (
	PullMissing = "missing"
	PullAlways  = "always"
	PullNever   = "never"
)

// PullPolicies lists them, for flags and their completion.
var PullPolicies = []string{PullMissing, PullAlways, PullNever}

// Pullable tells whether ref can come from a registry: not an image id, and
// not under localhost/, podman's name for images built on this machine.
func Pullable(ref string) bool {
	id := strings.TrimPrefix(ref, "sha256:")
	isID := len(id) >= 12 && strings.Trim(id, "0123456789abcdef") == ""
	return !isID && !strings.HasPrefix(ref, "localhost/")
}

// BuildSpec is an image build from a Dockerfile (a devcontainer's build).
type BuildSpec struct {
	Dockerfile string
	Context    string
	Args       map[string]string
	Target     string
	Tag        string
	// NoPull builds with pulls off: a missing base image is an error (an
	// untrusted repository's, which up pulled without logins first).
	NoPull bool
}

// PullOptions say how to pull an image.
type PullOptions struct {
	// Anonymous pulls it with no registry login at all, from a registry
	// on a public address or one of PrivateRegistries (an untrusted
	// repository's image: see imageSet.ensureAnonymous).
	Anonymous         bool
	PrivateRegistries []string
}

// PullError says an image could not be pulled from its registry.
type PullError struct {
	Image string
	Err   error
}

func (e *PullError) Error() string { return fmt.Sprintf("pull %s: %v", e.Image, e.Err) }
func (e *PullError) Unwrap() error { return e.Err }

// imageSet knows the configs of the images an up needs, pulling them as
// its policy says. A missing image is better reported before anything is
// created than as a create failure.
type imageSet struct {
	eng     Engine
	policy  string
	configs map[string]plan.ImageConfig
	pulled  map[string]bool
	log     func(string)
	// warn hears what the user should know (a helper image of another
	// devaipod version); nil drops it. lookUp runs alongside the clone,
	// which reports too: its warnings wait in pending for the next ensure.
	warn    func(string)
	pending []string
	checked map[string]bool // images whose version was checked
	out     io.Writer       // podman's pull progress
	// anonymous are the images pulled with no registry login: an
	// untrusted repository named them; privateRegistries the registries
	// on private addresses they may come from ([workspace]
	// private_registries).
	anonymous         map[string]bool
	privateRegistries []string
}

// record keeps an image's config, after checking that a helper image is
// this devaipod's (once per image): an older release refuses, any other
// mismatch is a warning.
func (s *imageSet) record(img string, c plan.ImageConfig) error {
	if !s.checked[img] {
		if s.checked == nil {
			s.checked = map[string]bool{}
		}
		s.checked[img] = true
		if e := CheckImageVersion(img, c, plan.Version); e != nil {
			if e.Refuse {
				return e
			}
			s.pending = append(s.pending, e.Error()+": "+e.Fix())
		}
	}
	s.configs[img] = c
	return nil
}

// lookUp records the configs of the images that are present, without
// pulling: it runs while the repository is cloned, before the plan (and so
// every image) is known.
func (s *imageSet) lookUp(ctx context.Context, images ...string) error {
	for _, img := range images {
		c, err := s.eng.ImageConfig(ctx, img)
		if errors.Is(err, ErrNotFound) {
			continue
		} else if err != nil {
			return err
		}
		if err := s.record(img, c); err != nil {
			return err
		}
	}
	return nil
}

// ensure returns an image's config, pulling it first when the policy says
// so: always (once per up), or when it is missing.
func (s *imageSet) ensure(ctx context.Context, img string) (plan.ImageConfig, error) {
	defer s.flush()
	if s.anonymous[img] && !s.pulled[img] {
		if err := s.ensureAnonymous(ctx, img); err != nil {
			return plan.ImageConfig{}, err
		}
	}
	always := s.policy == PullAlways && Pullable(img) && !s.pulled[img]
	if c, ok := s.configs[img]; ok && !always {
		return c, nil
	}
	if always {
		if err := s.pull(ctx, img); err != nil {
			return plan.ImageConfig{}, err
		}
	}
	c, err := s.eng.ImageConfig(ctx, img)
	if errors.Is(err, ErrNotFound) && s.policy == PullMissing && Pullable(img) {
		if err := s.pull(ctx, img); err != nil {
			return c, err
		}
		c, err = s.eng.ImageConfig(ctx, img)
	}
	if errors.Is(err, ErrNotFound) {
		return c, missingImage(img, s.policy)
	} else if err != nil {
		return c, err
	}
	if err := s.record(img, c); err != nil {
		return c, err
	}
	return c, nil
}

// ensureAnonymous makes sure that an image an untrusted repository named
// is what its registry gives anyone, and nothing of this host's: devaipod's
// own default image, or pulled without registry logins (the engine loads
// it only when the image here differs). An image built or imported here,
// or pulled with the person's logins, may hold what they put in.
func (s *imageSet) ensureAnonymous(ctx context.Context, img string) error {
	switch {
	case img == config.DefaultImage:
		return nil
	case !Pullable(img):
		return fmt.Errorf("the repository is not trusted, and it names %s, an image of this host (built or imported here, not pulled), which may hold what a build of yours put in: trust the repository, or pass --image", img)
	case s.policy == PullNever:
		return fmt.Errorf("the repository is not trusted, and --pull is never: devaipod cannot check that %s on this host is what its registry gives anyone, all an untrusted repository may have: trust the repository, or drop --pull never", img)
	}
	delete(s.configs, img) // what was looked up before may change
	if err := s.pull(ctx, img); err != nil {
		return err
	}
	// Podman finds a short name among this host's images first
	// (localhost/NAME, its search registries): it must find the one just
	// checked, which is the name in full.
	full, err := reference.ParseNormalizedNamed(img)
	if err != nil {
		return fmt.Errorf("%s: %w", img, err)
	}
	if name := reference.TagNameOnly(full).String(); name != img {
		here, err := s.eng.ImageConfig(ctx, img)
		if err != nil {
			return fmt.Errorf("%s: %w", img, err)
		}
		checked, err := s.eng.ImageConfig(ctx, name)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if here.ID != checked.ID {
			return fmt.Errorf("the repository is not trusted, and it names %s, which podman finds on this host as another image than %s, the one its registry gives anyone: name it in full, or trust the repository", img, name)
		}
	}
	return nil
}

// flush passes on the pending warnings.
func (s *imageSet) flush() {
	for _, w := range s.pending {
		if s.warn != nil {
			s.warn(w)
		}
	}
	s.pending = nil
}

func (s *imageSet) pull(ctx context.Context, img string) error {
	s.log("pulling " + img + "...")
	o := PullOptions{Anonymous: s.anonymous[img], PrivateRegistries: s.privateRegistries}
	if err := s.eng.PullImage(ctx, img, o, s.out); err != nil {
		return &PullError{Image: img, Err: err}
	}
	s.pulled[img] = true
	return nil
}

// missingImage says what to do about an image podman does not have after
// ensure did what the policy allows.
func missingImage(img, policy string) error {
	switch {
	case Pullable(img) && policy == PullNever:
		return fmt.Errorf("image %s is not in podman's storage and --pull is never: pull it (podman pull %s) or drop --pull never", img, img)
	case Pullable(img):
		return fmt.Errorf("image %s was pulled, yet podman does not find it by that name: name it by tag or digest alone", img)
	case img == config.DefaultImage || img == config.DefaultHelperImage:
		return fmt.Errorf("image %s is not in podman's storage: build devaipod's images with `make images` (or pass --image)", img)
	}
	return fmt.Errorf("image %s is not in podman's storage: build it, or name another with --image or [workspace] image", img)
}

package pod

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/internal/gittest"
	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
)

func helperConfig(version string) plan.ImageConfig {
	l := map[string]string{LabelImage: ImageHelper}
	if version != "" {
		l[plan.LabelVersion] = version
	}
	return plan.ImageConfig{Labels: l}
}

func TestCheckImageVersion(t *testing.T) {
	for _, tt := range []struct {
		name       string
		image      plan.ImageConfig
		cli        string
		stale      bool
		refuse     bool
		errContain string
	}{
		{"same release", helperConfig("v1.2.3"), "v1.2.3", false, false, ""},
		{"same dirty", helperConfig("623fa5b-dirty"), "623fa5b-dirty", false, false, ""},
		{"not a helper image", plan.ImageConfig{Labels: map[string]string{plan.LabelVersion: "v0.1.0"}}, "v1.0.0", false, false, ""},
		{"no labels at all", plan.ImageConfig{}, "v1.0.0", false, false, ""},
		{"older release refuses", helperConfig("v1.2.3"), "v1.3.0", true, true, "is from devaipod v1.2.3 (older), this devaipod is v1.3.0"},
		{"older patch refuses", helperConfig("1.2.3"), "v1.2.10", true, true, "(older)"},
		{"newer release warns", helperConfig("v2.0.0"), "v1.9.9", true, false, "is from devaipod v2.0.0, this devaipod is v1.9.9"},
		{"dev cli warns", helperConfig("v1.2.3"), "dev", true, false, "this devaipod is dev"},
		{"commits past a tag warn", helperConfig("v1.2.3"), "v1.2.3-4-gabcdef0", true, false, ""},
		{"dirty image warns", helperConfig("v1.2.3-dirty"), "v1.2.4", true, false, ""},
		{"unlabelled helper warns", helperConfig(""), "v1.2.3", true, false, "carries no devaipod version"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := CheckImageVersion("localhost/devaipod-helper:latest", tt.image, tt.cli)
			if (e != nil) != tt.stale {
				t.Fatalf("stale = %v, want %v (%v)", e != nil, tt.stale, e)
			}
			if e == nil {
				return
			}
			if e.Refuse != tt.refuse {
				t.Errorf("refuse = %v, want %v", e.Refuse, tt.refuse)
			}
			if !strings.Contains(e.Error(), tt.errContain) || !strings.Contains(e.Error(), "localhost/devaipod-helper:latest") {
				t.Errorf("error %q: want the image and %q", e.Error(), tt.errContain)
			}
			if fix := e.Fix(); !strings.Contains(fix, "`make images`") || !strings.Contains(fix, tt.cli) {
				t.Errorf("fix %q: want `make images` and the version %s", fix, tt.cli)
			}
		})
	}
}

// imageEngine is the fake engine with images that carry labels.
type imageEngine struct {
	*fakeEngine
	images map[string]plan.ImageConfig
}

func (e *imageEngine) ImageConfig(_ context.Context, img string) (plan.ImageConfig, error) {
	if c, ok := e.images[img]; ok {
		return c, nil
	}
	return plan.ImageConfig{}, ErrNotFound
}

// TestCreateChecksHelperVersion: up refuses a helper image of an older
// release before it creates anything, and warns about any other mismatch.
func TestCreateChecksHelperVersion(t *testing.T) {
	defer func(v string) { plan.Version = v }(plan.Version)
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	ctx := context.Background()
	repo := gittest.Repo(t)
	gittest.Git(t, repo, []string{"remote", "add", "origin", "https://git.example.test/o/r.git"})
	engine := func(helperVersion string) *imageEngine {
		return &imageEngine{fakeEngine: newFake(), images: map[string]plan.ImageConfig{
			config.DefaultImage:       {},
			config.DefaultHelperImage: helperConfig(helperVersion),
		}}
	}

	t.Run("older release refuses", func(t *testing.T) {
		plan.Version = "v1.3.0"
		f := engine("v1.2.0")
		var log []string
		_, err := Create(ctx, f, upRequest(repo, "stale", &log))
		var se *StaleImageError
		if !errors.As(err, &se) || !se.Refuse || se.ImageVersion != "v1.2.0" || se.Version != "v1.3.0" {
			t.Fatalf("err = %v, want a StaleImageError that refuses", err)
		}
		if calls := mutating(f.fakeEngine); len(calls) != 0 {
			t.Errorf("up created %v before it refused the image", calls)
		}
	})
	t.Run("dev mismatch warns", func(t *testing.T) {
		plan.Version = "abc1234-dirty"
		f := engine("v1.2.0")
		var log []string
		if _, err := Create(ctx, f, upRequest(repo, "warned", &log)); err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(log, func(s string) bool { return strings.HasPrefix(s, "warning: the helper image") })
		if i < 0 || !strings.Contains(log[i], "is from devaipod v1.2.0, this devaipod is abc1234-dirty") || !strings.Contains(log[i], "`make images`") {
			t.Fatalf("no stale image warning in %q", log)
		}
		if n := len(slices.DeleteFunc(slices.Clone(log), func(s string) bool { return !strings.HasPrefix(s, "warning: the helper image") })); n != 1 {
			t.Errorf("%d stale image warnings, want 1: %q", n, log)
		}
	})
	t.Run("same version is quiet", func(t *testing.T) {
		plan.Version = "v1.3.0"
		f := engine("v1.3.0")
		var log []string
		if _, err := Create(ctx, f, upRequest(repo, "current", &log)); err != nil {
			t.Fatal(err)
		}
		for _, l := range log {
			if strings.Contains(l, "helper image") {
				t.Errorf("unexpected %q", l)
			}
		}
	})
}

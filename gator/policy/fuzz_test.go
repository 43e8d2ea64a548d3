package policy

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// FuzzParseScope checks that any accepted scope round-trips through its
// canonical form, names a repository that SplitRepo accepts (so nothing
// that could be a path gets through), and that errors name the scope.
func FuzzParseScope(f *testing.F) {
	for _, s := range []string{
		"github:octo/app", "github:octo/app:read,create-draft", "github:octo/*", "github:octo/*:push-branch",
		"github:readonly-all", "github:octo/app:", "github:octo/../x", "gitlab:a/b", "github:a/b:read,,comment",
		" github:o/r:comment, read ", "github:octo/app.git", "github:O_o/.r-1:pending-review",
		"github:octo/app:read,ask:push-branch", "github:octo/*:ask:comment,ask:create-draft", "github:o/r:ask:read",
		"github:o/r:comment,ask:comment", "github:o/r:ask:",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		sc, err := ParseScope(in)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "scope ") {
				t.Fatalf("ParseScope(%q) error %q does not name the scope", in, err)
			}
			return
		}
		again, err := ParseScope(sc.String())
		if err != nil {
			t.Fatalf("ParseScope(%q) = %q, which does not parse: %v", in, sc.String(), err)
		}
		if !reflect.DeepEqual(sc, again) {
			t.Fatalf("round trip of %q: %#v != %#v", in, sc, again)
		}
		if sc.ReadOnlyAll {
			if sc.Owner != "" || sc.Repo != "" || sc.Perms != nil || sc.Ask != nil {
				t.Fatalf("ParseScope(%q) = %#v: readonly-all with a target", in, sc)
			}
			return
		}
		if len(sc.Perms)+len(sc.Ask) == 0 {
			t.Fatalf("ParseScope(%q) grants nothing", in)
		}
		for _, p := range sc.Ask {
			if p == PermRead || slices.Contains(sc.Perms, p) {
				t.Fatalf("ParseScope(%q) = %#v: asks for read, or for a permission it grants", in, sc)
			}
		}
		if sc.Repo != "*" {
			if _, _, err := SplitRepo(sc.Owner + "/" + sc.Repo); err != nil {
				t.Fatalf("ParseScope(%q) accepted a repository SplitRepo refuses: %v", in, err)
			}
		}
		for _, c := range sc.Owner + sc.Repo {
			if c == '/' || c == '%' || c == '?' || c == '#' || c == ':' {
				t.Fatalf("ParseScope(%q) let %q into a name", in, c)
			}
		}
	})
}

package gator

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/revlist"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// BenchmarkHistoryWalk walks every object reachable from HEAD, as go-git's
// push does from the remote's refs to know what not to send, through the
// gator's storage (every object checked against its id) and through
// go-git's own, on a repository of 3,000 commits that each change 3 of
// 1,000 files, packed as git packs it (deltas up to 50 deep), or on the
// repository at $DEVAIPOD_BENCH_REPO.
func BenchmarkHistoryWalk(b *testing.B) {
	repo := os.Getenv("DEVAIPOD_BENCH_REPO")
	if repo == "" {
		repo = historyRepo(b, 3000)
	}
	walk := func(b *testing.B, st storer.Storer) {
		ref, err := storer.ResolveReference(st, plumbing.HEAD)
		if err != nil {
			b.Fatal(err)
		}
		hs, err := revlist.Objects(st, []plumbing.Hash{ref.Hash()}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(len(hs)), "objects")
	}
	b.Run("gator", func(b *testing.B) {
		for b.Loop() {
			st, done, err := openWorkspace(repo)
			if err != nil {
				b.Fatal(err)
			}
			walk(b, st)
			done()
		}
	})
	b.Run("go-git", func(b *testing.B) {
		for b.Loop() {
			walk(b, filesystem.NewStorage(osfs.New(filepath.Join(repo, ".git")), cache.NewObjectLRUDefault()))
		}
	})
}

// historyRepo makes a repository of n commits (git fast-import), the
// first adding 1,000 files of 40 lines in 50 folders, each next one adding
// a line to 3 of them, and packs it as git gc --aggressive would.
func historyRepo(b *testing.B, n int) string {
	b.Helper()
	repo := b.TempDir()
	git := func(stdin []byte, args ...string) {
		cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
		cmd.Stdin = bytes.NewReader(stdin)
		// Not the user's configuration: the repository is the same for
		// everyone.
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git(nil, "init", "-q", "-b", "main")
	files := map[string]string{}
	var names []string
	for d := range 50 {
		for f := range 20 {
			name := fmt.Sprintf("d%d/f%d.txt", d, f)
			names = append(names, name)
			for i := range 40 {
				files[name] += fmt.Sprintf("line %d of %s\n", i, name)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var s strings.Builder
	for c := range n {
		msg := fmt.Sprintf("commit %d\n", c)
		fmt.Fprintf(&s, "commit refs/heads/main\ncommitter t <t@t> %d +0000\ndata %d\n%s", 1700000000+c, len(msg), msg)
		changed := names
		if c > 0 {
			changed = nil
			for range 3 {
				name := names[rng.IntN(len(names))]
				files[name] += fmt.Sprintf("change %d\n", c)
				changed = append(changed, name)
			}
		}
		for _, name := range changed {
			fmt.Fprintf(&s, "M 100644 inline %s\ndata %d\n%s\n", name, len(files[name]), files[name])
		}
	}
	git([]byte(s.String()), "fast-import", "--quiet")
	git(nil, "repack", "-q", "-adf", "--depth=50", "--window=50")
	return repo
}

package pod

import (
	"encoding/json"
	"flag"
	"maps"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/devaipod/devaipod/internal/gittest"
	"github.com/devaipod/devaipod/pod/plan"
)

var update = flag.Bool("update", false, "rewrite the corpus's golden plans")

// corpusSecret is a host variable's value that configurations of the
// corpus name (${localEnv:CORPUS_TOKEN}): no plan printed may hold it.
const corpusSecret = "tok-corpus-s3cret"

// TestDevcontainerCorpus plans every configuration of testdata/corpus, in
// the shapes real projects use (images, builds, features with and without
// the devcontainer CLI, every command form, users, workspace folders,
// mounts, ports, runArgs, customizations, and a few broken files), with
// `up --dry-run` as a trusting person would, and holds what the plan says
// of the workspace, its lifecycle, warnings and steps to testdata/corpus/
// NAME/plan.golden (go test ./pod -run TestDevcontainerCorpus -update).
func TestDevcontainerCorpus(t *testing.T) {
	dirs, err := filepath.Glob("testdata/corpus/*")
	if err != nil || len(dirs) < 50 {
		t.Fatalf("the corpus has %d configurations (%v); want at least 50", len(dirs), err)
	}
	for _, dir := range dirs {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			repo := gittest.Repo(t)
			filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || filepath.Base(p) == "plan.golden" {
					return err
				}
				rel, _ := filepath.Rel(dir, p)
				data, _ := os.ReadFile(p)
				gittest.WriteFile(t, filepath.Join(repo, ".devcontainer", rel), string(data))
				return nil
			})
			gittest.Git(t, repo, []string{"add", "."}, []string{"commit", "-q", "-m", "devcontainer"})
			res, log, err := dryRun(t, Request{Source: repo, Name: "corpus", Trust: true, AllowHostCommands: true, HostEnv: map[string]string{
				"HOME": "/home/u", "CORPUS_USER": "me", "CORPUS_TOKEN": corpusSecret, "GITHUB_TOKEN": corpusSecret,
				"DEVAIPOD_DEVCONTAINER_CLI": "/nonexistent/devcontainer", "DEVAIPOD_AGENT_OPENCODE_CONFIG_CONTENT": "{}"}})
			got := corpusSummary(res, err)
			for _, w := range log {
				got += "warning: " + w + "\n"
			}
			got = strings.ReplaceAll(got, repo, "REPO")
			got = regexp.MustCompile(`commit [0-9a-f]{12}`).ReplaceAllString(got, "commit COMMIT")
			got = regexp.MustCompile(`(devaipod-build-[a-z0-9]+):[0-9a-f]{12}`).ReplaceAllString(got, "$1:HASH")
			got = regexp.MustCompile(`/tmp/devaipod-[a-z]+-[0-9]+`).ReplaceAllString(got, "TMP")
			got = regexp.MustCompile(`features-[0-9a-f]{12}`).ReplaceAllString(got, "features-HASH")
			if strings.Contains(got, corpusSecret) {
				t.Errorf("the dry run shows a secret:\n%s", got)
			}
			if res != nil && res.Plan != nil {
				for k, v := range res.Plan.Pod.Labels {
					if strings.Contains(v, corpusSecret) {
						t.Errorf("label %s holds a secret: %s", k, v)
					}
				}
			}
			golden := filepath.Join(dir, "plan.golden")
			if *update {
				os.WriteFile(golden, []byte(got), 0o644)
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil || string(want) != got {
				t.Errorf("the plan differs from %s (rerun with -update and review the diff):\n%s", golden, got)
			}
		})
	}
}

// corpusSummary is what a dry run says of the workspace, as text.
func corpusSummary(res *Result, err error) string {
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	p := res.Plan.Redacted()
	ws := p.Container(plan.RoleWorkspace)
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("workspace image: %s", ws.Image)
	line("workdir: %s", ws.Workdir)
	line("user: %q, privileged: %v, cap-add: %q, security-opt: %q, devices: %q", ws.User, ws.Privileged, ws.CapAdd, ws.SecurityOpt, ws.Devices)
	if init := ws.Entrypoint; len(init) > 0 && slices.Contains(init, "--") {
		line("init command: %q", init[slices.Index(init, "--")+1:])
	}
	for _, k := range slices.Sorted(maps.Keys(ws.Env)) {
		if !strings.HasPrefix(k, "GIT_CONFIG_") {
			line("env %s=%s", k, ws.Env[k])
		}
	}
	for _, m := range ws.Binds {
		line("bind %s%s -> %s (read-only %v)", m.HostPath, m.Volume, m.Dest, m.ReadOnly)
	}
	for _, m := range ws.Mounts {
		line("mount %s -> %s", strings.TrimPrefix(m.Volume, "devaipod-corpus-"), m.Dest)
	}
	line("ports: %v", p.Pod.Ports)
	line("exec as: %s", p.Pod.Labels[plan.LabelExec])
	if l := p.Lifecycle; l != nil {
		for _, which := range []string{plan.StageCreate, plan.StageAttach} {
			for _, s := range l.Stages(which) {
				if s.Cmd != nil {
					steps, _ := json.Marshal(s.Cmd.Steps)
					line("%s (parallel %v): %s", s.Name, s.Cmd.Parallel, steps)
				}
			}
		}
	}
	for _, w := range p.Warnings {
		line("warning: %s", w)
	}
	for _, s := range res.Steps {
		if s.Kind != StepCreate && s.Kind != StepCheck {
			line("step %s: %s", s.Kind, s.What)
		}
	}
	return b.String()
}

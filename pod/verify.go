package pod

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/devaipod/devaipod/internal/helperargs"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/plan"
)

// VerifyOptions tune Verify.
type VerifyOptions struct {
	// Fast runs only the fast subset; Format is text or json.
	Fast   bool
	Format string
	// Config and HostEnv give the person's trusted values, which the
	// workspace of an untrusted repository's pod must not hold (they are
	// not in it to read them from); nil looks only for the gator's token
	// and the proxy's credentials there.
	Config  *config.Config
	HostEnv map[string]string
}

// ErrVerifyFailed says the battery ran and at least one row FAILed; the
// report says which.
var ErrVerifyFailed = errors.New("a containment check failed")

// Verify runs the pod's battery of attacks in its agent container (the
// helper's verify, with the arguments up recorded in the pod's label) and
// writes the report to w as format says (text or json). The workspace's
// trusted values and the proxy's credentials go in as SHA-256 hashes on
// the battery's standard input, so that it can look for them without
// learning them. It returns
// ErrVerifyFailed when a row FAILed.
func Verify(ctx context.Context, eng Engine, short string, vo VerifyOptions, w io.Writer) error {
	fast, format := vo.Fast, vo.Format
	o, err := RunningPod(ctx, eng, short, plan.RoleAgent)
	if err != nil {
		return err
	}
	var args []string
	if err := json.Unmarshal([]byte(o.Labels[plan.LabelVerify]), &args); err != nil {
		return fmt.Errorf("pod %s was created by a devaipod without verify (label %s): recreate it", short, plan.LabelVerify)
	}
	trusted, err := secretHashes(ctx, eng, plan.ContainerName(short, plan.RoleWorkspace),
		AsRoot(plan.HelperCommand(helperargs.SecretEnv{Dir: plan.SecretDir, PrintHashes: true})))
	if err != nil {
		return fmt.Errorf("read the workspace's trusted values: %w", err)
	}
	// What devaipod verify adds to what the pod promises (its label).
	run := helperargs.Verify{Output: format, SecretHashesFile: "-", Fast: fast, TrustedGitChecked: true}
	var hashes strings.Builder
	for _, nh := range trusted {
		// The agent's own password is shared with it by design.
		if nh[0] != plan.PasswordVar {
			run.SecretVars = append(run.SecretVars, nh[0])
			fmt.Fprintln(&hashes, nh[1])
		}
	}
	// An untrusted repository's workspace has no trusted value to read
	// them from: they come from the person's configuration and the gator.
	untrusted := o.Labels[plan.LabelUntrusted] == "true"
	var personal string
	if untrusted {
		var names []string
		if personal, names, err = personalHashes(ctx, eng, short, vo); err != nil {
			return err
		}
		hashes.WriteString(personal)
		run.SecretVars = append(run.SecretVars, names...)
	}
	// The credentials' values, which only the proxy holds: by hash too,
	// without names (the agent's variables of those names hold the
	// placeholders, by design).
	var credHashes strings.Builder
	if slices.Contains(args, "--credential-var") {
		creds, err := secretHashes(ctx, eng, plan.ContainerName(short, plan.RoleProxy), sidecarSecretHashes)
		if err != nil {
			return fmt.Errorf("read the credentials' values in the proxy: %w", err)
		}
		for _, nh := range creds {
			if nh[0] != plan.UpstreamCAVar {
				fmt.Fprintln(&credHashes, nh[1])
			}
		}
		hashes.WriteString(credHashes.String())
	}
	// The workspace's .git, which the agent cannot see: inspected there
	// with file reads (no git runs), the findings go into the battery.
	i := slices.Index(args, "--workspace")
	if i < 0 || i+1 == len(args) {
		return fmt.Errorf("pod %s's verify label names no workspace: recreate it", short)
	}
	code, out, err := eng.Exec(ctx, plan.ContainerName(short, plan.RoleWorkspace),
		AsRoot(plan.HelperCommand(helperargs.InspectGit{Repo: args[i+1]})))
	if err == nil && code != 0 {
		err = errors.New(strings.TrimSpace(out))
	}
	if err != nil {
		return fmt.Errorf("inspect the workspace's .git: %w", err)
	}
	for _, problem := range strings.Split(strings.TrimSpace(out), "\n") {
		if problem != "" {
			run.TrustedProblems = append(run.TrustedProblems, problem)
		}
	}
	if untrusted {
		if run.WithheldChecked, run.WithheldProblems, err = inspectWithheld(ctx, eng, short, args[i+1], personal+credHashes.String()); err != nil {
			return err
		}
	}
	argv := append(plan.HelperCommand(run), args...)
	var stderr bytes.Buffer
	code, _, err = eng.Exec(ctx, plan.ContainerName(short, plan.RoleAgent),
		ExecSpec{Cmd: argv, Stdin: hashesInput(hashes.String()), Output: w, Stderr: &stderr})
	switch {
	case err != nil:
		return fmt.Errorf("verify in the agent: %w", err)
	case code == 1:
		return ErrVerifyFailed
	case code != 0:
		return fmt.Errorf("verify in the agent: exit %d: %s", code, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// sidecarSecretHashes has a sidecar (the helper image, its binary at the
// root) print its secrets' names and hashes.
var sidecarSecretHashes = ExecSpec{Cmd: append([]string{plan.ProxyBin}, helperargs.SecretEnv{Dir: plan.SecretDir, PrintHashes: true}.Args()...)}

// secretHashes runs spec, a secret-env --print-hashes, in container and
// returns what it printed: each secret's name and the SHA-256 of its value.
func secretHashes(ctx context.Context, eng Engine, container string, spec ExecSpec) ([][2]string, error) {
	code, out, err := eng.Exec(ctx, container, spec)
	if err == nil && code != 0 {
		err = errors.New(strings.TrimSpace(out))
	}
	if err != nil {
		return nil, err
	}
	var pairs [][2]string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if name, hash, ok := strings.Cut(line, " "); ok {
			pairs = append(pairs, [2]string{name, hash})
		}
	}
	return pairs, nil
}

// hashesInput is the standard input of a command given hashes on it
// (--secret-hashes-file -): none at all when there are none, so that it
// reads an empty /dev/null. An empty stream attached and closed at once
// made podman 4.3's exec hang now and then on a loaded machine, the
// command never started and the attach never ended.
func hashesInput(hashes string) io.Reader {
	if hashes == "" {
		return nil
	}
	return strings.NewReader(hashes)
}

// personalHashes are the SHA-256 hashes, one a line, of the person's
// trusted values that an untrusted repository's pod was not given: those
// of their configuration (names too) and the gator's token.
func personalHashes(ctx context.Context, eng Engine, short string, vo VerifyOptions) (hashes string, names []string, err error) {
	var b strings.Builder
	if vo.Config != nil {
		for name, v := range plan.TrustedValues(vo.Config, vo.HostEnv) {
			names = append(names, name)
			fmt.Fprintf(&b, "%x\n", sha256.Sum256([]byte(v)))
		}
	}
	objs, err := eng.Objects(ctx, short)
	if err != nil {
		return "", nil, err
	}
	if slices.ContainsFunc(objs, func(o Object) bool { return o.Name == plan.ContainerName(short, plan.RoleGator) }) {
		token, err := secretHashes(ctx, eng, plan.ContainerName(short, plan.RoleGator), sidecarSecretHashes)
		if err != nil {
			return "", nil, fmt.Errorf("read the gator's token: %w", err)
		}
		for _, nh := range token {
			fmt.Fprintln(&b, nh[1])
		}
	}
	slices.Sort(names)
	return b.String(), names, nil
}

// inspectWithheld looks, in the workspace of an untrusted repository's
// pod, for what of the person's it must not hold (the helper's
// inspect-withheld): the values whose hashes are given, secrets, host
// paths.
func inspectWithheld(ctx context.Context, eng Engine, short, workdir, hashes string) (checked string, problems []string, err error) {
	spec := AsRoot(plan.HelperCommand(helperargs.InspectWithheld{Workspace: workdir, HashesFile: "-", AllowSecrets: []string{plan.PasswordVar}}))
	spec.Stdin = hashesInput(hashes)
	code, out, err := eng.Exec(ctx, plan.ContainerName(short, plan.RoleWorkspace), spec)
	if err == nil && code != 0 {
		err = errors.New(strings.TrimSpace(out))
	}
	if err != nil {
		return "", nil, fmt.Errorf("look for trusted values in the untrusted repository's workspace: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if p, ok := strings.CutPrefix(line, "problem: "); ok {
			problems = append(problems, p)
		} else if c, ok := strings.CutPrefix(line, "checked: "); ok {
			checked = c
		}
	}
	if checked == "" {
		return "", nil, fmt.Errorf("look for trusted values in the untrusted repository's workspace: no answer: %s", strings.TrimSpace(out))
	}
	return checked, problems, nil
}

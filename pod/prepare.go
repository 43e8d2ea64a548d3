package pod

import (
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/devcontainer"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/source"
)

// The repository's devcontainer.json shapes the trusted workspace the way
// the devcontainer CLI would. Its privilege settings (capAdd, privileged,
// securityOpt, runArgs, mounts) reach the workspace only; the agent gets
// nothing of it but what customizations.devaipod asks for on the agent's
// side (its kind and command, host variables by name, allowed hosts), each
// of which up reports.

// DevcontainerOptions say how to load a checkout's devcontainer.json.
type DevcontainerOptions struct {
	// Explicit is --devcontainer: a path in the repository ("" to search).
	Explicit string
	// Name is the pod's short name (for ${devcontainerId}).
	Name string
	// LocalFolder is ${localWorkspaceFolder}: the user's checkout, or the
	// clone of a URL. Project is the repository's name (the folder under
	// /workspaces unless workspaceFolder says otherwise).
	LocalFolder string
	Project     string
	HostEnv     map[string]string
	// Forbidden are host paths no bind mount may be or contain (see
	// ForbiddenMounts).
	Forbidden []string
}

// Devcontainer is a loaded devcontainer.json with its runArgs parsed and
// its bind mounts checked.
type Devcontainer struct {
	Config  *devcontainer.Config
	RunArgs devcontainer.RunArgs
	Binds   []plan.HostMount
}

// LoadDevcontainer finds, parses, substitutes and checks the
// devcontainer.json of a checkout made by Source.Checkout (whose files are
// not on disk: the devcontainer's folder is checked out first). It returns
// nil when the repository has none.
func LoadDevcontainer(ctx context.Context, tree string, o DevcontainerOptions) (*Devcontainer, error) {
	paths := []string{".devcontainer", ".devcontainer.json"}
	if o.Explicit != "" {
		paths = append(paths, path.Clean(filepath.ToSlash(o.Explicit)))
	}
	if err := source.CheckoutPaths(ctx, tree, paths...); err != nil {
		return nil, err
	}
	file, err := devcontainer.Find(tree, o.Explicit)
	if err != nil || file == "" {
		return nil, err
	}
	dc, err := devcontainer.Load(file)
	if err != nil {
		return nil, err
	}
	if dc.Build != nil {
		// A build's context may be any folder of the repository.
		if err := source.CheckoutPaths(ctx, tree); err != nil {
			return nil, err
		}
	}
	project := cmp.Or(plan.DevcontainerProject(dc), o.Project, filepath.Base(o.LocalFolder))
	err = dc.Substitute(devcontainer.Vars{
		LocalEnv:                 o.HostEnv,
		LocalWorkspaceFolder:     o.LocalFolder,
		ContainerWorkspaceFolder: path.Join(plan.WorkspacesDir, project),
		DevcontainerID:           devcontainer.DevcontainerID(map[string]string{plan.LabelPod: o.Name}),
	})
	if err != nil {
		return nil, err
	}
	if err := dc.CheckBuildPaths(tree); err != nil {
		return nil, err
	}
	ra, err := devcontainer.ParseRunArgs(dc.RunArgs)
	if err != nil {
		return nil, fmt.Errorf("%s: runArgs: %w", dc.File, err)
	}
	// Bind mounts are host paths chosen by the repository: the same rules
	// as [[mounts]], writable unless marked read-only (as the spec says).
	var binds []config.MountConfig
	for _, m := range append(slices.Clone(dc.Mounts), ra.Mounts...) {
		if m.Type == devcontainer.MountBind {
			binds = append(binds, config.MountConfig{Source: m.Source, Target: m.Target, RW: !m.ReadOnly, Containers: []string{plan.RoleWorkspace}})
		}
	}
	resolved, err := ResolveMounts(binds, o.Forbidden)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dc.File, err)
	}
	return &Devcontainer{Config: dc, RunArgs: ra, Binds: resolved}, nil
}

// BuildTag names the image built for a devcontainer's build: by project and
// by what the build reads from the devcontainer (Dockerfile, args, target),
// so that ups of the same project share it and a changed Dockerfile gets a
// new one. Layers cached by podman make a rebuild of an unchanged context
// cheap.
func BuildTag(project string, b *devcontainer.Build) (string, error) {
	dockerfile, err := os.ReadFile(b.Dockerfile)
	if err != nil {
		return "", fmt.Errorf("read the devcontainer's Dockerfile: %w", err)
	}
	h := sha256.New()
	h.Write(dockerfile)
	for _, k := range slices.Sorted(maps.Keys(b.Args)) {
		fmt.Fprintf(h, "\x00arg %s=%s", k, b.Args[k])
	}
	fmt.Fprintf(h, "\x00target %s", b.Target)
	return fmt.Sprintf("localhost/devaipod-build-%s:%x", plan.VolumeSuffix(project, 0), h.Sum(nil)[:6]), nil
}

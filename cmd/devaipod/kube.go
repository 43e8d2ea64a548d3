package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/kube"
	"github.com/devaipod/devaipod/pod/podman"
	"github.com/spf13/cobra"
)

func newKubeCommand(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kube",
		Short: "Kubernetes: the manifests of a pod (see docs/kubernetes.md)",
		Long: `Work with Kubernetes. 'devaipod kube render' prints the manifests of the pod
'devaipod up' would make, for a cluster or for 'podman kube play'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newKubeRenderCommand(g), newKubeSeccompCommand())
	return cmd
}

func newKubeSeccompCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "seccomp-profile",
		Short: "Print the agent's seccomp profile, for a cluster's nodes",
		Long: `Print the agent's seccomp profile (JSON): podman's default profile without
the system calls that create namespaces, nor ptrace and process_vm_readv/
writev. The podman engine gives it to every agent; on a cluster the rendered
agent Pod names it as a Localhost profile, which every node must have at
/var/lib/kubelet/seccomp/` + kube.AgentSeccompProfile + ` (or render with
--agent-seccomp runtime-default, which lets the agent make namespaces and
trace its own processes).`,
		Example: `  devaipod kube seccomp-profile > ` + kube.AgentSeccompProfile + `
  # then, on every node: install -D -m 0644 ` + kube.AgentSeccompProfile + ` /var/lib/kubelet/seccomp/` + kube.AgentSeccompProfile,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := podman.AgentSeccompProfile()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", data)
			return err
		},
	}
}

type kubeRenderFlags struct {
	upFlags // the plan's flags, as up has them
	opts    kube.Options
}

func newKubeRenderCommand(g *globalFlags) *cobra.Command {
	f := &kubeRenderFlags{}
	cmd := &cobra.Command{
		Use:   "render PATH|GIT-URL|PR-URL [TASK]",
		Short: "Print the Kubernetes manifests of a pod for a repository",
		Long: `Print the Kubernetes objects of the pod that 'devaipod up' would make for the
repository, with the same flags and configuration, and create nothing: the
plan is built as 'up --dry-run' builds it (the source is cloned to read it, and
removed again), then rendered as Kubernetes objects (k8s.io/api types).

The agent runs in a Pod of its own that meets Pod Security "restricted"
(non-root, every capability dropped, read-only root, no privilege
escalation, a seccomp profile, no service-account token), with a
NetworkPolicy that lets nothing in or out: a CNI plugin that enforces
NetworkPolicy is required. The workspace, the proxy and the gator share the
other Pod; the volumes are PersistentVolumeClaims; the trusted values and
credentials are Secrets, mounted only into the containers that need them.
An engine applies the objects and copies the repository in through the
workspace Pod's init container (docs/kubernetes.md: the handshake).

--output yaml (the default) prints one YAML stream for kubectl apply -f and
podman kube play; --output json a v1 List. Secret values are in the output
(base64): treat it as a secret. What Kubernetes cannot express (host paths,
devices, published ports) is said in warnings on standard error.`,
		Example: `  devaipod kube render . > pod.yaml
  devaipod kube render https://github.com/org/repo --name repo -o json
  devaipod kube render . --namespace agents --storage-class fast | kubectl apply -f -`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return errors.New("kube render takes a local git checkout, a git URL or a pull request URL, and optionally a task in quotes")
			}
			if len(args) == 2 && strings.TrimSpace(args[1]) == "" {
				return errors.New("the task is empty")
			}
			return nil
		},
		// --output takes yaml here, which the root's check refuses.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			switch g.output {
			case "text", "yaml", "json":
				return nil
			}
			return fmt.Errorf("--output must be yaml or json, not %q", g.output)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			task := ""
			if len(args) == 2 {
				task = args[1]
			}
			return runKubeRender(cmd, g, f, args[0], task)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.name, "name", "", "pod name (default: the repository's name plus a random suffix)")
	addPlanFlags(cmd, &f.upFlags)
	fl.StringVar(&f.opts.Namespace, "namespace", "", "namespace of every object (default: none, kubectl's context decides)")
	fl.StringVar(&f.opts.AgentSeccomp, "agent-seccomp", kube.SeccompLocalhost,
		"the agent's seccomp profile: localhost ("+kube.AgentSeccompProfile+" on every node: refuses new namespaces and ptrace, as on podman) or runtime-default")
	fl.StringVar(&f.opts.StorageClass, "storage-class", "", "storage class of the volume claims (default: the cluster's)")
	fl.StringVar(&f.opts.WorkspaceSize, "workspace-size", "10Gi", "size of the workspace volume claim")
	fl.StringVar(&f.opts.VolumeSize, "volume-size", "1Gi", "size of every other volume claim")
	fl.StringVar(&f.opts.HelperImage, "helper-image", "", "the helper image, from a registry the nodes pull from (default: "+config.DefaultHelperImage+", local to this host)")
	fl.BoolVar(&f.opts.NoLimits, "no-limits", false, "leave memory and CPU limits out (podman kube play of rootless podman on cgroup v1 refuses them)")
	cmd.RegisterFlagCompletionFunc("agent-seccomp", cobra.FixedCompletions([]string{kube.SeccompLocalhost, kube.SeccompRuntimeDefault}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func runKubeRender(cmd *cobra.Command, g *globalFlags, f *kubeRenderFlags, input, task string) error {
	cfg, err := g.loadConfig()
	if err != nil {
		return err
	}
	// The plan as up --dry-run builds it, with no engine: nothing is
	// created, and no podman is needed.
	req, output := f.request(cmd, g, cfg, input)
	defer output.Flush()
	req.Task, req.Name, req.DryRun = task, f.name, true
	req.Progress = func(s string) { g.infof(cmd, "%s", s) }
	res, err := pod.Create(cmd.Context(), nil, req)
	if err != nil {
		return err
	}
	for _, w := range res.Plan.Warnings {
		g.warnf(cmd, "%s", w)
	}
	m, err := kube.Render(res.Plan, f.opts)
	if err != nil {
		return fmt.Errorf("render pod %s: %w", res.Plan.Name, err)
	}
	for _, w := range m.Warnings {
		g.warnf(cmd, "%s", w)
	}
	var out []byte
	if g.json() {
		out, err = m.JSON()
	} else {
		out, err = m.YAML()
	}
	if err != nil {
		return err
	}
	_, err = cmd.OutOrStdout().Write(out)
	return err
}

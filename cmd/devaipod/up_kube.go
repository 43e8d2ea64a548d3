package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/config"
	"github.com/devaipod/devaipod/pod/kube"
	"github.com/devaipod/devaipod/pod/kubeclient"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/spf13/cobra"
)

// kubeUpFlags are up's flags for --engine kube.
type kubeUpFlags struct {
	helperImage, storageClass, agentSeccomp string
	podTimeout                              time.Duration
}

func addKubeUpFlags(cmd *cobra.Command, f *kubeUpFlags) {
	fl := cmd.Flags()
	fl.StringVar(&f.helperImage, "helper-image", "", "with --engine kube: the helper image (proxy, gator, init containers) from a registry the nodes pull from (default "+config.DefaultHelperImage+", which only this host has)")
	fl.StringVar(&f.storageClass, "storage-class", "", "with --engine kube: the storage class of the pod's volume claims (default: the cluster's)")
	fl.StringVar(&f.agentSeccomp, "agent-seccomp", kube.SeccompLocalhost, "with --engine kube: the agent's seccomp profile: localhost ("+kube.AgentSeccompProfile+", installed on every node) or runtime-default")
	fl.DurationVar(&f.podTimeout, "pod-timeout", 5*time.Minute, "with --engine kube: how long to wait for the Pods to be scheduled, pull their images and start")
	cmd.RegisterFlagCompletionFunc("agent-seccomp", cobra.FixedCompletions([]string{kube.SeccompLocalhost, kube.SeccompRuntimeDefault}, cobra.ShellCompDirectiveNoFileComp))
}

// runUpKube is up --engine kube: the plan as up builds it (without
// podman: the cluster pulls the images), then kubeclient.Up renders,
// applies, copies the repository in, waits and checks.
func runUpKube(cmd *cobra.Command, g *globalFlags, f *upFlags, input, task string) error {
	start := time.Now()
	ctx := cmd.Context()
	cfg, err := g.loadConfig()
	if err != nil {
		return err
	}
	kc, err := g.kubeClient(cmd)
	if err != nil {
		if !f.dryRun {
			return err
		}
		// A dry run needs no cluster.
		g.warnf(cmd, "%v: the plan is for namespace %s", err, cmp.Or(g.namespace, "default"))
		kc = kubeclient.New(nil, g.namespace)
	}
	req, output := f.request(cmd, g, cfg, input)
	defer output.Flush()
	req.Task, req.Name, req.KeepOnFailure, req.DryRun = task, f.name, f.keepOnFailure, f.dryRun
	steps := &stepClock{start: start}
	req.Progress = func(s string) {
		steps.mark(s)
		g.infof(cmd, "%s", s)
	}
	if g.quiet {
		req.Output = io.Discard
	}
	var eng pod.Engine
	if f.name != "" && kc.Clientset() != nil {
		eng = kc // a pod of that name may exist
	}
	opts := kube.Options{HelperImage: f.kube.helperImage, StorageClass: f.kube.storageClass, AgentSeccomp: f.kube.agentSeccomp, Namespace: kc.Namespace}
	// The plan is built without podman (the cluster pulls the images, and
	// their own settings are unknown here), then applied while up's clone
	// still exists, for the copy.
	req.Apply = func(ctx context.Context, pl *plan.Plan, tree string) error {
		return kc.Up(ctx, pl, tree, kubeclient.UpOptions{Render: opts, PodTimeout: f.kube.podTimeout,
			ReadyTimeout: f.timeout, KeepOnFailure: f.keepOnFailure, Output: req.Output,
			Progress: func(s string) { req.Progress(s + "...") }, Warn: req.Warn})
	}
	res, err := pod.Create(ctx, eng, req)
	if err != nil {
		if ctx.Err() != nil && !f.keepOnFailure {
			return fmt.Errorf("interrupted; removed what up had applied: %w", err)
		}
		return err
	}
	if ex := res.Existing; ex != nil {
		if ex.Action == pod.ActionStart && !f.dryRun {
			return &hintError{err: fmt.Errorf("pod %s exists and is %s", ex.Name, ex.State),
				hint: fmt.Sprintf("a Pod on a cluster does not start again: `devaipod --engine kube delete %s`, then up", ex.Name)}
		}
		if f.dryRun || g.json() {
			return reportExisting(cmd, g, f.dryRun, ex, start)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "Pod %s is already running (from %s).\n", ex.Name, ex.Source())
		if !g.quiet {
			printKubeGetIn(cmd.OutOrStdout(), g, kc, ex.Name)
		}
		return nil
	}
	pl := res.Plan
	if f.dryRun {
		return printKubeDryRun(cmd, g, kc, pl, opts)
	}
	steps.mark("")
	out := cmd.OutOrStdout()
	if g.json() {
		o := map[string]any{
			"name": pl.Name, "pod": pl.Pod.Name, "workdir": pl.Workdir,
			"agent_url": pl.AgentURL, "commit": res.Source.Commit, "seconds": time.Since(start).Seconds(),
			"credentials": pl.Credentials, "existing": false,
			"engine": engineKube, "context": kc.Context, "namespace": kc.Namespace}
		if f.timings {
			o["timings"] = steps.list
		}
		return writeJSON(out, o)
	}
	fmt.Fprintf(out, "Pod %s is ready (%.1fs, kubernetes: context %s, namespace %s).\n", pl.Name, time.Since(start).Seconds(), kc.Context, kc.Namespace)
	if f.timings {
		steps.print(out)
	}
	if !g.quiet {
		for _, c := range pl.Credentials {
			fmt.Fprintf(out, "  credential %s: the agent holds a placeholder; the proxy puts in %s on %s\n", c.Name, c.From, c.Hosts)
		}
		printKubeGetIn(out, g, kc, pl.Name)
	}
	return nil
}

// printKubeGetIn says how to use a pod that is up on a cluster: the
// commands with the flags that chose it.
func printKubeGetIn(out io.Writer, g *globalFlags, kc *kubeclient.Client, name string) {
	e := "devaipod --engine kube"
	if g.kubeContext != "" {
		e += " --context " + kc.Context
	}
	if g.namespace != "" {
		e += " --namespace " + kc.Namespace
	}
	fmt.Fprintf(out, "  shell in the workspace:  %s exec %s\n", e, name)
	fmt.Fprintf(out, "  the agent's log:         %s logs %s\n", e, name)
	fmt.Fprintf(out, "  check its containment:   %s verify %s\n", e, name)
	fmt.Fprintf(out, "  remove it:               %s delete %s\n", e, name)
}

// printKubeDryRun shows the plan and the objects up would apply.
func printKubeDryRun(cmd *cobra.Command, g *globalFlags, kc *kubeclient.Client, pl *plan.Plan, opts kube.Options) error {
	m, err := kube.Render(pl, opts)
	if err != nil {
		return fmt.Errorf("render pod %s: %w", pl.Name, err)
	}
	objs, err := kubeclient.Refs(m.Objects())
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if g.json() {
		return writeJSON(out, struct {
			*plan.Plan
			Engine    string           `json:"engine"`
			Context   string           `json:"context"`
			Namespace string           `json:"namespace"`
			Objects   []kubeclient.Ref `json:"objects"`
			Warnings  []string         `json:"kube_warnings,omitempty"`
		}{pl.Redacted(), engineKube, kc.Context, kc.Namespace, objs, m.Warnings})
	}
	printPlan(out, pl, nil)
	fmt.Fprintf(out, "On kubernetes (context %s, namespace %s), up would apply (nothing applied; `devaipod kube render` prints them):\n", kc.Context, kc.Namespace)
	for _, r := range objs {
		fmt.Fprintf(out, "  %-22s %s\n", r.Kind, r.Name)
	}
	for _, w := range m.Warnings {
		fmt.Fprintf(out, "  warning: %s\n", w)
	}
	fmt.Fprintln(out, "then wait for the Pods, copy the repository in through the workspace Pod's init container, wait until they are ready, and run the checks.")
	return nil
}

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/devaipod/devaipod/internal/safetext"
	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/kubeclient"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/spf13/cobra"
)

// The engines --engine chooses from.
const (
	enginePodman = "podman"
	engineKube   = "kube"
)

var engines = []string{enginePodman, engineKube}

// podmanVerbs are the commands that talk to podman only: with --engine
// kube they say so rather than reach this host's podman. (up, list,
// status, logs, exec, delete and verify take either engine; the rest,
// such as version, revoke or kube render, talk to neither.)
var podmanVerbs = []string{"attach", "code", "diff", "fetch", "share", "audit", "allow", "deny",
	"approvals", "approve", "reject", "stop", "start", "gc", "pool", "doctor"}

// defaultEngine is $DEVAIPOD_ENGINE, else podman.
func defaultEngine() string {
	if e := os.Getenv("DEVAIPOD_ENGINE"); e != "" {
		return e
	}
	return enginePodman
}

// checkEngine refuses an unknown --engine, and a command that does not
// work on it.
func (g *globalFlags) checkEngine(cmd *cobra.Command) error {
	if !slices.Contains(engines, g.engine) {
		return &hintError{err: fmt.Errorf("--engine must be podman or kube, not %q", g.engine),
			hint: "--engine kube runs pods on the cluster of your kubeconfig; podman (the default) on this host"}
	}
	if g.engine == engineKube && slices.Contains(podmanVerbs, cmd.Name()) {
		hint := "with --engine kube: up, list, status, logs, exec, delete and verify; run this one with --engine podman"
		switch cmd.Name() {
		case "stop", "start":
			hint = "a Pod on a cluster is not stopped and started again: `devaipod delete NAME --keep-volumes` removes its Pods and keeps its volumes"
		}
		return &hintError{err: fmt.Errorf("%s does not work with --engine kube yet", cmd.Name()), hint: hint}
	}
	if g.engine != engineKube && (g.kubeContext != "" || g.namespace != "") && cmd.Name() != "render" {
		return &hintError{err: fmt.Errorf("--context and --namespace are for --engine kube"),
			hint: "add --engine kube (or set DEVAIPOD_ENGINE=kube)"}
	}
	return nil
}

// connectKube is kubeclient.Connect; tests replace it with a fake
// cluster.
var connectKube = kubeclient.Connect

// kubeClient connects to the cluster --context and --namespace name.
func (g *globalFlags) kubeClient(cmd *cobra.Command) (*kubeclient.Client, error) {
	return connectKube(kubeclient.Options{Context: g.kubeContext, Namespace: g.namespace})
}

// withAnyEngine connects to the engine --engine names and runs fn.
func withAnyEngine(cmd *cobra.Command, g *globalFlags, fn func(eng pod.Engine) error) error {
	if g.engine == engineKube {
		kc, err := g.kubeClient(cmd)
		if err != nil {
			return err
		}
		return fn(kc)
	}
	p, err := g.connect(cmd)
	if err != nil {
		return err
	}
	defer p.Close()
	return fn(p)
}

// withPodEngine validates the NAME argument, connects to the engine and
// runs fn.
func withPodEngine(cmd *cobra.Command, g *globalFlags, args []string, fn func(eng pod.Engine, short string) error) error {
	short, err := podArg(args)
	if err != nil {
		return err
	}
	return withAnyEngine(cmd, g, func(eng pod.Engine) error { return fn(eng, short) })
}

// kubeHint is the advice for the kube engine's errors ("" for none).
func kubeHint(err error) string {
	var ne *kubeclient.NotSupportedError
	var ce *kubeclient.ConnectError
	var we *kubeclient.WaitError
	var ae *kubeclient.ApplyError
	switch {
	case errors.As(err, &ce):
		return ce.Hint
	case errors.As(err, &ne):
		return ne.Hint
	case errors.As(err, &we):
		ns := ""
		if we.Namespace != "" {
			ns = " -n " + we.Namespace
		}
		msg := "`kubectl get pods" + ns + " -l io.devaipod.pod` and `kubectl describe pod" + ns + " POD` say more"
		if strings.Contains(err.Error(), "ImagePull") || strings.Contains(err.Error(), "ErrImagePull") {
			msg += "; the nodes pull every image themselves: an image built with podman on this host (localhost/...) must be pushed to a registry they reach (up --image, --helper-image)"
		}
		if strings.Contains(err.Error(), "Unschedulable") {
			msg += "; the agent's Pod must run on the workspace's node (they share volumes): that node needs room for both"
		}
		return msg + ". Everything up applied was deleted (unless --keep-on-failure)"
	case errors.As(err, &ae):
		msg := "everything up applied before it was deleted again"
		if strings.Contains(err.Error(), "forbidden") {
			msg = "your kubeconfig's user may not create it in this namespace (kubectl auth can-i create pods,secrets,persistentvolumeclaims,networkpolicies), or the namespace's Pod Security refuses it; " + msg
		}
		return msg
	}
	return ""
}

// completeKubeContexts offers the kubeconfig's contexts.
func completeKubeContexts(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	names, _ := kubeclient.Contexts("")
	return names, cobra.ShellCompDirectiveNoFileComp
}

// printKubeError is printError for --engine kube: the advice that names
// podman's ways (start a stopped pod, list without the engine) is the
// cluster's here.
func printKubeError(w io.Writer, err error) {
	var nr *pod.NotRunningError
	switch {
	case kubeHint(err) != "":
	case errors.As(err, &nr):
		fmt.Fprintf(w, "Error: %s\n", safetext.Lines(err.Error()))
		fmt.Fprintf(w, "Hint: `kubectl get pods -l %s=%s` says why (pending: scheduling, image pulls, or an up still copying); a Pod that ended does not start again: `devaipod --engine kube delete %s`, then up\n", plan.LabelPod, nr.Name, nr.Name)
		return
	case errors.Is(err, pod.ErrNotFound) && strings.HasPrefix(err.Error(), "pod "):
		fmt.Fprintf(w, "Error: %s\n", safetext.Lines(err.Error()))
		fmt.Fprintln(w, "Hint: `devaipod --engine kube list` shows the pods of this namespace (--namespace, --context pick another)")
		return
	}
	printError(w, err)
}

package main

import (
	"fmt"
	"strings"

	"github.com/devaipod/devaipod/pod"
	"github.com/spf13/cobra"
)

// withEngine connects to podman, runs fn and lets go of the connection.
func withEngine(cmd *cobra.Command, g *globalFlags, fn func(eng pod.Engine) error) error {
	p, err := g.connect(cmd)
	if err != nil {
		return err
	}
	defer p.Close()
	return fn(p)
}

// withPod validates the NAME argument, connects to podman and runs fn.
func withPod(cmd *cobra.Command, g *globalFlags, args []string, fn func(eng pod.Engine, short string) error) error {
	short, err := podArg(args)
	if err != nil {
		return err
	}
	return withEngine(cmd, g, func(p pod.Engine) error { return fn(p, short) })
}

// onPod runs fn on the named pod and reports done.
func onPod(cmd *cobra.Command, g *globalFlags, args []string, done string, fn func(pod.Engine, string) error) error {
	return withPod(cmd, g, args, func(p pod.Engine, short string) error {
		if err := fn(p, short); err != nil {
			if err := pod.MissingPod(cmd.Context(), p, short, err); err != nil {
				return err
			}
			if msg := err.Error(); strings.HasPrefix(msg, "pod "+short+" ") || strings.HasPrefix(msg, "pod "+short+":") {
				return err // it names the pod already
			}
			return fmt.Errorf("pod %s: %w", short, err)
		}
		if g.json() {
			return writeJSON(cmd.OutOrStdout(), map[string]string{"name": short, "result": done})
		}
		if !g.quiet {
			fmt.Fprintf(cmd.OutOrStdout(), "Pod %s %s.\n", short, done)
		}
		return nil
	})
}

// reportObjects prints objects as {key: [...]} in JSON, else a summary
// line and one line per object.
func reportObjects(cmd *cobra.Command, g *globalFlags, key string, objs []pod.Object, summary string) error {
	if g.json() {
		if objs == nil {
			objs = []pod.Object{}
		}
		return writeJSON(cmd.OutOrStdout(), map[string]any{key: objs})
	}
	if g.quiet {
		return nil
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "%s.\n", summary)
	for _, o := range objs {
		fmt.Fprintf(w, "  %-9s %s\n", o.Kind, o.Name)
	}
	return nil
}

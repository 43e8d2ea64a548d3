package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/devaipod/devaipod/pod"
	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/pod/podman"
	"github.com/spf13/cobra"
)

func newListCommand(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List devaipod pods",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := g.connect(cmd)
			if err != nil {
				return err
			}
			defer p.Close()
			sums, err := pod.List(cmd.Context(), p)
			if err != nil {
				return err
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), sums)
			}
			if len(sums) == 0 {
				g.infof(cmd, "No devaipod pods. Create one with `devaipod up PATH-OR-URL`.")
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATE\tREPO\tCREATED")
			for _, s := range sums {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.State, s.Repo, age(s.Created))
			}
			return tw.Flush()
		},
	}
}

func age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return d.String() + " ago"
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.Format("2006-01-02")
}

func newStatusCommand(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:               "status NAME",
		Short:             "Show a pod's containers, volumes and whether its agent answers",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPod(cmd, g, args, func(p *podman.Podman, short string) error {
				return printStatus(cmd, g, p, short)
			})
		},
	}
}

func printStatus(cmd *cobra.Command, g *globalFlags, p *podman.Podman, short string) error {
	s, err := pod.Status(cmd.Context(), p, short)
	if err != nil {
		return err
	}
	if g.json() {
		return writeJSON(cmd.OutOrStdout(), s)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "Pod:      %s (%s)\n", s.Name, s.Pod)
	fmt.Fprintf(w, "State:    %s\n", s.State)
	if s.Repo != "" {
		fmt.Fprintf(w, "Repo:     %s\n", s.Repo)
	}
	if s.Commit != "" {
		fmt.Fprintf(w, "Commit:   %s\n", s.Commit)
	}
	if s.Task != "" {
		fmt.Fprintf(w, "Task:     %s\n", s.Task)
	}
	fmt.Fprintf(w, "Created:  %s\n", age(s.Created))
	agent := "not checked (pod not running)"
	if s.AgentReady != nil {
		agent = "not answering"
		if *s.AgentReady {
			agent = "answering"
		}
	}
	fmt.Fprintf(w, "Agent:    %s\n", agent)
	fmt.Fprintln(w, "Containers:")
	for _, c := range s.Containers {
		fmt.Fprintf(w, "  %-10s %-40s %s\n", c.Role, c.Name, c.State)
	}
	fmt.Fprintf(w, "Volumes:  %s\n", strings.Join(s.Volumes, ", "))
	if len(s.Secrets) > 0 {
		fmt.Fprintf(w, "Secrets:  %s\n", strings.Join(s.Secrets, ", "))
	}
	return nil
}

func newLogsCommand(g *globalFlags) *cobra.Command {
	var container string
	var follow bool
	var tail int
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Show a container's logs (the agent's by default)",
		Example: `  devaipod logs myproject
  devaipod logs myproject -c workspace --tail 50
  devaipod logs myproject -f`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkRole(container); err != nil {
				return err
			}
			return withPod(cmd, g, args, func(p *podman.Podman, short string) error {
				err := p.Logs(cmd.Context(), plan.ContainerName(short, container), tail, follow, cmd.OutOrStdout())
				if !errors.Is(err, pod.ErrNotFound) {
					return err
				}
				if err := missingPod(cmd.Context(), p, short, err); err != nil {
					return err
				}
				return fmt.Errorf("pod %s has no %s container (the proxy exists in network mode allowlist, the gator with --gator)", short, container)
			})
		},
	}
	cmd.Flags().StringVarP(&container, "container", "c", plan.RoleAgent, "container: workspace, agent, proxy or gator")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines")
	cmd.Flags().IntVar(&tail, "tail", -1, "print only the last N lines")
	cmd.RegisterFlagCompletionFunc("container", cobra.FixedCompletions(roles, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

var roles = []string{plan.RoleWorkspace, plan.RoleAgent, plan.RoleProxy, plan.RoleGator}

func checkRole(role string) error {
	for _, r := range roles {
		if r == role {
			return nil
		}
	}
	return fmt.Errorf("unknown container %q: use one of %s", role, strings.Join(roles, ", "))
}

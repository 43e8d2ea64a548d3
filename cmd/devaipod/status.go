package main

import (
	"fmt"
	"strings"

	"github.com/devaipod/devaipod/internal/safetext"
	"github.com/devaipod/devaipod/pod"
	"github.com/spf13/cobra"
)

func newStatusCommand(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:               "status NAME",
		Short:             "Show a pod's containers, volumes and whether its agent answers",
		Args:              positional("NAME"),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPodEngine(cmd, g, args, func(eng pod.Engine, short string) error {
				return printStatus(cmd, g, eng, short)
			})
		},
	}
}

func printStatus(cmd *cobra.Command, g *globalFlags, eng pod.Engine, short string) error {
	s, err := pod.Status(cmd.Context(), eng, short)
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
		trust := "trusted: its workspace has your trusted values"
		if s.Untrusted {
			trust = "not trusted: its workspace has nothing of yours"
		}
		fmt.Fprintf(w, "Repo:     %s (%s)\n", s.Repo, trust)
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
	if s.NoModel != "" {
		agent += "; at up it had no model it could reach, so no task gets done: " + s.NoModel
	}
	fmt.Fprintf(w, "Agent:    %s\n", agent)
	if r := s.Refused; r != nil && r.Count > 0 {
		hosts := r.TopHosts(3)
		for i, h := range hosts {
			hosts[i] = fmt.Sprintf("%s x%d", safetext.Printable(h), r.Hosts[h])
		}
		by := ""
		if len(hosts) > 0 {
			by = " (" + strings.Join(hosts, ", ") + ")"
		}
		fmt.Fprintf(w, "Refused:  %d of the agent's requests since the last look, %s%s: `devaipod audit %s --denied` shows them\n",
			r.Count, age(r.Since), by, s.Name)
	}
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

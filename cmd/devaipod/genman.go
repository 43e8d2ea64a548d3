//go:build genman

// The hidden command `devaipod __gen-man DIR`, built only with the tag
// genman (the Makefile builds _output/devaipod-genman with it for make
// install): the CLI itself does not link cobra/doc and its markdown-to-roff
// converter. It lives in this package because the command tree does
// (newRootCommand), and a main package cannot be imported from hack/.

package main

import (
	"errors"
	"io"
	"os"

	"github.com/devaipod/devaipod/pod/plan"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

func init() { extraCommands = append(extraCommands, newGenManCommand) }

func newGenManCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "__gen-man DIR",
		Short:  "Write devaipod's man pages (section 1) into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return genMan(args[0])
		},
	}
}

// genMan writes one page per command: devaipod.1, devaipod-up.1, ... The
// date is SOURCE_DATE_EPOCH's when it is set (the Makefile sets it to the
// last commit's), so the pages are reproducible.
func genMan(dir string) error {
	if fi, err := os.Stat(dir); err != nil {
		return err
	} else if !fi.IsDir() {
		return errors.New(dir + " is not a directory")
	}
	// A fresh tree, without this command, with the completion command
	// (cobra adds it at Execute) and without a page for `help`.
	root := newRootCommand(streams{in: os.Stdin, out: io.Discard, err: io.Discard})
	root.SetHelpCommand(&cobra.Command{Use: "help", Hidden: true})
	root.InitDefaultCompletionCmd()
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.DisableAutoGenTag = true
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return doc.GenManTree(root, &doc.GenManHeader{Section: "1", Source: "devaipod " + plan.Version, Manual: "devaipod manual"}, dir)
}

// Package devcontainer finds, parses, validates and substitutes
// devcontainer.json files the way the devcontainer CLI and the spec at
// containers.dev do, and turns them into plain values: a Config, the
// podman-relevant subset of runArgs (RunArgs), and lifecycle commands that
// a caller can run.
//
// It knows nothing about podman or about devaipod's pod layout; the caller
// decides where each setting applies. docs/devcontainer.md is the user's
// view of what devaipod supports and the rules the caller applies (for
// example: privilege settings reach the workspace container only).
//
// The usual sequence is:
//
//	path, err := devcontainer.Find(checkout, flagPath) // "" when there is none
//	cfg, err := devcontainer.Load(path)                // syntax, types, validation
//	warn(cfg.Unsupported, cfg.Warnings)
//	err = cfg.Substitute(devcontainer.Vars{...})       // before the container exists
//	runArgs, err := devcontainer.ParseRunArgs(cfg.RunArgs)
//	... create and start the container ...
//	err = cfg.SubstituteContainerEnv(envOfTheRunningContainer)
//	... run cfg.OnCreateCommand etc.
package devcontainer

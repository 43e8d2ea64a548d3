// Package gator is the pod's forge gatekeeper: it holds the GitHub token and
// offers the agent a few scoped GitHub operations as MCP tools, so that the
// agent can read issues and open draft pull requests without ever holding a
// credential.
//
// Every tool names its repository (owner and repo) explicitly and is checked
// by a [policy.Policy], built from [policy.Scope]s such as
// "github:octo/app:read,create-draft", before any request leaves the gator.
// Every call, allowed or denied, is written as one JSON [policy.Record] to
// the audit log. The token is never logged and is scrubbed from everything
// the agent gets back.
//
// The scopes, the decision table and the audit record are package
// gator/policy, which needs only the standard library: devaipod (the CLI)
// parses --gator scopes and reads audit records through it without linking
// this package's dependencies.
//
// The gator runs as devaipod-gator (cmd/devaipod-gator) in its own container
// of the pod; the agent reaches it over a unix socket bridged to
// 127.0.0.1:8765. See docs/gator.md for the scopes, the tools and the audit
// format.
//
// Why these dependencies (devaipod-gator links them, so each must earn its
// place; none pulls in podman or cobra). They are the reason the gator has a
// binary of its own: devaipod-helper, mapped into every container and the
// egress proxy's process, must not carry them (its deps_test.go says so):
//
//   - github.com/modelcontextprotocol/go-sdk, the official MCP SDK: the
//     agent side (opencode, Claude Code...) speaks MCP, and the protocol's
//     session handling, streamable HTTP transport and version negotiation are
//     easy to get subtly wrong by hand. Its client and in-memory transports
//     also let the tests talk to the gator the way an agent does.
//   - github.com/google/go-github: typed, maintained bindings of the GitHub
//     REST API, with its error types and GitHub Enterprise URL handling, so
//     the gator's code is about policy rather than about request building.
//   - github.com/go-git/go-git/v5: push_branch pushes the workspace's HEAD
//     in-process. The gator image is FROM scratch (no git binary), the
//     workspace is mounted read-only and agent-controlled (so running the
//     git CLI there would run the agent's hooks and config), and go-git lets
//     us open the repository through a filesystem bound to the workspace,
//     push a single commit to a single ref without ever forcing, and pass the
//     token as HTTP basic auth without writing it anywhere.
package gator

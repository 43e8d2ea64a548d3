// Package policy is the gator's policy as data: the scopes a pod grants
// ([Scope], [ParseScope], [ScopesFromConfig], [DefaultScopes]), the table
// that decides each tool call from them ([Policy], [Policy.Decide],
// [ToolPermissions], [CheckAgentBranch]) and the gator's audit record
// ([Record], [ParseRecord]).
//
// It is what devaipod (the CLI) needs of the gator: it checks --gator scopes
// and [gator.github] repos before creating a pod, and reads the gator's
// audit lines in `devaipod audit`. It is a package of its own, apart from
// package gator (the MCP server, in cmd/devaipod-gator), so that the CLI
// does not link the server's MCP SDK, GitHub client and go-git; it imports
// only the standard library, and imports_test.go keeps it that way.
package policy

package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os/exec"

	"github.com/devaipod/devaipod/pod"
	"github.com/spf13/cobra"
)

func newCodeCommand(g *globalFlags) *cobra.Command {
	var printOnly bool
	cmd := &cobra.Command{
		Use:   "code NAME [--print]",
		Short: "Open VS Code attached to the pod's workspace, in the repository's folder",
		Long: `Open VS Code attached to the pod's workspace container (the trusted side,
with your image's tools), in the repository's folder, as the Dev Containers
extension's "Attach to Running Container" does. The pod must be running.

It runs 'code --folder-uri URI' with the extension's attached-container URI:
  vscode-remote://attached-container+HEX/workspaces/PROJECT
where HEX is the hex of {"containerName":"/devaipod-NAME-workspace"}.
--print prints the URI instead, and opens nothing: for code-insiders, a
script, or a window of your own (code --folder-uri "$(devaipod code NAME --print)").

VS Code must reach podman. Install the Dev Containers extension
(ms-vscode-remote.remote-containers) and either set, in VS Code's settings,
  "dev.containers.dockerPath": "podman"
(it then runs podman, which finds your rootless containers by itself), or
keep docker's command and point it at podman's socket: enable the socket
(systemctl --user enable --now podman.socket) and start VS Code with
  DOCKER_HOST=unix://$XDG_RUNTIME_DIR/podman/podman.sock
in its environment. A podman reached through a service of its own
(CONTAINER_HOST, --connection) needs the same address there.

VS Code runs as the workspace container's user, without the trusted
variables and the devcontainer's remoteUser that 'devaipod exec' gives a
shell (VS Code's "Open Named Container Configuration File" can set a
remoteUser for the container).

Other editors: run a terminal editor in 'devaipod exec NAME' (vim, emacs -nw,
helix: the workspace image's); or attach a tool that speaks docker's or
podman's API to the container devaipod-NAME-workspace through the podman
socket, or with 'podman exec -it devaipod-NAME-workspace sh' (the folder is
the container's working directory).`,
		Example: `  devaipod code myproject
  devaipod code myproject --print
  devaipod code myproject -o json`,
		Args:              positional("NAME"),
		ValidArgsFunction: completePods(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPod(cmd, g, args, func(p pod.Engine, short string) error {
				container, folder, err := pod.WorkspaceFolder(cmd.Context(), p, short)
				if err != nil {
					return err
				}
				uri := vscodeURI(container, folder)
				if !printOnly {
					if err := openVSCode(cmd, short, uri); err != nil {
						return err
					}
				}
				switch {
				case g.json():
					return writeJSON(cmd.OutOrStdout(), map[string]string{"uri": uri, "container": container, "folder": folder})
				case printOnly:
					fmt.Fprintln(cmd.OutOrStdout(), uri)
				default:
					g.infof(cmd, "Opened %s in %s in VS Code.", folder, container)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&printOnly, "print", false, "print the folder URI instead of running code")
	return cmd
}

// vscodeURI is the Dev Containers extension's URI of folder in a running
// container: the authority is attached-container+ and the hex of the JSON
// {"containerName":"/NAME"} (the name as docker's API gives it, with a
// leading slash), the path the folder's.
func vscodeURI(container, folder string) string {
	authority, _ := json.Marshal(struct {
		ContainerName string `json:"containerName"`
	}{"/" + container})
	return "vscode-remote://attached-container+" + hex.EncodeToString(authority) + (&url.URL{Path: folder}).EscapedPath()
}

// codeCommand is VS Code's command line.
const codeCommand = "code"

// openVSCode runs code --folder-uri uri; its output goes to standard error
// (standard output is for -o json).
func openVSCode(cmd *cobra.Command, short, uri string) error {
	bin, err := exec.LookPath(codeCommand)
	if err != nil {
		return &hintError{err: fmt.Errorf("VS Code's %q command is not on PATH", codeCommand),
			hint: fmt.Sprintf("install it (in VS Code: Shell Command: Install 'code' command in PATH), or run `devaipod code %s --print` and open the URI yourself: code --folder-uri URI", short)}
	}
	c := exec.CommandContext(cmd.Context(), bin, "--folder-uri", uri)
	c.Stdout, c.Stderr = cmd.ErrOrStderr(), cmd.ErrOrStderr()
	if err := c.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("%s --folder-uri %s: exit status %d", codeCommand, uri, ee.ExitCode())
		}
		return fmt.Errorf("%s --folder-uri %s: %w", codeCommand, uri, err)
	}
	return nil
}

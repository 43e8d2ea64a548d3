package devcontainer

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// specProperties are the top-level properties of the devcontainer spec
// (its devContainer schema), each with a file that sets it.
var specProperties = map[string]string{
	"name":                        `{"image": "img", "name": "x"}`,
	"image":                       `{"image": "img"}`,
	"build":                       `{"build": {"dockerfile": "Dockerfile"}}`,
	"dockerFile":                  `{"dockerFile": "Dockerfile"}`,
	"context":                     `{"dockerFile": "Dockerfile", "context": ".."}`,
	"appPort":                     `{"image": "img", "appPort": [3000]}`,
	"containerEnv":                `{"image": "img", "containerEnv": {"A": "1"}}`,
	"containerUser":               `{"image": "img", "containerUser": "root"}`,
	"mounts":                      `{"image": "img", "mounts": ["type=volume,source=v,target=/v"]}`,
	"workspaceMount":              `{"image": "img", "workspaceMount": "source=/x,target=/w,type=bind"}`,
	"workspaceFolder":             `{"image": "img", "workspaceFolder": "/workspaces/app"}`,
	"runArgs":                     `{"image": "img", "runArgs": ["--cap-add=SYS_PTRACE"]}`,
	"overrideCommand":             `{"image": "img", "overrideCommand": false}`,
	"shutdownAction":              `{"image": "img", "shutdownAction": "none"}`,
	"init":                        `{"image": "img", "init": true}`,
	"privileged":                  `{"image": "img", "privileged": true}`,
	"capAdd":                      `{"image": "img", "capAdd": ["SYS_PTRACE"]}`,
	"securityOpt":                 `{"image": "img", "securityOpt": ["seccomp=unconfined"]}`,
	"features":                    `{"image": "img", "features": {"ghcr.io/devcontainers/features/go:1": {}}}`,
	"overrideFeatureInstallOrder": `{"image": "img", "overrideFeatureInstallOrder": ["a"]}`,
	"forwardPorts":                `{"image": "img", "forwardPorts": [3000]}`,
	"portsAttributes":             `{"image": "img", "portsAttributes": {"3000": {"label": "web"}}}`,
	"otherPortsAttributes":        `{"image": "img", "otherPortsAttributes": {"onAutoForward": "silent"}}`,
	"updateRemoteUserUID":         `{"image": "img", "updateRemoteUserUID": true}`,
	"remoteEnv":                   `{"image": "img", "remoteEnv": {"A": "1"}}`,
	"remoteUser":                  `{"image": "img", "remoteUser": "vscode"}`,
	"userEnvProbe":                `{"image": "img", "userEnvProbe": "loginShell"}`,
	"initializeCommand":           `{"image": "img", "initializeCommand": "echo"}`,
	"onCreateCommand":             `{"image": "img", "onCreateCommand": "echo"}`,
	"updateContentCommand":        `{"image": "img", "updateContentCommand": "echo"}`,
	"postCreateCommand":           `{"image": "img", "postCreateCommand": "echo"}`,
	"postStartCommand":            `{"image": "img", "postStartCommand": "echo"}`,
	"postAttachCommand":           `{"image": "img", "postAttachCommand": "echo"}`,
	"waitFor":                     `{"image": "img", "waitFor": "postCreateCommand"}`,
	"hostRequirements":            `{"image": "img", "hostRequirements": {"cpus": 2}}`,
	"customizations":              `{"image": "img", "customizations": {"devaipod": {}}}`,
	"dockerComposeFile":           `{"image": "img", "dockerComposeFile": "docker-compose.yml"}`,
	"service":                     `{"image": "img", "service": "app"}`,
	"runServices":                 `{"image": "img", "runServices": ["db"]}`,
	"secrets":                     `{"image": "img", "secrets": {"TOKEN": {}}}`}

// TestSpecTable: docs/devcontainer.md's table of the spec's properties
// lists each of them, and says what the parser does with it: supported
// (read), warned (ignored with a warning) or refused (an error).
func TestSpecTable(t *testing.T) {
	doc, err := os.ReadFile("../../docs/devcontainer.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Every property of the spec\n")
	if !ok {
		t.Fatal("docs/devcontainer.md has no section \"Every property of the spec\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rows := regexp.MustCompile("(?m)^\\| `([A-Za-z$]+)` \\| (supported|warned|refused) \\|").FindAllStringSubmatch(section, -1)
	var listed []string
	for _, r := range rows {
		prop, status := r[1], r[2]
		listed = append(listed, prop)
		file, ok := specProperties[prop]
		if !ok {
			t.Errorf("the table lists %s, which is not a property of the spec", prop)
			continue
		}
		c, err := Parse([]byte(file), "dc.json")
		got := "supported"
		switch {
		case err != nil:
			got = "refused"
		case slices.Contains(c.Unsupported, prop):
			got = "warned"
		}
		if got != status {
			t.Errorf("%s: the table says %s, the parser %s (%v)", prop, status, got, err)
		}
	}
	for prop := range specProperties {
		if !slices.Contains(listed, prop) {
			t.Errorf("the table does not list %s", prop)
		}
	}
}

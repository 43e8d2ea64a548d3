package plan

import (
	"cmp"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/devaipod/devaipod/pod/config"
)

// Credential is a secret the agent holds only as a placeholder: the
// proxy puts the value, which it reads from a podman secret, into the
// headers of requests to Hosts.
type Credential struct {
	// Name is the agent's variable, which holds Placeholder.
	Name        string   `json:"name"`
	Hosts       []string `json:"hosts"`
	Placeholder string   `json:"placeholder"`
	// Secret is the podman secret with the value: the pod's own, made
	// from devaipod's environment, or the user's ([credentials] secret).
	Secret string `json:"secret"`
	// From says where the value comes from: "$VAR" or "podman secret NAME".
	From string `json:"from"`
}

// Where the agent finds the pod's proxy CA, which its init fetches from
// the proxy at start (the proxy makes the CA and keeps its key): the CA
// alone for Node (added to its own roots), the image's roots and the CA
// for everything that replaces the roots with a file.
const (
	AgentCADir    = "/tmp/devaipod-ca"
	AgentCAFile   = AgentCADir + "/ca.pem"
	AgentCABundle = AgentCADir + "/bundle.pem"
	// UpstreamCAVar is the proxy's secret file with [network] upstream_ca.
	UpstreamCAVar = "DEVAIPOD_UPSTREAM_CA"
	// ProxyCAPath is where the proxy hands out its CA certificate.
	ProxyCAPath = "/devaipod/ca.pem"
)

// caEnv points the agent's TLS clients at the proxy's CA.
var caEnv = map[string]string{
	"SSL_CERT_FILE":       AgentCABundle, // OpenSSL, Go, Python's ssl
	"REQUESTS_CA_BUNDLE":  AgentCABundle, // Python requests
	"CURL_CA_BUNDLE":      AgentCABundle,
	"GIT_SSL_CAINFO":      AgentCABundle,
	"NODE_EXTRA_CA_CERTS": AgentCAFile, // Node and Bun add it to their roots
}

// azureKey is bound to the host of AZURE_OPENAI_ENDPOINT.
const azureKey = "AZURE_OPENAI_API_KEY"

// isCredentialVar tells the built-in LLM variables that are keys.
func isCredentialVar(k string) bool {
	_, ok := config.DefaultCredentials[k]
	return ok || k == azureKey
}

// credentials resolves [credentials] and the built-in LLM keys set in
// devaipod's environment into the pod's credentials, and the secrets that
// carry the values taken from the environment. The open network mode has
// no proxy to put values in: there the built-in keys reach the agent as
// they are (config.validate refuses [credentials] there).
func (b *builder) credentials() ([]Credential, []SecretSpec) {
	if b.mode == config.NetworkOpen {
		var keys []string
		for _, k := range LLMKeyVars {
			if isCredentialVar(k) && b.in.HostEnv[k] != "" {
				keys = append(keys, k)
			}
		}
		if len(keys) > 0 {
			b.warnings = append(b.warnings, fmt.Sprintf("network mode \"open\": the agent holds the real %s (no proxy to put them in for it)", strings.Join(keys, ", ")))
		}
		return nil, nil
	}
	configured := b.cfg.Credentials
	hosts := map[string][]string{}
	for name, h := range config.DefaultCredentials {
		if b.in.HostEnv[name] != "" {
			hosts[name] = h
		}
	}
	if b.in.HostEnv[azureKey] != "" {
		hosts[azureKey] = []string{"*.openai.azure.com"}
		if u, err := url.Parse(b.in.HostEnv["AZURE_OPENAI_ENDPOINT"]); err == nil && u.Hostname() != "" {
			hosts[azureKey] = []string{u.Host}
		}
	}
	for name, c := range configured {
		hosts[name] = c.Hosts
	}
	var creds []Credential
	var secrets []SecretSpec
	for _, name := range slices.Sorted(maps.Keys(hosts)) {
		c := Credential{Name: name, Hosts: hosts[name], Placeholder: b.placeholder(name)}
		if secret := configured[name].Secret; secret != "" {
			c.Secret, c.From = secret, "podman secret "+secret
		} else {
			env := cmp.Or(configured[name].Env, name)
			value := b.in.HostEnv[env]
			if value == "" {
				b.warnings = append(b.warnings, fmt.Sprintf("[credentials.%s]: $%s is not set where devaipod runs, so %s is not passed to the agent", name, env, name))
				continue
			}
			c.Secret, c.From = ObjectName(b.short, "cred-"+strings.ToLower(name)), "$"+env
			secrets = append(secrets, SecretSpec{Name: c.Secret, Labels: b.labels(), Value: value, Guards: "credential " + name})
		}
		creds = append(creds, c)
	}
	return creds, secrets
}

// placeholder is what the agent holds for the credential name. It only
// has to be unlike anything else a request carries: the pod's random salt
// makes it so, and names cannot contain "-", so no placeholder contains
// another.
func (b *builder) placeholder(name string) string {
	return "devaipod-" + name + "-" + cmp.Or(b.in.PlaceholderSalt, "placeholder")
}

// CredentialArg is a credential as the proxy's --credential flag takes it:
// NAME=PLACEHOLDER@HOST,HOST.
func CredentialArg(c Credential) string {
	return c.Name + "=" + c.Placeholder + "@" + strings.Join(c.Hosts, ",")
}

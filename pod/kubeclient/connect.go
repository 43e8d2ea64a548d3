package kubeclient

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
)

// FieldManager is the field manager of devaipod's server-side applies.
const FieldManager = "devaipod"

// Options say which cluster and namespace to use. Empty fields mean the
// kubeconfig's own: its current context, and that context's namespace
// ("default" when it names none).
type Options struct {
	// Kubeconfig is a kubeconfig file ("" for $KUBECONFIG, else
	// ~/.kube/config, as kubectl reads them).
	Kubeconfig string
	Context    string
	Namespace  string
}

// Client is a connection to one namespace of a cluster. It implements
// pod.Engine (see engine.go).
type Client struct {
	cs     kubernetes.Interface
	config *rest.Config // nil in tests: exec is then newExecutor's
	// Namespace is where devaipod's objects are; Context and Host say
	// which cluster (for messages).
	Namespace, Context, Host string

	// poll is how often Wait and Remove look again; goneTimeout how long
	// a delete waits for Pods to be gone before it keeps their
	// NetworkPolicies (default 2 minutes).
	poll, goneTimeout time.Duration
	// newExecutor makes the stream of one exec request (tests replace it).
	newExecutor func(method string, u *url.URL) (remotecommand.Executor, error)
}

// ConnectError says the cluster could not be reached or the kubeconfig
// not read; Hint says what to do.
type ConnectError struct {
	Err  error
	Hint string
}

func (e *ConnectError) Error() string { return "connect to kubernetes: " + e.Err.Error() }
func (e *ConnectError) Unwrap() error { return e.Err }

// Connect reads the kubeconfig as kubectl does and returns a client for
// the namespace o names, else the context's. It does not call the
// cluster: the first request tells whether it answers.
func Connect(o Options) (*Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: o.Context}
	overrides.Context.Namespace = o.Namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, &ConnectError{Err: fmt.Errorf("read the kubeconfig: %w", err), Hint: "check $KUBECONFIG or ~/.kube/config (kubectl config view)"}
	}
	ctxName := cmp.Or(o.Context, raw.CurrentContext)
	if o.Context != "" {
		if _, ok := raw.Contexts[o.Context]; !ok {
			return nil, &ConnectError{Err: fmt.Errorf("context %q is not in the kubeconfig", o.Context),
				Hint: "`kubectl config get-contexts` lists the contexts"}
		}
	}
	config, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, &ConnectError{Err: errors.New("no kubeconfig: $KUBECONFIG is unset and ~/.kube/config is missing or empty"),
				Hint: "point $KUBECONFIG at your cluster's kubeconfig, or pass --engine podman (the default) to run pods on this host"}
		}
		return nil, &ConnectError{Err: err, Hint: "`kubectl config get-contexts` lists the contexts; pass one with --context"}
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, &ConnectError{Err: fmt.Errorf("namespace: %w", err)}
	}
	config.UserAgent = "devaipod"
	cs, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, &ConnectError{Err: err}
	}
	c := New(cs, ns)
	c.config, c.Context, c.Host = config, ctxName, config.Host
	return c, nil
}

// Contexts lists the contexts of the kubeconfig (kubeconfig "" reads
// $KUBECONFIG, else ~/.kube/config), sorted, for shell completion.
func Contexts(kubeconfig string) ([]string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	raw, err := rules.Load()
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(raw.Contexts)), nil
}

// New is a client over a clientset (a fake one in tests) for namespace
// ns. Without a rest config (see Connect), exec needs SetExecutor.
func New(cs kubernetes.Interface, ns string) *Client {
	c := &Client{cs: cs, Namespace: cmp.Or(ns, "default"), poll: time.Second}
	c.newExecutor = c.restExecutor
	return c
}

// Clientset is the client's clientset.
func (c *Client) Clientset() kubernetes.Interface { return c.cs }

// SetExecutor replaces how exec streams are made (tests).
func (c *Client) SetExecutor(f func(method string, u *url.URL) (remotecommand.Executor, error)) {
	c.newExecutor = f
}

// SetPollInterval sets how often Wait and Remove look again (tests).
func (c *Client) SetPollInterval(d time.Duration) { c.poll = d }

// restExecutor is kubectl's: websocket (Kubernetes 1.30+), falling back
// to SPDY when the server does not upgrade.
func (c *Client) restExecutor(method string, u *url.URL) (remotecommand.Executor, error) {
	if c.config == nil {
		return nil, errors.New("exec needs a cluster connection (kubeclient.Connect)")
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.config, method, u)
	if err != nil {
		return nil, err
	}
	ws, err := remotecommand.NewWebSocketExecutor(c.config, "GET", u.String())
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/devaipod/devaipod/internal/cmdline"
	"github.com/devaipod/devaipod/proxy"
)

// Defaults of request-path.
const (
	defaultRequestPathProxy   = "http://127.0.0.1:3128" // the agent's bridge to the proxy
	defaultRequestPathTimeout = 10 * time.Minute
)

// Reasons of request-path's --json answers when the proxy gave none.
const (
	reasonHelperTimeout = "helper-timeout" // no answer within --timeout
	reasonProxyError    = "proxy-error"    // the proxy could not be reached, or answered something else
)

type requestPathOptions struct {
	rw       bool
	reason   string
	proxyURL string
	timeout  time.Duration
	json     bool
}

func newRequestPathFlagSet(o *requestPathOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("request-path", flag.ContinueOnError)
	fs.BoolVar(&o.rw, "rw", false, "ask for a copy you may write to (read-only otherwise)")
	fs.StringVar(&o.reason, "reason", "", fmt.Sprintf("why the task needs it, in a `TEXT` of at most %d bytes: the person who decides reads it", proxy.MaxPathReason))
	fs.StringVar(&o.proxyURL, "proxy", defaultRequestPathProxy, "the pod's egress proxy `URL`, as this container reaches it")
	fs.DurationVar(&o.timeout, "timeout", defaultRequestPathTimeout, "give up after waiting this long (the pod's ask timeout may end the wait sooner)")
	fs.BoolVar(&o.json, "json", false, "print the answer as one JSON object on stdout, and nothing on stderr")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper request-path [--rw] [--reason TEXT] [--json] [--proxy URL] [--timeout D] PATH

Ask for a file or folder of the host that this pod was not given. PATH is
the absolute path on the host, not in this container: /home/me/src/lib.

A person decides. The request goes to the pod's egress proxy, which files
it for the person: on the host, 'devaipod approvals' shows PATH, whether
you asked to write, and your --reason; 'devaipod approve' or 'devaipod
reject' answers. This command waits for that answer (at most --timeout; the
pod's ask timeout, a minute unless configured, may end the wait sooner).

Approved, devaipod copies PATH into the pod, and you see it at /host/PATH
(/host/home/me/src/lib): a copy of PATH as it was when approved, read-only
unless the person approves it with --rw (--rw here only asks). Rejected, not decided in time, or a path the
pod never shares (devaipod's own files, keys and the like), you get the
reason, and nothing is shared. Ask for what the task needs, not more, and
say why in --reason.

Output: "granted: visible at /host/PATH (read-only)" on stdout and exit
status 0; otherwise the refusal on stderr and exit status 1 (2 for a usage
error). With --json, the answer as one JSON object on stdout instead:

  {"granted":true,"at":"/host/home/me/src/lib","rw":false,"message":"approved by ...","id":"path-0a1b2c3d"}
  {"granted":false,"rw":false,"reason":"rejected","message":"rejected by ...: why"}

reason is one of rejected, ask-timeout, path-forbidden, bad-request,
no-approvals (this pod asks no one), ask-limit (too many requests wait),
shutdown, ask-canceled, ask-failed; or, when the proxy gave no answer,
helper-timeout or proxy-error.

Flags (before or after PATH):
`)
		fs.PrintDefaults()
	}
	return fs
}

// parseRequestPathArgs parses args, whose flags may come before or after
// PATH, and returns PATH.
func parseRequestPathArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var paths []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return paths, nil
		}
		paths = append(paths, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func runRequestPath(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o requestPathOptions
	fs := newRequestPathFlagSet(&o)
	fs.SetOutput(stderr)
	paths, err := parseRequestPathArgs(fs, args)
	if err != nil {
		return cmdline.ExitCode(err)
	}
	prefix := logPrefix + "request-path: "
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "%s%s\n", prefix, fmt.Sprintf(format, a...))
		return 2
	}
	if len(paths) != 1 {
		return usageErr("want exactly one PATH, got %d", len(paths))
	}
	// A trailing slash (a folder, as a shell completes it) is no
	// difference; anything else unclean is for the asker to fix, so that
	// the person sees the path as asked.
	p := paths[0]
	if len(p) > 1 {
		p = strings.TrimRight(p, "/")
		if p == "" {
			p = "/"
		}
	}
	if err := proxy.CheckRequestedPath(p); err != nil {
		return usageErr("PATH: %v", err)
	}
	if len(o.reason) > proxy.MaxPathReason {
		return usageErr("--reason of %d bytes: at most %d", len(o.reason), proxy.MaxPathReason)
	}
	if o.timeout <= 0 {
		return usageErr("--timeout %v: want a positive duration", o.timeout)
	}
	u, err := url.Parse(o.proxyURL)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return usageErr("--proxy %q: want http://HOST:PORT", o.proxyURL)
	}

	req := proxy.PathRequest{Path: p, Reason: o.reason, RW: o.rw}
	if !o.json {
		fmt.Fprintf(stderr, "%sasking for %s (%s); a person on the host decides (devaipod approvals), waiting up to %v\n",
			prefix, p, pathMode(o.rw), o.timeout)
	}
	a, err := askForPath(ctx, strings.TrimRight(o.proxyURL, "/")+proxy.RequestPathPath, req, o.timeout)
	if err != nil {
		a = proxy.PathAnswer{Reason: reasonProxyError, Message: err.Error()}
		if errors.Is(err, context.DeadlineExceeded) {
			a = proxy.PathAnswer{Reason: reasonHelperTimeout, Message: fmt.Sprintf("no answer within %v (--timeout)", o.timeout)}
		}
	}
	switch {
	case o.json:
		b, _ := json.Marshal(a)
		stdout.Write(append(b, '\n'))
	case a.Granted:
		fmt.Fprintf(stdout, "granted: visible at %s (%s)\n", a.At, pathMode(a.RW))
	case err != nil:
		fmt.Fprintf(stderr, "%scannot ask: %s\n", prefix, a.Message)
	default:
		fmt.Fprintf(stderr, "%srefused (%s): %s\n", prefix, a.Reason, a.Message)
		if a.Reason == proxy.ReasonAskTimeout {
			fmt.Fprintf(stderr, "%snobody decided in time; ask again when the person is there\n", prefix)
		}
	}
	if !a.Granted {
		return 1
	}
	return 0
}

func pathMode(rw bool) string {
	if rw {
		return "read-write"
	}
	return "read-only"
}

// askForPath posts req to the proxy's endpoint at u and waits for its
// answer, at most timeout. A refusal is an answer (Granted false); an
// error is none.
func askForPath(ctx context.Context, u string, req proxy.PathRequest, timeout time.Duration) (proxy.PathAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, err := json.Marshal(req)
	if err != nil {
		return proxy.PathAnswer{}, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return proxy.PathAnswer{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	// No proxy: u is the proxy itself, whatever HTTP_PROXY says.
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return proxy.PathAnswer{}, ctx.Err()
		}
		return proxy.PathAnswer{}, fmt.Errorf("cannot reach the proxy: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		if ctx.Err() != nil {
			return proxy.PathAnswer{}, ctx.Err()
		}
		return proxy.PathAnswer{}, fmt.Errorf("reading the proxy's answer: %w", err)
	}
	var a proxy.PathAnswer
	if json.Unmarshal(b, &a) != nil || (a.Reason == "" && !a.Granted) {
		return proxy.PathAnswer{}, fmt.Errorf("the proxy answered %s: %q", resp.Status, shortText(b))
	}
	if a.Granted && (resp.StatusCode != http.StatusOK || a.At == "") {
		return proxy.PathAnswer{}, fmt.Errorf("the proxy answered %s with a grant that says nothing of where", resp.Status)
	}
	return a, nil
}

// shortText is the start of an unexpected answer, for a message.
func shortText(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/devaipod/devaipod/internal/cmdline"
)

type waitOptions struct {
	timeout        time.Duration
	interval       time.Duration
	requestTimeout time.Duration
	path           string
	status         string
	verbose        bool
	user           string
	passwordFile   string
	// password is read from passwordFile.
	password string
}

func newWaitHTTPFlagSet(o *waitOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("wait-http", flag.ContinueOnError)
	fs.DurationVar(&o.timeout, "timeout", 60*time.Second, "give up after this long")
	fs.DurationVar(&o.interval, "interval", 200*time.Millisecond, "pause between attempts")
	fs.DurationVar(&o.requestTimeout, "request-timeout", 2*time.Second, "limit for one attempt")
	fs.StringVar(&o.path, "path", "", "request this `path` instead of URL's own (it must start with /)")
	fs.StringVar(&o.status, "status", "any",
		"which answers count: `any` status code, a class such as 2xx, or one code such as 200")
	fs.BoolVar(&o.verbose, "v", false, "print one line on success")
	fs.StringVar(&o.user, "user", "", "send basic authentication as this `user`, with --password-file")
	fs.StringVar(&o.passwordFile, "password-file", "", "read the basic-auth password from this `file`")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper wait-http [flags] URL

Send GET requests to URL until the server answers, then exit 0. Any status
code means the server answers unless --status says otherwise. Exit 1, with
the last error on stderr, if no answer came within --timeout. Proxy
variables (HTTP_PROXY...) are ignored. URL may omit "http://".

Flags:
`)
		fs.PrintDefaults()
	}
	return fs
}

func runWaitHTTP(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o waitOptions
	fs := newWaitHTTPFlagSet(&o)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return cmdline.ExitCode(err)
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "%swait-http: want exactly one URL, got %d arguments\n", logPrefix, fs.NArg())
		return 2
	}
	u, err := probeURL(fs.Arg(0), o.path)
	if err != nil {
		fmt.Fprintf(stderr, "%swait-http: %v\n", logPrefix, err)
		return 2
	}
	accept, err := parseStatus(o.status)
	if err != nil {
		fmt.Fprintf(stderr, "%swait-http: %v\n", logPrefix, err)
		return 2
	}
	if (o.user == "") != (o.passwordFile == "") {
		fmt.Fprintf(stderr, "%swait-http: --user and --password-file go together\n", logPrefix)
		return 2
	}
	if o.passwordFile != "" {
		if o.password, err = readPassword(o.passwordFile); err != nil {
			fmt.Fprintf(stderr, "%swait-http: %v\n", logPrefix, err)
			return 1
		}
	}

	start := time.Now()
	code, err := waitHTTP(ctx, u, accept, o)
	if err != nil {
		fmt.Fprintf(stderr, "%swait-http: %v\n", logPrefix, err)
		return 1
	}
	if o.verbose {
		fmt.Fprintf(stdout, "%s answered %d after %s\n", u, code, time.Since(start).Round(time.Millisecond))
	}
	return 0
}

// probeURL builds the URL to poll from the argument and --path.
func probeURL(raw, path string) (string, error) {
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("bad URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("bad URL %q: scheme must be http or https", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("bad URL %q: no host", raw)
	}
	if path != "" {
		if !strings.HasPrefix(path, "/") {
			return "", fmt.Errorf("bad --path %q: must start with /", path)
		}
		ref, err := url.Parse(path)
		if err != nil {
			return "", fmt.Errorf("bad --path: %w", err)
		}
		u = u.ResolveReference(ref)
	}
	return u.String(), nil
}

// parseStatus turns --status into a predicate on status codes.
func parseStatus(s string) (func(int) bool, error) {
	if s == "any" {
		return func(int) bool { return true }, nil
	}
	if len(s) == 3 && strings.HasSuffix(s, "xx") && s[0] >= '1' && s[0] <= '5' {
		class := int(s[0]-'0') * 100
		return func(code int) bool { return code >= class && code < class+100 }, nil
	}
	if n, err := strconv.Atoi(s); err == nil && n >= 100 && n <= 599 {
		return func(code int) bool { return code == n }, nil
	}
	return nil, fmt.Errorf("bad --status %q: want any, a class such as 2xx, or a code such as 200", s)
}

// newProbeClient returns a client that talks to the server directly: the
// server is local, and a proxy from the environment would answer in its
// stead (or not at all, in the agent's network namespace).
func newProbeClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
		// A redirect is an answer too.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// waitHTTP polls u until accept returns true for a status code, and returns
// that code, or an error holding the last failure once o.timeout has passed.
func waitHTTP(ctx context.Context, u string, accept func(int) bool, o waitOptions) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	client := newProbeClient()
	var lastErr error
	for {
		code, err := probe(ctx, client, u, o)
		switch {
		case err == nil && accept(code):
			return code, nil
		case err == nil:
			lastErr = fmt.Errorf("status %d", code)
		case ctx.Err() == nil || lastErr == nil:
			// An attempt cut short by the overall deadline says less
			// than the one before it.
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%s did not answer within %s: %w", u, o.timeout, lastErr)
		case <-time.After(o.interval):
		}
	}
}

func probe(ctx context.Context, client *http.Client, u string, o waitOptions) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, o.requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	if o.user != "" {
		req.SetBasicAuth(o.user, o.password)
	}
	resp, err := client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			// url.Error repeats the method and URL, which the caller
			// already prints.
			err = uerr.Err
		}
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// readPassword reads a password file (a podman secret), without the
// trailing newline an editor may have added.
func readPassword(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read password: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

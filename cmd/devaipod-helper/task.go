package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/devaipod/devaipod/internal/cmdline"
)

// runTask hands a task to an opencode server as the first message of a new
// session, so that the agent starts working on it at once.
type taskOptions struct {
	user, passwordFile, model string
	timeout                   time.Duration
}

func newTaskFlagSet(o *taskOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("task", flag.ContinueOnError)
	fs.StringVar(&o.user, "user", "", "basic-auth `user` for the server, with --password-file")
	fs.StringVar(&o.passwordFile, "password-file", "", "read the server's password from this `file`")
	fs.StringVar(&o.model, "model", "", "`provider/model` to use instead of the server's default")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "limit for the whole exchange")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: devaipod-helper task [flags] URL TEXT

Create a session on the opencode server at URL and send TEXT as its first
message without waiting for the answer. Prints the session's id.

Flags:
`)
		fs.PrintDefaults()
	}
	return fs
}

func runTask(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &taskOptions{}
	fs := newTaskFlagSet(o)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return cmdline.ExitCode(err)
	}
	if fs.NArg() != 2 || strings.TrimSpace(fs.Arg(1)) == "" {
		fmt.Fprintf(stderr, "%stask: want a URL and a non-empty task\n", logPrefix)
		return 2
	}
	c := opencodeClient{base: strings.TrimSuffix(fs.Arg(0), "/"), user: o.user, http: newProbeClient()}
	if o.passwordFile != "" {
		var err error
		if c.password, err = readPassword(o.passwordFile); err != nil {
			fmt.Fprintf(stderr, "%stask: %v\n", logPrefix, err)
			return 1
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	id, err := c.startSession(ctx, fs.Arg(1), o.model)
	if err != nil {
		fmt.Fprintf(stderr, "%stask: %v\n", logPrefix, err)
		return 1
	}
	fmt.Fprintln(stdout, id)
	return 0
}

// opencodeClient speaks the part of opencode's server API that devaipod
// needs.
type opencodeClient struct {
	base, user, password string
	http                 *http.Client
}

// startSession creates a session titled after the task's first line and
// sends the task to it asynchronously.
func (c opencodeClient) startSession(ctx context.Context, task, model string) (string, error) {
	title, _, _ := strings.Cut(strings.TrimSpace(task), "\n")
	if len(title) > 80 {
		title = title[:77] + "..."
	}
	var session struct {
		ID string `json:"id"`
	}
	if err := c.do(ctx, "/session", map[string]any{"title": title}, &session); err != nil {
		return "", fmt.Errorf("create session: %w", err)
	}
	if session.ID == "" {
		return "", fmt.Errorf("create session: the server returned no id")
	}
	msg := map[string]any{"parts": []map[string]string{{"type": "text", "text": task}}}
	if provider, id, ok := strings.Cut(model, "/"); ok {
		msg["model"] = map[string]string{"providerID": provider, "modelID": id}
	}
	if err := c.do(ctx, "/session/"+session.ID+"/prompt_async", msg, nil); err != nil {
		return "", fmt.Errorf("send the task to session %s: %w", session.ID, err)
	}
	return session.ID, nil
}

func (c opencodeClient) do(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.user != "" {
		req.SetBasicAuth(c.user, c.password)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, strings.TrimSpace(string(data)))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

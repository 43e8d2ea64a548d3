package source

import (
	"context"
	"fmt"
	"strings"
)

// CheckoutAll writes every file of HEAD into a checkout's folder (made by
// Source.Checkout, which leaves them out), for tools that read them there.
func CheckoutAll(ctx context.Context, tree string) error { return CheckoutPaths(ctx, tree) }

// CheckoutPaths writes the named paths of HEAD (every path when none is
// named) into the checkout's folder. Paths HEAD does not have are skipped.
func CheckoutPaths(ctx context.Context, tree string, paths ...string) error {
	args := []string{"ls-files", "-z", "--"}
	files, err := git(ctx, tree, append(args, paths...)...)
	if err != nil || files == "" {
		return err
	}
	cmd := gitCommand(ctx, tree, "checkout-index", "-f", "-z", "--stdin")
	cmd.Stdin = strings.NewReader(files)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("check out %s: %v: %s", strings.Join(paths, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

package main

import (
	"strings"
	"testing"

	"github.com/devaipod/devaipod/internal/safetext"
)

// TestDiffOnATerminal: what diff writes to a terminal is the agent's text
// made printable, then coloured; the only escapes are devaipod's colours.
func TestDiffOnATerminal(t *testing.T) {
	var b strings.Builder
	w := &safetext.Writer{W: &b, Decorate: colorDiffLine}
	w.Write([]byte("diff --git a/x b/x\n+added \x1b]0;pwned\x07 \u202eevil\n-gone\r\n context"))
	w.Flush()
	want := sgrBold + "diff --git a/x b/x" + sgrReset + "\n" +
		sgrGreen + `+added \x1b]0;pwned\x07 \u202eevil` + sgrReset + "\n" +
		sgrRed + `-gone\x0d` + sgrReset + "\n" +
		" context"
	if b.String() != want {
		t.Errorf("got  %q\nwant %q", b.String(), want)
	}
}

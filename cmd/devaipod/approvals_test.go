package main

import "testing"

func TestShownAsPath(t *testing.T) {
	if got := shownAs("path")("/home/me/d\u0430ta\x1b\t"); got != `/home/me/d\u0430ta\x1b\u0009` {
		t.Errorf("a path with a Cyrillic a and ESC shows as %q", got)
	}
	if got := shownAs("gator")("Fix the café"); got != "Fix the café" {
		t.Errorf("a gator title shows as %q", got)
	}
}

package main

import (
	"strings"
	"testing"
	"time"
)

func TestDroppedText(t *testing.T) {
	since := time.Date(2026, 11, 29, 1, 2, 3, 0, time.UTC)
	got := droppedText("not-allowed", 150, since.Format(time.RFC3339Nano))
	want := "150 more not-allowed since " + since.Local().Format("15:04:05") + ", counted, not written one by one"
	if got != want {
		t.Errorf("droppedText = %q, want %q", got, want)
	}
	if got := droppedText("calls", 3, "garbage"); !strings.HasPrefix(got, "3 more calls since garbage") {
		t.Errorf("droppedText with a time it cannot read = %q", got)
	}
}

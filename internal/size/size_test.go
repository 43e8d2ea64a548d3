package size

import (
	"strconv"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{
		"4096": 4096, "512m": 512 << 20, "512M": 512 << 20, "4g": 4 << 30, "1.5g": 3 << 29,
		"1GiB": 1 << 30, "1gb": 1 << 30, "2T": 2 << 40, "100k": 100 << 10, "64b": 64, "1p": 1 << 50,
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"0": "more than zero", "0g": "more than zero", "0.1b": "more than zero",
		"99999999999g": "too large", "8e": "not a size", "5e18": "too large", "-1g": "not a size",
		"": "not a size", "lots": "not a size", "1 gig": "not a size", "1x": "not a size", "1gbb": "not a size",
	} {
		if got, err := Parse(in); err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), strconv.Quote(in)) {
			t.Errorf("Parse(%q) = %d, %v; want an error naming it: %s", in, got, err, why)
		}
	}
}

// FuzzParse: never a panic, and what it accepts is a positive size below
// the cap.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"512m", "1.5g", "1GiB", "0", "99999999999g", "1e400", "NaN", "Inf", ".5k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := Parse(s); err == nil && (n <= 0 || n >= max) {
			t.Errorf("Parse(%q) = %d", s, n)
		}
	})
}

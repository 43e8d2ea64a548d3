// Package size reads sizes ("512m", "1.5g", "1GiB", "4096") the way podman
// and docker read --memory, --shm-size and tmpfs sizes, so that what
// devaipod accepts in its config, in a devcontainer's runArgs and in the
// verify battery is what podman will take: one parser for all three. It
// refuses what podman would silently get wrong: zero and overflow.
package size

import (
	"fmt"

	units "github.com/docker/go-units"
)

// max is 4 EiB: more is no size of any machine, and it keeps clear of
// go-units' float-to-int64 conversion, which wraps to a negative number
// past 2^63 on amd64 and saturates on arm64.
const max = 1 << 62

// Parse returns the bytes a size stands for: a number, with a fraction if
// need be, and an optional binary unit b, k, m, g, t or p, case-insensitive,
// with an optional "b" or "ib" after it ("512m", "1.5g", "1GiB", "2T").
// It is go-units' RAMInBytes, podman's own parser, plus the refusal of
// zero, of what rounds to zero, and of overflow.
func Parse(s string) (int64, error) {
	n, err := units.RAMInBytes(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("size %q: not a size such as 512m, 1.5g or 1GiB", s)
	case n == 0:
		return 0, fmt.Errorf("size %q: must be more than zero", s)
	case n < 0 || n >= max:
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return n, nil
}

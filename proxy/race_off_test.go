//go:build !race

package proxy

// raceEnabled: the race detector is on (and sync.Pool drops items at random).
const raceEnabled = false

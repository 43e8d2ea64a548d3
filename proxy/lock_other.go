//go:build !unix

package proxy

// lockDir does nothing where there is no flock(2): concurrent
// EditPolicyFile calls may then lose each other's changes.
func lockDir(string) (unlock func(), err error) { return func() {}, nil }

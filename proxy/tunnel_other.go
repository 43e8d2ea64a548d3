//go:build !linux

package proxy

import "net"

// Outside Linux a tunnel uses the connections' Read and Write.

func readReady(c net.Conn) func() (*[]byte, int, error) { return readBlocking(c) }

func writeReady(c net.Conn) func(p []byte) (int, error) { return c.Write }

func closeWrite(c net.Conn) { c.(interface{ CloseWrite() error }).CloseWrite() }

// peekConnect: elsewhere every connection goes to the http.Server.
func peekConnect(c net.Conn) (bool, error) { return false, nil }

// connAlive: elsewhere an idle connection is taken as open.
func connAlive(c net.Conn) bool { return true }

// connReadable: elsewhere a connection is taken as having nothing to read.
func connReadable(c net.Conn) bool { return false }

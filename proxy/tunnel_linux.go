package proxy

import (
	"io"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// On Linux a tunnel reads and writes its sockets itself, through their
// syscall.RawConn, rather than with net.Conn's Read and Write:
//
//   - A read waits for data without holding a buffer and takes one
//     (getBuffer) only once there is something to read. An open tunnel
//     spends most of its life waiting; with a buffer held meanwhile, every
//     tunnel would pin two of them.
//   - The sockets are non-blocking, so the read(2), write(2) and
//     shutdown(2) calls return at once, and they are made with
//     syscall.RawSyscall: the scheduler is not told of them, which
//     spares, for every call after a quiet moment, waking the runtime's
//     monitor thread (sysmon) that watches for goroutines stuck in
//     system calls.
//
// Connections that are not sockets of this process fall back to their
// Read and Write.

// readReady returns a read function for c that waits until c has data (or
// its end, or an error) and then reads it into a buffer from getBuffer, a
// bulk one after a read that brought a small buffer's worth; the caller
// puts the buffer back (putBuffer). It returns io.EOF at the end of c.
func readReady(c net.Conn) func() (*[]byte, int, error) {
	rc := rawConnOf(c)
	if rc == nil {
		return readBlocking(c)
	}
	var (
		bp   *[]byte
		k    int
		rerr error
		bulk bool
	)
	// Called by rc.Read with the socket, first at once and then each time
	// the poller says it is readable, until it returns true.
	try := func(fd uintptr) bool {
		buf := getBuffer(bulk)
		for {
			n, errno := rawIO(syscall.SYS_READ, fd, *buf)
			switch {
			case errno == syscall.EINTR:
				continue
			case errno == syscall.EAGAIN:
				putBuffer(buf)
				return false
			case errno != 0:
				putBuffer(buf)
				bp, k, rerr = nil, 0, errno
			case n == 0:
				putBuffer(buf)
				bp, k, rerr = nil, 0, io.EOF
			default:
				bp, k, rerr = buf, n, nil
				bulk = n >= copyBufferSize
			}
			return true
		}
	}
	return func() (*[]byte, int, error) {
		if err := rc.Read(try); err != nil {
			return nil, 0, err
		}
		return bp, k, rerr
	}
}

// writeReady returns a write function for c that writes all of p, waiting
// for room in the socket buffer as needed.
func writeReady(c net.Conn) func(p []byte) (int, error) {
	rc := rawConnOf(c)
	if rc == nil {
		return c.Write
	}
	var (
		pending []byte
		written int
		werr    error
	)
	try := func(fd uintptr) bool {
		for len(pending) > 0 {
			n, errno := rawIO(syscall.SYS_WRITE, fd, pending)
			switch errno {
			case 0:
				pending = pending[n:]
				written += n
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				werr = errno
				return true
			}
		}
		return true
	}
	return func(p []byte) (int, error) {
		pending, written, werr = p, 0, nil
		err := rc.Write(try)
		pending = nil
		if err == nil {
			err = werr
		}
		return written, err
	}
}

// closeWrite half-closes c (see canCloseWrite), with a raw shutdown(2)
// where c is a socket of this process.
func closeWrite(c net.Conn) {
	rc := rawConnOf(c)
	if rc == nil {
		c.(interface{ CloseWrite() error }).CloseWrite()
		return
	}
	rc.Control(func(fd uintptr) {
		syscall.RawSyscall(syscall.SYS_SHUTDOWN, fd, syscall.SHUT_WR, 0)
	})
}

// rawConnOf is c's syscall.RawConn if c is a TCP or stream unix socket,
// else nil.
func rawConnOf(c net.Conn) syscall.RawConn {
	switch c := c.(type) {
	case *net.TCPConn:
	case *net.UnixConn:
		if c.LocalAddr().Network() != "unix" {
			return nil
		}
	default:
		return nil
	}
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// rawIO makes a read(2) or write(2) call (trap) on the non-blocking socket
// fd without telling the scheduler: it cannot block. p is not empty.
func rawIO(trap, fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, errno := syscall.RawSyscall(trap, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), 0
}

// peerClosed tells whether the peer of socket fd has shut down its
// writing side (poll(2)'s POLLRDHUP, without waiting).
func peerClosed(fd uintptr) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 1 && fds[0].Revents&unix.POLLRDHUP != 0
}

// connAlive reports whether the idle connection c (a socket of this
// process; anything else counts as alive) has nothing to read and is not
// closed: an idle HTTP/1.1 connection whose server sent anything (its FIN,
// a TLS close_notify, a 408) is done.
func connAlive(c net.Conn) bool {
	n, ok := peekSocket(c)
	return !ok || n < 0
}

// connReadable reports whether a read of c (a socket of this process)
// would find bytes waiting, or its end.
func connReadable(c net.Conn) bool {
	n, ok := peekSocket(c)
	return ok && n >= 0
}

// peekSocket looks at what socket c has to read without taking it and
// without waiting: one recvfrom(2), MSG_PEEK and MSG_DONTWAIT. n is 1 if
// there are bytes, 0 at the end or on an error, -1 if there is nothing
// yet; ok is false if c is not a socket of this process.
func peekSocket(c net.Conn) (n int, ok bool) {
	rc := rawConnOf(c)
	if rc == nil {
		return 0, false
	}
	var b [1]byte
	n = 0
	err := rc.Read(func(fd uintptr) bool {
		r, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		switch {
		case errno == syscall.EAGAIN:
			n = -1
		case errno == 0 && r > 0:
			n = 1
		}
		return true
	})
	return n, err == nil
}

// connectPrefix is how a CONNECT request starts.
const connectPrefix = "CONNECT "

// peekConnect reports whether the request that c starts with is a CONNECT,
// looking at its first bytes without taking them from the socket (so that
// another request reaches the http.Server untouched), with a raw
// recvfrom(2) like the tunnel's reads. It waits, within
// c's read deadline, until there are enough bytes to tell, and says false
// for a connection that is not a socket, or that ends or stalls before
// its first bytes tell (the http.Server then deals with it).
func peekConnect(c net.Conn) (bool, error) {
	rc := rawConnOf(c)
	if rc == nil {
		return false, nil
	}
	var buf [len(connectPrefix)]byte
	seen, connect := -1, false
	var perr error
	err := rc.Read(func(fd uintptr) bool {
		for {
			r, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)),
				syscall.MSG_PEEK, 0, 0)
			n := int(r)
			switch {
			case errno == syscall.EINTR:
				continue
			case errno == syscall.EAGAIN:
				return false
			case errno != 0:
				perr = errno
				return true
			case n == len(buf):
				connect = string(buf[:]) == connectPrefix
				return true
			case n == 0, n == seen, string(buf[:n]) != connectPrefix[:n]:
				// The end, nothing new since the last look, or not a
				// CONNECT.
				return true
			case peerClosed(fd):
				// A prefix, and the client will send no more: the
				// netpoller is edge-triggered, and when the data and
				// the FIN came together no further edge would wake us.
				return true
			}
			seen = n
			return false
		}
	})
	if err == nil {
		err = perr
	}
	return connect, err
}

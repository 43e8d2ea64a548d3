package main

import (
	"bufio"
	"context"
	"flag"
	"io"
	"net"
	"net/http"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// A bare CONNECT tunnel in Go, for reference only: what the language and
// the kernel cost without goproxy, audit, policy or guard. It allows
// CONNECT to the --allow host:port list and nothing else. With --splice
// (the default) the copy is io.Copy between *net.TCPConn, which Linux does
// with splice(2); without it, a wrapper hides the TCP connections and
// io.Copy copies through a 32 KiB buffer, as devaipod's proxy copies
// through a pooled one.

func cmdBare(args []string) error {
	fs := flag.NewFlagSet("bare", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "listen on `HOST:PORT`")
	var allow listFlag
	fs.Var(&allow, "allow", "an allowed CONNECT target `HOST:PORT` (repeatable)")
	splice := fs.Bool("splice", true, "copy between the bare TCP connections (splice(2))")
	life := fs.Duration("for", 30*time.Minute, "stop after this long at the latest")
	if err := fs.Parse(args); err != nil {
		return err
	}
	allowed := map[string]bool{}
	for _, a := range allow {
		allowed[a] = true
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	logf("bare tunnel listening on %s (splice %v)", ln.Addr(), *splice)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *life)
	defer cancel()
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go bareTunnel(c, allowed, *splice)
	}
}

type hiddenConn struct{ net.Conn }

func bareTunnel(c net.Conn, allowed map[string]bool, splice bool) {
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReaderSize(c, 1024)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.Method != http.MethodConnect || !allowed[req.Host] || br.Buffered() > 0 {
		io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	up, err := net.DialTimeout("tcp", req.Host, 10*time.Second)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	defer up.Close()
	c.SetReadDeadline(time.Time{})
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	a, b := c.(*net.TCPConn), up.(*net.TCPConn)
	var src1, src2 io.Reader = a, b
	var dst1, dst2 io.Writer = b, a
	if !splice {
		src1, src2, dst1, dst2 = hiddenConn{a}, hiddenConn{b}, hiddenConn{b}, hiddenConn{a}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.Copy(dst1, src1)
		b.CloseWrite()
	}()
	io.Copy(dst2, src2)
	a.CloseWrite()
	wg.Wait()
}

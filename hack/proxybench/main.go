// Command proxybench is the load generator of hack/bench-proxy.sh, which
// compares devaipod's egress proxy (package proxy, run as
// "devaipod-helper proxy") with squid and with no proxy at all, on loopback.
//
//	proxybench serve --dir DIR
//	    run the HTTPS (and plain HTTP) test server on 127.0.0.1; write its
//	    ports to DIR/server.json and its CA to DIR/ca.pem
//	proxybench run --server DIR --proxy NAME=HOST:PORT@PID... --out FILE
//	    check every path, then measure tunnels per second and latency at each
//	    concurrency, bulk throughput and peak RSS; write JSON
//	proxybench intercept --server DIR --proxy NAME=HOST:PORT@PID --out FILE
//	    through one proxy with the server's credential bound to
//	    localhost:TLSPORT: requests/s, MB/s and time to first byte of that
//	    intercepted host against an opaque tunnel to 127.0.0.1:TLSPORT,
//	    the same upstream; write JSON
//	proxybench soak --server DIR --proxy NAME=HOST:PORT@PID --allow RULE... --duration D --out FILE
//	    mixed load against that proxy and an in-process one (package proxy)
//	    for D, sampling file descriptors and goroutines; write JSON
//	proxybench inproc --server DIR --allow RULE... [--cpuprofile FILE]
//	    load against an in-process proxy only, for profiling
//	proxybench report --run FILE --soak FILE --machine FILE --out FILE.md
//	    write the Markdown report
//
// Every server it talks to is one the caller started on 127.0.0.1; every
// loop is bounded in time.
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

func usage() {
	fmt.Fprint(os.Stderr, `Usage: proxybench serve|run|intercept|soak|inproc|report [flags]
Run "proxybench COMMAND -h" for a command's flags. hack/bench-proxy.sh runs
them all; see docs/benchmarks-proxy.md.
`)
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "serve":
		err = cmdServe(args)
	case "run":
		err = cmdRun(args)
	case "soak":
		err = cmdSoak(args)
	case "intercept":
		err = cmdIntercept(args)
	case "inproc":
		err = cmdInproc(args)
	case "report":
		err = cmdReport(args)
	case "proxy":
		err = cmdProxy(args)
	case "bare":
		err = cmdBare(args)
	case "freeport":
		err = cmdFreePort(args)
	case "-h", "-help", "--help", "help":
		usage()
		return
	default:
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "proxybench %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// cmdFreePort prints N free TCP ports on 127.0.0.1, one a line (held
// together while choosing, so they differ).
func cmdFreePort(args []string) error {
	n := 1
	if len(args) > 0 {
		var err error
		if n, err = strconv.Atoi(args[0]); err != nil || n < 1 || n > 16 {
			return fmt.Errorf("bad count %q", args[0])
		}
	}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		lns = append(lns, ln)
		fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	}
	return nil
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "proxybench: "+format+"\n", a...)
}

// writeJSON writes v to path atomically.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// target is one way to the test server: directly (Proxy empty) or through
// the proxy at Proxy (host:port), whose process is PID.
type target struct {
	Name  string `json:"name"`
	Proxy string `json:"proxy,omitempty"`
	PID   int    `json:"pid,omitempty"`
}

// proxyFlag collects --proxy NAME=HOST:PORT@PID.
type proxyFlag []target

func (f *proxyFlag) String() string { return "" }

func (f *proxyFlag) Set(s string) error {
	name, rest, ok := strings.Cut(s, "=")
	if !ok || name == "" || name == "direct" {
		return fmt.Errorf("want NAME=HOST:PORT@PID (NAME not \"direct\"), got %q", s)
	}
	addr, pidText, ok := strings.Cut(rest, "@")
	if !ok {
		return fmt.Errorf("want NAME=HOST:PORT@PID, got %q", s)
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return fmt.Errorf("bad PID in %q", s)
	}
	*f = append(*f, target{Name: name, Proxy: addr, PID: pid})
	return nil
}

// listFlag collects a repeatable string flag.
type listFlag []string

func (f *listFlag) String() string     { return strings.Join(*f, ",") }
func (f *listFlag) Set(s string) error { *f = append(*f, s); return nil }

// --------------------------------------------------------------------------
// /proc readers (Linux)
// --------------------------------------------------------------------------

// clockTicks is USER_HZ, 100 on every Linux the benchmark runs on.
const clockTicks = 100

// cpuSeconds is the user+system CPU time of pid so far.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	// After ") ": state(3) ppid(4) ... utime(14) stime(15).
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / clockTicks
}

// treeCPUSeconds is cpuSeconds of pid and its live descendants.
func treeCPUSeconds(pid int) float64 {
	var t float64
	for _, p := range processTree(pid) {
		t += cpuSeconds(p)
	}
	return t
}

// processTree is pid and its descendants.
func processTree(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", out[i]))
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue
			}
			for _, c := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(c); err == nil {
					out = append(out, n)
				}
			}
		}
	}
	return out
}

// statusKB is a "Vm...:  N kB" field of /proc/PID/status, in KiB.
func statusKB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// statusInt is a plain number field of /proc/PID/status (e.g. Threads).
func statusInt(pid int, field string) int64 { return statusKB(pid, field) }

// cpuBusy is the machine's busy CPU time so far, in seconds (all cores;
// /proc/stat: everything but idle and iowait).
func cpuBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var busy float64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 8 { // guest time is already in user
			break
		}
		n, _ := strconv.ParseFloat(v, 64)
		busy += n
	}
	return busy / clockTicks
}

// fdCount is the number of open file descriptors of pid, -1 if unknown.
func fdCount(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// memInfo is a process tree's memory use in KiB.
type memInfo struct {
	PID       int   `json:"pid"`
	Processes int   `json:"processes"`
	HWMKB     int64 `json:"vm_hwm_kb"` // peak RSS, summed over the tree
	RSSKB     int64 `json:"vm_rss_kb"`
}

func readMem(pid int) memInfo {
	m := memInfo{PID: pid}
	for _, p := range processTree(pid) {
		m.Processes++
		m.HWMKB += statusKB(p, "VmHWM")
		m.RSSKB += statusKB(p, "VmRSS")
	}
	return m
}

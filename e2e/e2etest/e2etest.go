// Package e2etest is the harness of troupe's end-to-end test packages
// (e2e and e2e/cluster): the troupe binary built once per test binary,
// commands run under a deadline, and loopback ports handed out once. It is
// imported by tests only.
package e2etest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Bin is the troupe binary, built by Main for the test binary.
var Bin string

// Main builds the troupe binary into a temporary directory (Bin), runs the
// tests and exits with their status (a test package's TestMain).
func Main(m *testing.M) {
	dir, err := os.MkdirTemp("", "troupe-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	Bin = filepath.Join(dir, "troupe")
	// With the test hooks: TROUPE_TEST_STRAGGLER and TROUPE_TEST_OVERFLOW
	// make a slow worker and an overflowing gradient (train/testhooks.go).
	build := exec.Command("go", "build", "-tags", "troupetesthooks", "-o", Bin, "github.com/troupe-ml/troupe/cmd/troupe")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building troupe:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Run runs a command with a deadline and returns stdout, stderr and the
// error (an *exec.ExitError for a non-zero exit); a command still running
// at the deadline fails the test.
func Run(t *testing.T, timeout time.Duration, name string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v: still running after %v\nstderr:\n%s", name, args, timeout, errb.String())
	}
	return out.String(), errb.String(), err
}

// Troupe runs the troupe binary (Bin) and fails the test on a non-zero
// exit; it returns stdout.
func Troupe(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	out, errs, err := Run(t, timeout, Bin, args...)
	if err != nil {
		t.Fatalf("troupe %v: %v\nstderr:\n%s", args, err, errs)
	}
	return out
}

// LastLine is the last non-empty line of s.
func LastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// handedOut holds every address FreePort returned in this test binary.
var handedOut = struct {
	sync.Mutex
	addrs map[string]bool
}{addrs: map[string]bool{}}

// FreePort returns a loopback address that nothing listened on (TCP or
// UDP) when it was picked, that no earlier call returned, and that lies
// below the kernel's ephemeral range: agents pick their actor and data
// plane ports from that range while others start, and one took a port
// handed out for another agent's gossip, which then could not bind it
// (seen twice: TestElasticPartKill, TestElasticTLS).
func FreePort(t *testing.T) string {
	t.Helper()
	lo := ephemeralLow()
	for range 200 {
		port := 10000 + rand.IntN(lo-10000)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		handedOut.Lock()
		fresh := !handedOut.addrs[addr]
		handedOut.Unlock()
		if !fresh {
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		ln.Close()
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			continue
		}
		pc.Close()
		handedOut.Lock()
		handedOut.addrs[addr] = true
		handedOut.Unlock()
		return addr
	}
	t.Fatal("no free loopback port below the ephemeral range in 200 tries")
	return ""
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= 11000 {
		return 32768
	}
	return lo
}

// ExitStatus is a finished command's exit status, failing the test when
// the process did not exit by itself (killed by a signal, or not run).
func ExitStatus(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() < 0 {
		t.Fatalf("%v: want an exit status", err)
	}
	return exit.ExitCode()
}

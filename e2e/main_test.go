package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// troupeBin is the troupe binary built once for the whole package.
var troupeBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "troupe-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	troupeBin = filepath.Join(dir, "troupe")
	build := exec.Command("go", "build", "-o", troupeBin, "../cmd/troupe")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building troupe:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run runs a command with a deadline and returns stdout, stderr and the
// error (an *exec.ExitError for a non-zero exit).
func run(t *testing.T, timeout time.Duration, name string, args ...string) (string, string, error) {
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

// troupe runs the troupe binary and fails the test on a non-zero exit.
func troupe(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	out, errs, err := run(t, timeout, troupeBin, args...)
	if err != nil {
		t.Fatalf("troupe %v: %v\nstderr:\n%s", args, err, errs)
	}
	return out
}

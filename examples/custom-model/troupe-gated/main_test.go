package main

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCLIWithAUsersModel: a program that registers its own model and runs
// troupe's CLI trains that model by name — in two worker processes, which
// must know it too — lists its options in --help, and refuses a model
// nobody registered with exit status 2.
func TestCLIWithAUsersModel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "troupe-gated")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(args ...string) (string, string, error) {
		cmd := exec.CommandContext(ctx, bin, args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	out, stderr, err := run("train", "--model", "gated-mlp", "--depth", "1", "--hidden", "8",
		"--data", "synthetic-mlp:features=6,classes=3,n=128,test=32", "--procs", "2", "--batch", "16", "--steps", "4",
		"--log-level", "error", "--json")
	if err != nil {
		t.Fatalf("train --model gated-mlp --procs 2: %v\n%s", err, stderr)
	}
	var sum struct {
		Model string `json:"model"`
		Steps int    `json:"steps"`
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	if !strings.HasPrefix(sum.Model, "gated-mlp 6-8×1-3") || sum.Steps != 4 {
		t.Fatalf("summary %s", out)
	}
	help, _, err := run("train", "--help")
	if err != nil || !strings.Contains(help, "gated-mlp") || !strings.Contains(help, "--depth") {
		t.Fatalf("train --help (%v) does not list gated-mlp and its --depth:\n%s", err, help)
	}
	_, stderr, err = run("train", "--model", "no-such-model")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(stderr, "no-such-model") {
		t.Fatalf("an unknown model: %v, %s", err, stderr)
	}
}

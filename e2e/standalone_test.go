package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// copyBinary copies the troupe binary alone into a new empty directory and
// returns its path there.
func copyBinary(t *testing.T, from string) string {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "troupe")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// runBare runs the binary at bin from its own directory with an empty
// environment (env -i: no HOME, no PATH, no GOROOT, no Go module cache) but
// the variables in vars, and returns stdout, stderr and the error (an
// *exec.ExitError for a non-zero exit).
func runBare(t *testing.T, bin string, vars []string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	envArgs := append(append([]string{"-i"}, vars...), append([]string{"./" + filepath.Base(bin)}, args...)...)
	cmd := exec.CommandContext(ctx, "env", envArgs...)
	cmd.Dir = filepath.Dir(bin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("env %v: still running after 2m\nstderr:\n%s", envArgs, errb.String())
	}
	return out.String(), errb.String(), err
}

// The default job needs nothing but the binary: copied alone into an empty
// directory and run with an empty environment, `troupe train` trains the
// default GPT on the Go spec it carries, from the same first loss as
// everywhere (4.8508: the same text, the same seed), and writes nothing.
func TestStandaloneBinaryTrainsTheDefaultJob(t *testing.T) {
	bin := copyBinary(t, e2etest.Bin)
	out, errs, err := runBare(t, bin, nil, "train", "--steps", "3")
	if err != nil {
		t.Fatalf("env -i ./troupe train --steps 3: %v\nstderr:\n%s", err, errs)
	}
	summary := regexp.MustCompile(`(?m)^trained GPT .* on gospec/train: 3 steps, loss 4\.8508 → \d+\.\d+, .*held-out loss \d+\.\d+$`)
	if !summary.MatchString(out) {
		t.Fatalf("no summary line of a 3-step run on gospec from 4.8508 in stdout:\n%s\nstderr:\n%s", out, errs)
	}
	entries, err := os.ReadDir(filepath.Dir(bin))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("the run left %v beside the binary", names)
	}
}

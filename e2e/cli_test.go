package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// TestBadInputExitsNonZero: every kind of bad input exits non-zero with a
// message on stderr naming what was wrong, and writes nothing on stdout.
func TestBadInputExitsNonZero(t *testing.T) {
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.safetensors")
	if err := os.WriteFile(corrupt, []byte("\xff\xff\xff\xff\x00\x00\x00\x00garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown flag", []string{"train", "--no-such-flag"}, 2, "no-such-flag"},
		{"unknown model", []string{"train", "--model", "rnn"}, 2, "rnn"},
		{"missing data file", []string{"train", "--data", filepath.Join(dir, "missing.txt")}, 1, "missing.txt"},
		{"corrupt init", []string{"train", "--model", "mlp", "--init", corrupt}, 1, "corrupt.safetensors"},
		{"bad batch", []string{"train", "--batch", "0"}, 2, "--batch"},
		{"procs and dp disagree", []string{"train", "--procs", "2", "--dp", "3"}, 2, "--dp"},
		{"trace without a pipeline", []string{"train", "--trace", "t.json"}, 2, "--pp"},
		{"tp that does not divide the heads", []string{"train", "--tp", "3"}, 2, "--tp"},
		{"sequence parallelism without tp", []string{"train", "--sequence-parallel"}, 2, "--sequence-parallel"},
		{"sequence parallelism of the mlp", []string{"train", "--model", "mlp", "--tp", "2", "--sequence-parallel"}, 2, "--sequence-parallel"},
		{"kv heads that do not divide the heads", []string{"train", "--model", "llama", "--n-kv-heads", "3"}, 2, "--n-kv-heads"},
		{"tp that does not divide the MLP", []string{"train", "--model", "llama", "--tp", "2", "--ffn-hidden", "345"}, 2, "--ffn-hidden"},
		{"an option of another model", []string{"train", "--model", "llama", "--untied"}, 2, "untied"},
		{"procs that are not dp × pp × tp", []string{"train", "--procs", "3", "--tp", "2"}, 2, "--procs"},
		{"unknown precision", []string{"train", "--precision", "fp8"}, 2, "--precision"},
		{"unknown reduce type", []string{"train", "--reduce-dtype", "int8"}, 2, "--reduce-dtype"},
		{"a loss scale below its floor", []string{"train", "--precision", "fp16", "--loss-scale-init", "0.5"}, 2, "--loss-scale-init"},
		{"a staleness bound without async", []string{"train", "--max-staleness", "2"}, 2, "--max-staleness"},
		{"async over pipeline stages", []string{"train", "--sync", "async", "--pp", "2"}, 2, "--pp"},
		{"a negative staleness bound", []string{"train", "--sync", "async", "--max-staleness", "-1"}, 2, "--max-staleness"},
		{"restarts without async worker processes", []string{"train", "--sync", "async", "--dp", "2", "--max-restarts", "1"}, 2, "--max-restarts"},
		{"servers without async", []string{"train", "--dp", "2", "--servers", "2"}, 2, "--servers"},
		{"no servers", []string{"train", "--sync", "async", "--servers", "0"}, 2, "--servers"},
		{"async on an agent without checkpoints", []string{"agent", "--name", "a", "--listen", "127.0.0.1:0", "--sync", "async"}, 2, "--ckpt-dir"},
		{"bench gemm in an unknown type", []string{"bench", "gemm", "--dtype", "int4"}, 2, "--dtype"},
		{"unknown command", []string{"fly"}, 2, "fly"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, err := e2etest.Run(t, time.Minute, e2etest.Bin, tc.args...)
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("exit error %v, want a non-zero exit\nstderr: %s", err, errs)
			}
			if ee.ExitCode() != tc.code {
				t.Errorf("exit code %d, want %d", ee.ExitCode(), tc.code)
			}
			if !strings.Contains(errs, tc.want) {
				t.Errorf("stderr does not name %q:\n%s", tc.want, errs)
			}
			if strings.TrimSpace(out) != "" {
				t.Errorf("stdout not empty: %q", out)
			}
		})
	}
}

// troupe bench train measures every world it is given, worker processes
// included, and prints one JSON document.
func TestBenchTrainWorlds(t *testing.T) {
	out := e2etest.Troupe(t, 2*time.Minute, "bench", "train", "--model", "mlp", "--layers", "784,32,10", "--data", "synthetic-mlp",
		"--batch", "16", "--steps", "6", "--warmup-steps", "2", "--worlds", "dp1,dp2,procs2", "--threads", "1", "--json")
	var doc struct {
		Results []struct {
			World       string  `json:"world"`
			SamplesPerS float64 `json:"samples_per_s"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	var worlds []string
	for _, r := range doc.Results {
		if r.SamplesPerS <= 0 {
			t.Errorf("world %s: %v samples/s", r.World, r.SamplesPerS)
		}
		worlds = append(worlds, r.World)
	}
	if strings.Join(worlds, ",") != "dp1,dp2,procs2" {
		t.Fatalf("measured %v", worlds)
	}
}

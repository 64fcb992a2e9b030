package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// fp16 across worker processes, the gradients sent in fp16 too
// (--reduce-dtype, over the TCP data plane): an inf in rank 1's gradients
// at step 2 (TROUPE_TEST_OVERFLOW) is skipped by both processes (their
// replicas stay identical: --check-every 1), the metrics say so at step 2
// only, and the loss scale halves there.
func TestProcsFP16SkipsTheOverflow(t *testing.T) {
	metrics := filepath.Join(t.TempDir(), "m.jsonl")
	cmd := exec.Command(e2etest.Bin, "train", "--steps", "4", "--batch", "8", "--d-model", "32", "--n-layers", "1", "--threads", "1",
		"--procs", "2", "--precision", "fp16", "--reduce-dtype", "fp16", "--check-every", "1", "--metrics-out", metrics, "--log-format", "json")
	cmd.Env = append(os.Environ(), "TROUPE_TEST_OVERFLOW=1:2")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	f, err := os.Open(metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var scales []float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m struct {
			Step      int     `json:"step"`
			LossScale float64 `json:"loss_scale"`
			Skipped   bool    `json:"skipped"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if m.Skipped != (m.Step == 2) {
			t.Errorf("step %d skipped: %v", m.Step, m.Skipped)
		}
		scales = append(scales, m.LossScale)
	}
	if len(scales) != 4 || scales[0] != 65536 || scales[1] != 65536 || scales[2] != 32768 || scales[3] != 32768 {
		t.Errorf("loss scales %v, want 65536 65536 32768 32768", scales)
	}
}

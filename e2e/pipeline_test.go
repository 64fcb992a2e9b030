package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// --trace with --procs: every stage runs in its own worker process and
// ships its spans to the parent, which writes one trace with a track per
// stage holding its forwards and backwards, on one clock: every span of a
// step lies inside that step, and stage 1's first forward starts after
// stage 0's first forward ended (it needs stage 0's activation).
func TestPipelineTraceAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	e2etest.Troupe(t, 2*time.Minute, "train", "--model", "mlp", "--data", "synthetic-mlp", "--layers", "784,64,32,10",
		"--pp", "2", "--micro-batches", "4", "--schedule", "gpipe", "--procs", "2", "--batch", "32", "--steps", "3",
		"--trace", path, "--log-format", "json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		TraceEvents []struct {
			Ph   string         `json:"ph"`
			Name string         `json:"name"`
			Cat  string         `json:"cat"`
			Tid  int            `json:"tid"`
			Ts   float64        `json:"ts"`
			Dur  float64        `json:"dur"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	tracks := map[int]string{}
	count := map[int]map[string]int{0: {}, 1: {}}
	firstFwd := map[int][2]float64{}
	for _, e := range f.TraceEvents {
		switch e.Ph {
		case "M":
			if e.Name == "thread_name" {
				tracks[e.Tid], _ = e.Args["name"].(string)
			}
		case "X":
			if e.Tid != 0 && e.Tid != 1 {
				t.Fatalf("a span on track %d of a 2-stage pipeline", e.Tid)
			}
			if e.Ts < 0 || e.Dur < 0 {
				t.Fatalf("span %s at %v for %v µs", e.Cat, e.Ts, e.Dur)
			}
			count[e.Tid][e.Cat]++
			if fw, ok := firstFwd[e.Tid]; e.Cat == "forward" && (!ok || e.Ts < fw[0]) {
				firstFwd[e.Tid] = [2]float64{e.Ts, e.Ts + e.Dur}
			}
		}
	}
	if tracks[0] != "stage 0" || tracks[1] != "stage 1" {
		t.Fatalf("tracks %v, want stage 0 and stage 1", tracks)
	}
	for st := range 2 {
		// 3 steps × 4 micro-batches.
		if count[st]["forward"] != 12 || count[st]["backward"] != 12 {
			t.Errorf("stage %d: %d forwards and %d backwards, want 12 each (%v)", st, count[st]["forward"], count[st]["backward"], count[st])
		}
	}
	if firstFwd[1][0] < firstFwd[0][1] {
		t.Errorf("stage 1's first forward starts at %v µs, before stage 0's ended (%v µs): the processes' spans are not on one clock",
			firstFwd[1][0], firstFwd[0][1])
	}
	t.Logf("stage 0: %v; stage 1: %v", count[0], count[1])
}

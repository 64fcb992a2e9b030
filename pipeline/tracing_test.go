package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/trace"
)

// TestWriteTrace exports a simulated 1F1B step and reads the JSON back:
// one named track per stage, a span per op and per gap, counters that end
// at zero micro-batches alive, timestamps scaled to microseconds.
func TestWriteTrace(t *testing.T) {
	s := mustBuild(t, Config{Kind: Kind1F1B, Stages: 2, MicroBatches: 2})
	tl, err := Simulate(s, UniformCosts(2, DefaultStageCost()))
	if err != nil {
		t.Fatal(err)
	}
	tw := trace.NewWriter(time.Unix(0, 0))
	if err := tl.WriteTrace(tw, TraceOptions{Pid: 3, Process: "replica 3", Scale: 1000, Offset: 5}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := tw.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Cat  string         `json:"cat"`
			Ph   string         `json:"ph"`
			Ts   float64        `json:"ts"`
			Dur  float64        `json:"dur"`
			Pid  int            `json:"pid"`
			Tid  int            `json:"tid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	threads := map[int]string{}
	cats := map[string]int{}
	var idle float64
	lastCounter := map[string]float64{}
	for _, e := range doc.TraceEvents {
		if e.Pid != 3 {
			t.Fatalf("event in process %d", e.Pid)
		}
		switch e.Ph {
		case "M":
			if e.Name == "thread_name" {
				threads[e.Tid] = e.Args["name"].(string)
			}
		case "X":
			cats[e.Cat]++
			if e.Cat == "idle" {
				idle += e.Dur
			}
			if e.Name == "F0" && e.Tid == 1 && (e.Ts != 1005 || e.Dur != 1000) {
				t.Fatalf("stage 1's F0 at %v for %v, want 1005 for 1000", e.Ts, e.Dur)
			}
		case "C":
			lastCounter[e.Name] = e.Args["micro-batches"].(float64)
		}
	}
	if threads[0] != "stage 0" || threads[1] != "stage 1" {
		t.Fatalf("threads %v", threads)
	}
	// Per stage: 2 forwards, 2 backwards; 2 sends and 2 receives on each.
	if cats["forward"] != 4 || cats["backward"] != 4 || cats["send"] != 4 || cats["recv"] != 4 {
		t.Fatalf("categories %v", cats)
	}
	if idle != tl.Stats().Idle*1000 {
		t.Fatalf("idle spans sum to %v µs, stats say %v units", idle, tl.Stats().Idle)
	}
	if lastCounter["stage 0 activations"] != 0 || lastCounter["stage 1 activations"] != 0 {
		t.Fatalf("activations left alive: %v", lastCounter)
	}
	if err := tl.WriteTrace(tw, TraceOptions{}); !errors.Is(err, ErrBadArgument) {
		t.Fatal(err)
	}
}

package cli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// runExplainCmd runs `troupe explain sub args…` with every flag of the
// sub-command back at its default first (cobra keeps flag values between
// Execute calls in one process).
func runExplainCmd(t *testing.T, sub string, args ...string) (string, error) {
	t.Helper()
	cmd, _, err := rootCmd.Find([]string{"explain", sub})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		f.Value.Set(f.DefValue)
		f.Changed = false
	})
	return runRoot(t, append([]string{"explain", sub}, args...)...)
}

func runExplainPipelineCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runExplainCmd(t, "pipeline", args...)
}

func decodePipelineDoc(t *testing.T, out string) explainPipelineDoc {
	t.Helper()
	var doc explainPipelineDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	return doc
}

// TestExplainPipelineJSON: both schedules on 4 stages and 8 micro-batches
// idle exactly 3/11 of the step, GPipe keeps all 8 micro-batches alive on
// every stage and 1F1B 4, 3, 2, 1; the op lists have a forward, a backward
// and one op per message for each micro-batch.
func TestExplainPipelineJSON(t *testing.T) {
	for _, c := range []struct {
		schedule string
		peak     []int
	}{{"gpipe", []int{8, 8, 8, 8}}, {"1f1b", []int{4, 3, 2, 1}}} {
		out, err := runExplainPipelineCmd(t, "--stages", "4", "--micro-batches", "8", "--schedule", c.schedule, "--json")
		if err != nil {
			t.Fatal(err)
		}
		doc := decodePipelineDoc(t, out)
		if doc.Schedule != c.schedule || doc.Stages != 4 || doc.MicroBatches != 8 || doc.Recompute {
			t.Fatalf("header %+v", doc)
		}
		// Exact: both are the correctly rounded 3/11 (see the pipeline
		// package's TestBubbleFormula).
		if doc.BubbleFraction != 3.0/11 || doc.FormulaBubbleFraction != 3.0/11 || doc.Makespan != 33 {
			t.Fatalf("%s: bubble %v formula %v makespan %v", c.schedule, doc.BubbleFraction, doc.FormulaBubbleFraction, doc.Makespan)
		}
		if !slices.Equal(doc.PeakInFlight, c.peak) {
			t.Fatalf("%s: peak %v, want %v", c.schedule, doc.PeakInFlight, c.peak)
		}
		wantOps := []int{8 * 4, 8 * 6, 8 * 6, 8 * 4}
		for s := range 4 {
			if len(doc.Ops[s]) != wantOps[s] || len(doc.Timeline[s]) != wantOps[s] {
				t.Fatalf("stage %d: %d ops, %d spans", s, len(doc.Ops[s]), len(doc.Timeline[s]))
			}
			if last := doc.Timeline[0][len(doc.Timeline[0])-1]; last.End != 33 || last.Short() != "B7" {
				t.Fatalf("stage 0 ends with %v at %v, want B7 at 33", last.Op, last.End)
			}
			if ps := doc.PerStage[s]; ps.Compute != 24 || ps.Idle != 9 || ps.PeakInFlight != c.peak[s] {
				t.Fatalf("stage %d: %+v", s, ps)
			}
		}
	}
	// The op list's JSON spelling, checked on the raw document.
	out, err := runExplainPipelineCmd(t, "--stages", "2", "--micro-batches", "1", "--schedule", "gpipe", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Ops [][]map[string]any `json:"ops"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	if op := raw.Ops[0][1]; op["op"] != "send_act" || op["micro"] != 0.0 || op["peer"] != 1.0 {
		t.Fatalf("stage 0 op 1: %v", op)
	}
	if _, ok := raw.Ops[1][1]["peer"]; ok || raw.Ops[1][1]["op"] != "forward" {
		t.Fatalf("stage 1 op 1: %v", raw.Ops[1][1])
	}
}

func TestExplainPipelineText(t *testing.T) {
	out, err := runExplainPipelineCmd(t, "--stages", "4", "--micro-batches", "8", "--schedule", "1f1b")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"1f1b schedule: 4 stages, 8 micro-batches; forward 1, backward 2 units, messages free",
		"stage 3 | .  .  .  F0 B0 B0 F1 B1 B1 F2",
		"bubble fraction  0.2727  simulated: idle 36 of 4 stages × 33 units",
		"formula          0.2727  (P − 1)/(M + P − 1) = 3/11",
		"peak micro-batches alive per stage: 4 3 2 1",
		"stage 0: F0 >a0 F1 >a1 F2 >a2 F3 >a3 <g0 B0 F4 >a4",
	} {
		if !strings.Contains(out, s) {
			t.Fatalf("output lacks %q:\n%s", s, out)
		}
	}
	out, err = runExplainPipelineCmd(t, "--stages", "2", "--micro-batches", "2", "--schedule", "gpipe", "--recompute", "--send-time", "0.5")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{", recompute;", "R0", "(one column per 0.5 unit", "communication"} {
		if !strings.Contains(out, s) {
			t.Fatalf("output lacks %q:\n%s", s, out)
		}
	}
	out, err = runExplainPipelineCmd(t, "--stages", "300", "--micro-batches", "300")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "(chart left out: 1797 columns") {
		t.Fatalf("a 1797-column chart was not left out:\n%.300s", out)
	}
}

func TestExplainPipelineTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pp.json")
	if _, err := runExplainPipelineCmd(t, "--stages", "3", "--micro-batches", "4", "--trace", path, "--json"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Ph   string         `json:"ph"`
			Tid  int            `json:"tid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	tracks := map[string]bool{}
	spans := 0
	for _, e := range doc.TraceEvents {
		if e.Ph == "M" && e.Name == "thread_name" {
			tracks[e.Args["name"].(string)] = true
		}
		if e.Ph == "X" {
			spans++
		}
	}
	if len(tracks) != 3 || !tracks["stage 2"] || spans < 3*4*2 {
		t.Fatalf("tracks %v, %d spans", tracks, spans)
	}
	if _, err := runExplainPipelineCmd(t, "--stages", "2", "--micro-batches", "1", "--trace", filepath.Join(t.TempDir(), "no", "dir.json")); err == nil || errors.Is(err, errUsage) {
		t.Fatalf("unwritable trace: %v", err)
	}
}

func TestExplainPipelineUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		text string
	}{
		{[]string{"--micro-batches", "4"}, "--stages 0"},
		{[]string{"--stages", "0", "--micro-batches", "4"}, "--stages 0"},
		{[]string{"--stages", "2"}, "--micro-batches 0"},
		{[]string{"--stages", "2", "--micro-batches", "-1"}, "--micro-batches -1"},
		{[]string{"--stages", "2", "--micro-batches", "2", "--schedule", "zb-h1"}, `unknown schedule "zb-h1"`},
		{[]string{"--stages", "2", "--micro-batches", "2", "--backward-time", "-1"}, "--backward-time -1"},
		{[]string{"--stages", "2", "--micro-batches", "2", "--latency", "NaN"}, "--latency NaN"},
		{[]string{"--stages", "5000", "--micro-batches", "2"}, "5000 stages"},
	} {
		_, err := runExplainPipelineCmd(t, c.args...)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%v: %v, want a usage error mentioning %q", c.args, err, c.text)
		}
	}
}

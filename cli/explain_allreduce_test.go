package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

func runRoot(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetArgs(args)
	err := rootCmd.Execute()
	rootCmd.SetOut(nil)
	return out.String(), err
}

// TestExplainAllReduceHandWorked checks the JSON against the ring worked by
// hand in DESIGN.md's order: P = 3, one value per chunk.
func TestExplainAllReduceHandWorked(t *testing.T) {
	out, err := runRoot(t, "explain", "allreduce", "--ranks", "3", "--values", "1,2,3,10,20,30,100,200,300", "--algorithm", "ring", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var doc allreduceExplanation
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	want := [][][]float32{
		{{1, 2, 3}, {10, 20, 30}, {100, 200, 300}},
		{{1, 2, 303}, {11, 20, 30}, {100, 220, 300}},
		{{1, 222, 303}, {11, 20, 333}, {111, 220, 300}},
		{{111, 222, 303}, {11, 222, 333}, {111, 220, 333}},
		{{111, 222, 333}, {111, 222, 333}, {111, 222, 333}},
	}
	phases := []string{"start", "reduce-scatter", "reduce-scatter", "all-gather", "all-gather"}
	if len(doc.Steps) != len(want) {
		t.Fatalf("%d steps, want %d", len(doc.Steps), len(want))
	}
	for i, st := range doc.Steps {
		if st.Phase != phases[i] {
			t.Fatalf("step %d: phase %s, want %s", i, st.Phase, phases[i])
		}
		for r, rk := range st.Ranks {
			if !slices.Equal(rk.Buffer, want[i][r]) {
				t.Fatalf("%s %d rank %d: %v, want %v", st.Phase, st.Step, r, rk.Buffer, want[i][r])
			}
		}
	}
	// reduce-scatter step 1: rank 1 sends chunk 1 and adds chunk 0.
	if r1 := doc.Steps[1].Ranks[1]; *r1.SentChunk != 1 || *r1.RecvChunk != 0 {
		t.Fatalf("rank 1 step 1 sent %d received %d", *r1.SentChunk, *r1.RecvChunk)
	}
	if !slices.Equal(doc.Owned, []int{1, 2, 0}) {
		t.Fatalf("owned %v", doc.Owned)
	}
}

func TestExplainAllReduceText(t *testing.T) {
	out, err := runRoot(t, "explain", "allreduce", "--ranks", "2", "--values", "1,2,3,4,5,6", "--op", "avg", "--algorithm", "ring", "--json=false")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"reduce-scatter step 1/1", "all-gather step 1/1", "rank 0: [<2.5 3.5> | 4.5]", "rank 1: [2.5 3.5 | <4.5>]", "avg: each chunk", "(owns c1)"} {
		if !strings.Contains(out, s) {
			t.Fatalf("output lacks %q:\n%s", s, out)
		}
	}
}

func TestExplainAllReduceUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--ranks", "3", "--values", "1,2"},
		{"--ranks", "0", "--values", "1"},
		{"--ranks", "2", "--values", "1,x"},
		{"--ranks", "2", "--values", ""},
		{"--ranks", "1", "--values", "1", "--op", "min"},
		{"--ranks", "1", "--values", "1", "--algorithm", "tree"},
		{"--ranks", "1", "--values", "1", "--algorithm", "auto"},
		{"--ranks", "4", "--values", "1,2,3,4", "--algorithm", "hier"},
	} {
		_, err := runRoot(t, append([]string{"explain", "allreduce", "--op", "sum", "--algorithm", "ring"}, args...)...)
		if !errors.Is(err, errUsage) {
			t.Fatalf("%v: %v, want a usage error", args, err)
		}
	}
}

// TestExplainAllReduceRD: recursive doubling on P = 5 (one folded rank),
// worked by hand: step 1 rank 1 folds into rank 0 and rank 2's round 1
// reaches rank 0 (1+2+3), ranks 3 and 4 swap (4+5); step 2 rank 0 gets
// round 2 from rank 3 (6+9), rank 2 gets round 1 then round 2; step 3
// rank 1 gets the result and rank 4 round 2: every rank holds 15.
func TestExplainAllReduceRD(t *testing.T) {
	out, err := runRoot(t, "explain", "allreduce", "--ranks", "5", "--values", "1,2,3,4,5", "--op", "sum", "--algorithm", "rd", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var doc allreduceExplanation
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	want := [][]float32{{1, 2, 3, 4, 5}, {6, 2, 3, 9, 9}, {15, 2, 15, 15, 9}, {15, 15, 15, 15, 15}}
	if doc.Algorithm != "rd" || len(doc.Steps) != len(want) {
		t.Fatalf("algorithm %q, %d steps: %s", doc.Algorithm, len(doc.Steps), out)
	}
	for i, w := range want {
		for r, v := range w {
			if got := doc.Steps[i].Ranks[r].Buffer[0]; got != v {
				t.Fatalf("step %d rank %d: %v, want %v", i, r, got, v)
			}
		}
	}
	got := doc.Steps[1].Ranks[0].Received
	if len(got) != 2 || !slices.Contains(got, allreduceExplainMsg{From: 1, Stage: "fold"}) || !slices.Contains(got, allreduceExplainMsg{From: 2, Stage: "round 1"}) {
		t.Fatalf("rank 0 step 1 received %+v", got)
	}
	if got := doc.Steps[3].Ranks[1].Received; len(got) != 1 || got[0] != (allreduceExplainMsg{From: 0, Stage: "unfold"}) {
		t.Fatalf("rank 1 step 3 received %+v", got)
	}
	text, err := runRoot(t, "explain", "allreduce", "--ranks", "5", "--values", "1,2,3,4,5", "--op", "avg", "--algorithm", "rd", "--json=false")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"2 rounds among 4 ranks, 1 folded", "rank 1: [3]   copied the result from rank 0 (unfold)", "added fold from rank 1", "avg: each rank"} {
		if !strings.Contains(text, s) {
			t.Fatalf("output lacks %q:\n%s", s, text)
		}
	}
}

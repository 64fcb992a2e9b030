package main

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
	out, err := runRoot(t, "explain", "allreduce", "--ranks", "3", "--values", "1,2,3,10,20,30,100,200,300", "--json")
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
	out, err := runRoot(t, "explain", "allreduce", "--ranks", "2", "--values", "1,2,3,4,5,6", "--op", "avg", "--json=false")
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
	} {
		_, err := runRoot(t, append([]string{"explain", "allreduce", "--op", "sum"}, args...)...)
		if !errors.Is(err, errUsage) {
			t.Fatalf("%v: %v, want a usage error", args, err)
		}
	}
}

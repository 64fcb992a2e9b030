package plan

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

func readTestdata(t *testing.T, name string) ([]StepRecord, error) {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return ReadMetrics(f)
}

func TestReadMetrics(t *testing.T) {
	recs, err := readTestdata(t, "dp4.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 {
		t.Fatalf("%d records, want 5", len(recs))
	}
	want := StepRecord{Line: 3, Step: 2, Generation: 1, StepMs: 126, ComputeMs: 98, CommMs: 58,
		BubbleMs: 0, HasBubble: true, Overlap: 0.5, HasOverlap: true, World: 4, DP: 4, PP: 1, GradBytes: 100_000_000}
	if recs[2] != want {
		t.Errorf("record 2 = %+v\nwant %+v", recs[2], want)
	}
	// Blank lines are skipped but still counted for line numbers.
	recs, err = readTestdata(t, "pp3.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[2].Line != 4 || recs[2].MicroBatches != 6 || recs[2].PP != 3 {
		t.Errorf("pp3: %+v", recs)
	}
	// Optional fields absent stay zero and unflagged.
	recs, err = readTestdata(t, "two_steps.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if r := recs[1]; r.HasBubble || r.HasOverlap || r.World != 0 || r.Generation != 0 || r.StepMs != 120 {
		t.Errorf("two_steps: %+v", r)
	}
}

func TestReadMetricsErrors(t *testing.T) {
	cases := []struct {
		name, text string
		want       error
		msg        string
	}{
		{"malformed file", "", ErrBadMetrics, "line 3"},
		{"missing field", "", ErrBadMetrics, `line 1: missing field "comm_ms"`},
		{"empty file", "", ErrNoSteps, "no records"},
		{"not an object", `[1,2]`, ErrBadMetrics, "line 1: want a JSON object"},
		{"string time", `{"step":0,"step_ms":"fast","compute_ms":1,"comm_ms":1}`, ErrBadMetrics, "line 1"},
		{"negative time", `{"step":0,"step_ms":1,"compute_ms":-1,"comm_ms":1}`, ErrBadMetrics, "compute_ms -1 must not be negative"},
		{"fractional step", `{"step":0.5,"step_ms":1,"compute_ms":1,"comm_ms":1}`, ErrBadMetrics, "step 0.5"},
		{"negative world", `{"step":0,"step_ms":1,"compute_ms":1,"comm_ms":1,"world":-2}`, ErrBadMetrics, "world -2"},
		{"huge pp", `{"step":0,"step_ms":1,"compute_ms":1,"comm_ms":1,"pp":1e12}`, ErrBadMetrics, "pp 1000000000000"},
		{"huge time", `{"step":0,"step_ms":1e300,"compute_ms":1,"comm_ms":1}`, ErrBadMetrics, "step_ms 1e+300 is beyond"},
		{"overlap > 1", `{"step":0,"step_ms":1,"compute_ms":1,"comm_ms":1,"overlap_fraction":2}`, ErrBadMetrics, "overlap_fraction 2"},
		{"null line", "{\"step\":0,\"step_ms\":1,\"compute_ms\":1,\"comm_ms\":1}\n{}", ErrBadMetrics, `line 2: missing field "step"`},
		{"too long", "{\"step\":0,\"step_ms\":1,\"compute_ms\":1,\"comm_ms\":1}\n" + strings.Repeat(" ", maxMetricsLine+1), ErrBadMetrics, "line 2 is longer"},
	}
	files := map[string]string{"malformed file": "malformed.jsonl", "missing field": "missing_comm.jsonl", "empty file": "empty.jsonl"}
	for _, c := range cases {
		var err error
		if f, ok := files[c.name]; ok {
			_, err = readTestdata(t, f)
		} else {
			_, err = ReadMetrics(strings.NewReader(c.text))
		}
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %v, want %v containing %q", c.name, err, c.want, c.msg)
		}
	}
}

func FuzzReadMetrics(f *testing.F) {
	for _, name := range []string{"dp4.jsonl", "pp3.jsonl", "elastic.jsonl", "malformed.jsonl", "missing_comm.jsonl"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"step":1e300,"step_ms":1,"compute_ms":1,"comm_ms":1,"grad_bytes":1e19}`))
	f.Add([]byte("\n\n{}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := ReadMetrics(strings.NewReader(string(b)))
		if err != nil {
			if !errors.Is(err, ErrBadMetrics) && !errors.Is(err, ErrNoSteps) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		for _, r := range recs {
			if r.StepMs < 0 || r.ComputeMs < 0 || r.CommMs < 0 || r.BubbleMs < 0 || r.Overlap < 0 || r.Overlap > 1 ||
				r.World < 0 || r.DP < 0 || r.PP < 0 || r.MicroBatches < 0 || r.GradBytes < 0 || r.Line < 1 {
				t.Fatalf("out-of-range record accepted: %+v", r)
			}
		}
		// Whatever was accepted, the check must not fail on anything but
		// a missing pipeline size and must give finite numbers.
		res, err := Check(recs, DefaultCheckConfig())
		if err != nil {
			if !errors.Is(err, ErrBadMetrics) {
				t.Fatalf("Check: %v", err)
			}
			return
		}
		if res.Predicted.StepMs < 0 || res.Predicted.StepMs != res.Predicted.StepMs {
			t.Fatalf("Check predicted %v", res.Predicted.StepMs)
		}
		// troupe plan check --json prints the result: it must encode.
		if _, err := json.Marshal(res); err != nil {
			t.Fatalf("result does not encode: %v", err)
		}
	})
}

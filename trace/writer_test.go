package trace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// decoded is the subset of the format the test reads back, decoded with
// the standard library's strict JSON parser.
type decoded struct {
	DisplayTimeUnit string `json:"displayTimeUnit"`
	TraceEvents     []struct {
		Name string          `json:"name"`
		Cat  string          `json:"cat"`
		Ph   string          `json:"ph"`
		Ts   *float64        `json:"ts"`
		Dur  *float64        `json:"dur"`
		Pid  *int            `json:"pid"`
		Tid  *int            `json:"tid"`
		S    string          `json:"s"`
		Args json.RawMessage `json:"args"`
	} `json:"traceEvents"`
}

func decode(t *testing.T, b []byte) decoded {
	t.Helper()
	var d decoded
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("not a trace document: %v\n%s", err, b)
	}
	return d
}

func TestWriterFields(t *testing.T) {
	origin := time.Unix(100, 0)
	w := NewWriter(origin)
	w.NameProcess(1, "pipeline", 0)
	w.NameThread(1, 0, "stage 0", 0)
	w.NameThread(1, 1, "stage 1", 1)
	w.SpanTime(1, 1, "F0", "forward", origin.Add(1500*time.Microsecond), origin.Add(2500*time.Microsecond), map[string]any{"micro": 0})
	w.Span(1, 0, "F0", "forward", 0, 1000, map[string]any{"micro": 0})
	w.Instant(1, 0, "abort", "fault", 3000, nil)
	w.Counter(1, "activations", 1000, map[string]float64{"stage 0": 4096})
	if w.Len() != 10 {
		t.Fatalf("Len %d, want 10", w.Len())
	}
	var buf bytes.Buffer
	n, err := w.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo reported %d bytes, wrote %d", n, buf.Len())
	}
	d := decode(t, buf.Bytes())
	if d.DisplayTimeUnit != "ms" || len(d.TraceEvents) != 10 {
		t.Fatalf("unit %q, %d events", d.DisplayTimeUnit, len(d.TraceEvents))
	}
	// Metadata first, in recording order, then events by timestamp.
	wantOrder := []string{"process_name", "process_sort_index", "thread_name", "thread_sort_index", "thread_name", "thread_sort_index", "F0", "activations", "F0", "abort"}
	for i, e := range d.TraceEvents {
		if e.Name != wantOrder[i] {
			t.Fatalf("event %d is %q, want %q", i, e.Name, wantOrder[i])
		}
		if e.Ts == nil || e.Pid == nil || e.Tid == nil {
			t.Fatalf("event %d lacks ts, pid or tid", i)
		}
	}
	if e := d.TraceEvents[2]; e.Ph != "M" || string(e.Args) != `{"name":"stage 0"}` || *e.Tid != 0 {
		t.Fatalf("thread name event %+v args %s", e, e.Args)
	}
	e := d.TraceEvents[8]
	// 1.5 ms after the origin, 1 ms long: exact in float64 microseconds.
	if e.Ph != "X" || e.Cat != "forward" || *e.Ts != 1500 || e.Dur == nil || *e.Dur != 1000 || *e.Tid != 1 || string(e.Args) != `{"micro":0}` {
		t.Fatalf("span %+v", e)
	}
	if e := d.TraceEvents[9]; e.Ph != "i" || e.S != "t" || e.Dur != nil || e.Args != nil {
		t.Fatalf("instant %+v", e)
	}
	if e := d.TraceEvents[7]; e.Ph != "C" || string(e.Args) != `{"stage 0":4096}` {
		t.Fatalf("counter %+v %s", e, e.Args)
	}
}

func TestWriterEmpty(t *testing.T) {
	var buf bytes.Buffer
	if _, err := NewWriter(time.Time{}).WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	d := decode(t, buf.Bytes())
	if d.TraceEvents == nil || len(d.TraceEvents) != 0 {
		t.Fatalf("want an empty traceEvents array, got %s", buf.Bytes())
	}
}

// TestWriterClamps: NaN, infinities and negative durations would make the
// JSON unreadable or the span meaningless; they become 0.
func TestWriterClamps(t *testing.T) {
	w := NewWriter(time.Unix(0, 0))
	w.Span(0, 0, "bad", "", math.NaN(), -5, nil)
	w.Span(0, 0, "inf", "", 1, math.Inf(1), nil)
	w.Counter(0, "c", math.Inf(-1), map[string]float64{"v": math.NaN()})
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	for _, e := range decode(t, buf.Bytes()).TraceEvents {
		if *e.Ts != 0 && e.Name != "inf" || e.Dur != nil && *e.Dur != 0 {
			t.Fatalf("not clamped: %+v", e)
		}
	}
}

func TestWriterUnmarshalableArgs(t *testing.T) {
	w := NewWriter(time.Unix(0, 0))
	w.Span(0, 0, "bad", "", 0, 1, map[string]any{"f": func() {}})
	if _, err := w.WriteTo(&bytes.Buffer{}); err == nil {
		t.Fatal("want an error for args JSON cannot encode")
	}
}

// TestWriterConcurrent records from one goroutine per track; every span
// must come back once, each track's spans in time order (run with -race).
func TestWriterConcurrent(t *testing.T) {
	const tracks, spans = 8, 200
	w := NewWriter(time.Unix(0, 0))
	var wg sync.WaitGroup
	for tid := range tracks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.NameThread(1, tid, fmt.Sprintf("stage %d", tid), tid)
			for i := range spans {
				w.Span(1, tid, fmt.Sprintf("F%d", i), "forward", float64(i*10), 10, map[string]any{"micro": i})
			}
		}()
	}
	wg.Wait()
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	d := decode(t, buf.Bytes())
	last := make(map[int]float64)
	count := make(map[int]int)
	for _, e := range d.TraceEvents {
		if e.Ph != "X" {
			continue
		}
		if prev, ok := last[*e.Tid]; ok && *e.Ts <= prev {
			t.Fatalf("track %d: span at %v after %v", *e.Tid, *e.Ts, prev)
		}
		last[*e.Tid] = *e.Ts
		count[*e.Tid]++
	}
	for tid := range tracks {
		if count[tid] != spans {
			t.Fatalf("track %d: %d spans, want %d", tid, count[tid], spans)
		}
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run.json")
	w := NewWriter(time.Unix(0, 0))
	w.Span(0, 0, "x", "", 0, 1, nil)
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := decode(t, b); len(d.TraceEvents) != 1 {
		t.Fatalf("%d events", len(d.TraceEvents))
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
	if err := w.WriteFile(filepath.Join(dir, "missing", "run.json")); err == nil {
		t.Fatal("want an error for a missing directory")
	}
}

// TestWriterNoHTMLEscape: names with < and > are written as they are.
func TestWriterNoHTMLEscape(t *testing.T) {
	w := NewWriter(time.Unix(0, 0))
	w.Span(0, 0, ">a3", "send", 0, 1, nil)
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"name":">a3"`)) {
		t.Fatalf("%s", buf.Bytes())
	}
	decode(t, buf.Bytes())
}

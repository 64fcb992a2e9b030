package trace

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Event is one trace event as the JSON Object Format spells it. Fields the
// phase does not use are left out of the JSON.
type Event struct {
	Name string `json:"name"`
	// Cat is a comma-separated category list; Perfetto can filter by it.
	Cat string `json:"cat,omitempty"`
	// Ph is the phase: "X" complete span, "i" instant, "C" counter, "M"
	// metadata.
	Ph string `json:"ph"`
	// Ts is the start in microseconds; Dur the length of an "X" span.
	Ts  float64  `json:"ts"`
	Dur *float64 `json:"dur,omitempty"`
	Pid int      `json:"pid"`
	Tid int      `json:"tid"`
	// S is an instant's scope: "t" thread, "p" process, "g" global.
	S    string `json:"s,omitempty"`
	Args any    `json:"args,omitempty"`
}

// Writer collects events and writes them as one JSON document. It is safe
// for concurrent use: every method takes one mutex, which is cheap next to
// what a pipeline stage does between two records (a forward or backward
// pass of a micro-batch).
type Writer struct {
	origin time.Time

	mu     sync.Mutex
	meta   []Event
	events []Event
}

// NewWriter returns an empty Writer whose time.Time spans are measured from
// origin (use the start of the run).
func NewWriter(origin time.Time) *Writer { return &Writer{origin: origin} }

// Origin is the instant that timestamp 0 stands for.
func (w *Writer) Origin() time.Time { return w.origin }

// Micros converts t to the Writer's timestamps: microseconds since origin.
func (w *Writer) Micros(t time.Time) float64 {
	return float64(t.Sub(w.origin).Nanoseconds()) / 1e3
}

// NameProcess names process pid and sorts it at position order among the
// processes (Perfetto shows lower orders first).
func (w *Writer) NameProcess(pid int, name string, order int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.meta = append(w.meta,
		Event{Name: "process_name", Ph: "M", Pid: pid, Args: map[string]any{"name": name}},
		Event{Name: "process_sort_index", Ph: "M", Pid: pid, Args: map[string]any{"sort_index": order}})
}

// NameThread names the track tid of process pid ("stage 0") and sorts it
// at position order within the process.
func (w *Writer) NameThread(pid, tid int, name string, order int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.meta = append(w.meta,
		Event{Name: "thread_name", Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"name": name}},
		Event{Name: "thread_sort_index", Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"sort_index": order}})
}

// Span records a complete span on track (pid, tid) that starts ts
// microseconds after the origin and lasts dur microseconds. args (may be
// nil) is shown in the span's details; it must marshal to a JSON object and
// is not copied, so the caller must not change it afterwards. A negative
// dur or a non-finite time is clamped to zero so that one bad clock reading
// cannot make the whole file unreadable.
func (w *Writer) Span(pid, tid int, name, cat string, ts, dur float64, args map[string]any) {
	ts, dur = finite(ts), max(finite(dur), 0)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, Event{Name: name, Cat: cat, Ph: "X", Ts: ts, Dur: &dur, Pid: pid, Tid: tid, Args: nilIfEmpty(args)})
}

// SpanTime records a complete span from start to end (wall-clock times).
func (w *Writer) SpanTime(pid, tid int, name, cat string, start, end time.Time, args map[string]any) {
	w.Span(pid, tid, name, cat, w.Micros(start), float64(end.Sub(start).Nanoseconds())/1e3, args)
}

// Instant records a point event on track (pid, tid), e.g. an abort.
func (w *Writer) Instant(pid, tid int, name, cat string, ts float64, args map[string]any) {
	ts = finite(ts)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, Event{Name: name, Cat: cat, Ph: "i", Ts: ts, Pid: pid, Tid: tid, S: "t", Args: nilIfEmpty(args)})
}

// Counter records the values of counter name of process pid at ts (Perfetto
// draws one graph per counter, one series per key), e.g. activation bytes.
func (w *Writer) Counter(pid int, name string, ts float64, values map[string]float64) {
	ts = finite(ts)
	args := make(map[string]any, len(values))
	for k, v := range values {
		args[k] = finite(v)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, Event{Name: name, Ph: "C", Ts: ts, Pid: pid, Args: args})
}

// Len is the number of events recorded so far, metadata included.
func (w *Writer) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.meta) + len(w.events)
}

// Events returns a copy of the recorded events in the order WriteTo writes
// them: metadata first, then by timestamp, process and track (events
// recorded concurrently land in any order; sorting makes files diffable).
func (w *Writer) Events() []Event {
	w.mu.Lock()
	out := make([]Event, 0, len(w.meta)+len(w.events))
	out = append(out, w.meta...)
	evs := slices.Clone(w.events)
	w.mu.Unlock()
	slices.SortStableFunc(evs, func(a, b Event) int {
		return cmp.Or(cmp.Compare(a.Ts, b.Ts), cmp.Compare(a.Pid, b.Pid), cmp.Compare(a.Tid, b.Tid))
	})
	return append(out, evs...)
}

// WriteTo writes every event recorded so far as one JSON document, one
// event per line. Recording may go on while it writes; later events are not
// included.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	evs := w.Events()
	cw := &countWriter{w: out}
	bw := bufio.NewWriter(cw)
	// One encoder without HTML escaping, so that names like ">a3" stay
	// readable in the file.
	var one bytes.Buffer
	enc := json.NewEncoder(&one)
	enc.SetEscapeHTML(false)
	bw.WriteString(`{"displayTimeUnit":"ms","traceEvents":[`)
	for i, e := range evs {
		one.Reset()
		if err := enc.Encode(e); err != nil {
			return cw.n, fmt.Errorf("trace: event %q: %w", e.Name, err)
		}
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.WriteString("\n")
		bw.Write(bytes.TrimSuffix(one.Bytes(), []byte("\n")))
	}
	bw.WriteString("\n]}\n")
	err := bw.Flush()
	return cw.n, err
}

// WriteFile writes the document to path atomically: to a temporary file in
// the same directory, synced, then renamed, so that a crash never leaves a
// half-written trace under the final name.
func (w *Writer) WriteFile(path string) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = w.WriteTo(f); err != nil {
		return fmt.Errorf("trace: writing %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("trace: writing %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("trace: writing %s: %w", path, err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// finite maps NaN and ±Inf (which JSON cannot carry) to 0.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

func nilIfEmpty(m map[string]any) any {
	if len(m) == 0 {
		return nil
	}
	return m
}

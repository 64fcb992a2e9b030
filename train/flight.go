package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/failure"
	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// flightTimeout bounds the wait for the ranks' flight recorders: a live
// worker's control actor answers within milliseconds, also while the
// worker is stuck; one that has not answered by then is stopped, hung or
// gone, and the dump says so (FlightNoDump).
const flightTimeout = time.Second

// HangError is a step that timed out or found a rank silent, with what
// the ranks' flight recorders say: the first collective operation that
// did not finish everywhere and the rank it waits on. It wraps the step's
// error, whose class it keeps.
type HangError struct {
	// Verdict is nil when no operation was pending on the ranks that
	// dumped (the hang was outside the collectives).
	Verdict *collective.Verdict
	// Missing are the ranks that sent no dump; Dir is where the dumps are
	// ("" when they could not be written).
	Missing []int
	Dir     string
	Err     error
}

func (e *HangError) Error() string {
	var b strings.Builder
	b.WriteString(e.Err.Error())
	b.WriteString("; flight recorders: ")
	if e.Verdict != nil {
		b.WriteString(e.Verdict.String())
	} else {
		b.WriteString("no collective operation is pending on the ranks that dumped")
		if len(e.Missing) > 0 {
			fmt.Fprintf(&b, "; no dump from ranks %v", e.Missing)
		}
	}
	if e.Dir != "" {
		fmt.Fprintf(&b, " (dumps in %s; troupe explain hang %s)", e.Dir, e.Dir)
	}
	return b.String()
}

func (e *HangError) Unwrap() error { return e.Err }

// hangLike reports whether a failed step is worth the ranks' flight
// recorders: a collective timeout, a silent rank, the step's deadline,
// and (when the job ends on it anyway, !elastic) an abort another rank
// started. A lost peer is named already; an elastic job does not wait
// for dumps to recover from one.
func hangLike(err error, elastic bool) bool {
	switch failure.CodeOf(err) {
	case failure.Timeout, failure.PeerSilent:
		return true
	case failure.Aborted:
		return !elastic
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// flightAsk is a question to every rank's control actor for its flight
// recorder, sent and not yet waited for.
type flightAsk struct {
	ranks   []int
	futures []*actor.Future
}

// askFlights asks every rank's control actor (it answers while the worker
// is busy) for its flight recorder.
func (e *groupExecutor) askFlights(reason string) *flightAsk {
	q := &flightAsk{}
	for r, p := range e.peers {
		if p >= len(e.controls) {
			continue
		}
		q.ranks = append(q.ranks, r)
		q.futures = append(q.futures, e.sys.Root().RequestFuture(e.controls[p], &workerpb.FlightRequest{Peer: uint32(p), Reason: reason}, flightTimeout))
	}
	return q
}

// wait collects the answers: the dumps that came, by rank.
func (q *flightAsk) wait(log *zap.Logger) []collective.FlightDump {
	var dumps []collective.FlightDump
	for i, f := range q.futures {
		res, err := f.Result()
		if err != nil {
			log.Warn("a rank's flight recorder did not answer", zap.Int("rank", q.ranks[i]), zap.Error(err))
			continue
		}
		rec, ok := res.(*workerpb.FlightRecord)
		if !ok {
			log.Warn("a rank answered a flight request with another message", zap.Int("rank", q.ranks[i]), zap.String("type", fmt.Sprintf("%T", res)))
			continue
		}
		if err := rec.Failed(); err != nil {
			log.Warn("a rank's flight recorder failed", zap.Int("rank", q.ranks[i]), zap.Error(err))
			continue
		}
		// The dump stays the recorder's JSON document: the form
		// /debug/flight serves and troupe hang reads, parsed (and fuzzed)
		// in one place, collective.ParseFlightDump.
		d, err := collective.ParseFlightDump(rec.Dump)
		if err != nil {
			log.Warn("a rank's flight recorder is unreadable", zap.Int("rank", q.ranks[i]), zap.Error(err))
			continue
		}
		dumps = append(dumps, d)
	}
	return dumps
}

// Flights gathers every rank's flight recorder (those that answer).
func (e *groupExecutor) Flights(reason string) []collective.FlightDump {
	return e.askFlights(reason).wait(e.log)
}

// meshRanks lists the mesh's ranks: the ranks that should dump.
func (e *groupExecutor) meshRanks() []int {
	out := make([]int, e.mesh.Size())
	for r := range out {
		out[r] = r
	}
	return out
}

// hang wraps a failed step's err with what the ranks' flight recorders
// (asked before the abort, q) say, written under dir.
func (e *groupExecutor) hang(q *flightAsk, err error, dir, reason string) error {
	dumps := q.wait(e.log)
	a := collective.Align(dumps, e.meshRanks())
	h := &HangError{Verdict: a.Verdict, Missing: a.Missing, Err: err}
	path, werr := WriteFlights(dir, reason, dumps)
	if werr != nil {
		e.log.Warn("the flight-recorder dumps cannot be written", zap.Error(werr))
	} else {
		h.Dir = path
	}
	var text strings.Builder
	_ = a.WriteText(&text)
	e.log.Error("a step hung; the ranks' flight recorders aligned", zap.String("dumps", h.Dir), zap.String("alignment", text.String()))
	return h
}

// defaultDumpDir is where dumps go when Config.DumpDir is empty.
func defaultDumpDir() string { return filepath.Join(os.TempDir(), "troupe-dumps") }

var slugRe = regexp.MustCompile(`[^a-z0-9]+`)

// WriteFlights writes dumps as rank-R.json into a new directory under dir
// (Config.DumpDir; "" for the default, troupe-dumps in the temporary
// directory) named for the time and reason, and returns it.
func WriteFlights(dir, reason string, dumps []collective.FlightDump) (string, error) {
	if dir == "" {
		dir = defaultDumpDir()
	}
	slug := strings.Trim(slugRe.ReplaceAllString(strings.ToLower(reason), "-"), "-")
	if len(slug) > 40 {
		slug = slug[:40]
	}
	name := time.Now().UTC().Format("20060102T150405.000Z")
	if slug != "" {
		name += "-" + slug
	}
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(path, 0o755); err != nil {
		return "", fmt.Errorf("%w: dump directory: %w", ErrOutput, err)
	}
	for _, d := range dumps {
		b, err := json.MarshalIndent(d, "", " ")
		if err != nil {
			return "", err
		}
		f := filepath.Join(path, fmt.Sprintf("rank-%d.json", d.Rank))
		if err := os.WriteFile(f, append(b, '\n'), 0o644); err != nil {
			return "", fmt.Errorf("%w: dump %s: %w", ErrOutput, f, err)
		}
	}
	return path, nil
}

// ReadFlights reads the dumps (rank-*.json, or any *.json that holds one)
// of a dump directory.
func ReadFlights(dir string) ([]collective.FlightDump, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		if _, err := os.Stat(dir); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: no *.json dumps in %s", collective.ErrBadDump, dir)
	}
	var out []collective.FlightDump
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		d, err := collective.ParseFlightDump(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// flightSource is what a process can dump now: every rank of the world it
// drives (Run), or the ranks of its own workers (an agent, a worker
// process). It is set once the workers exist; nil src dumps nothing.
type flightSource struct {
	mu  sync.Mutex
	src func(reason string) (dumps []collective.FlightDump, expected []int)
}

func (f *flightSource) set(src func(reason string) ([]collective.FlightDump, []int)) {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.src = src
	f.mu.Unlock()
}

// take asks the source for its dumps.
func (f *flightSource) take(reason string) ([]collective.FlightDump, []int) {
	f.mu.Lock()
	src := f.src
	f.mu.Unlock()
	if src == nil {
		return []collective.FlightDump{}, nil
	}
	return src(reason)
}

// flightResponse is what /debug/flight serves: the dumps of the ranks
// this process reaches (all of a world it drives, else its own).
type flightResponse struct {
	Dumps []collective.FlightDump `json:"dumps"`
}

// ServeHTTP answers /debug/flight.
func (f *flightSource) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	dumps, _ := f.take("requested over HTTP")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(flightResponse{Dumps: dumps})
}

// dump writes the source's dumps under dir and logs the alignment.
func (f *flightSource) dump(dir, reason string, log *zap.Logger) {
	dumps, expected := f.take(reason)
	path, err := WriteFlights(dir, reason, dumps)
	if err != nil {
		log.Error("the flight-recorder dumps cannot be written", zap.Error(err))
		return
	}
	a := collective.Align(dumps, expected)
	var text strings.Builder
	_ = a.WriteText(&text)
	fields := []zap.Field{zap.String("dumps", path), zap.Int("ranks", len(dumps)), zap.String("alignment", text.String())}
	if a.Verdict != nil {
		fields = append(fields, zap.Stringer("verdict", a.Verdict))
	}
	log.Info("flight recorders dumped", fields...)
}

// watchDumps dumps the source into dir at each receive from ch (the CLI's
// SIGUSR1) until stop, which returns once the watcher has ended.
func (f *flightSource) watch(ch <-chan struct{}, dir string, log *zap.Logger) (stop func()) {
	if ch == nil {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case _, ok := <-ch:
				if !ok {
					return
				}
				f.dump(dir, "signal", log)
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// shellFlights is the source of workers of this process: their dumps, and
// the world's ranks as expected.
func shellFlights(shells ...*worker.Shell) func(string) ([]collective.FlightDump, []int) {
	return func(reason string) ([]collective.FlightDump, []int) {
		var out []collective.FlightDump
		for _, s := range shells {
			out = append(out, s.Flight(reason))
		}
		var expected []int
		for _, d := range out {
			expected = append(expected, d.Rank)
		}
		return out, expected
	}
}

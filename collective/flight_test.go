package collective

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestFlightRecorderRing: the recorder keeps the last operations in order,
// counts the dropped ones, and Since returns a window's resolved ones.
func TestFlightRecorderRing(t *testing.T) {
	r := NewFlightRecorder(1, 2, 3)
	r.group(WorldGroup, []int{0, 1})
	t0 := time.Unix(100, 0)
	for i := range 5 {
		id := OpID{Gen: 0, Op: uint64(i)}
		r.start(t0.Add(time.Duration(i)*time.Second), WorldGroup, id, KindAllReduce, 10*(i+1))
		if i != 4 {
			var err error
			if i == 3 {
				err = &OpError{ID: id, Err: ErrTimeout, Culprit: 0}
			}
			r.finish(t0.Add(time.Duration(i)*time.Second+time.Millisecond), WorldGroup, id, err, 0)
		}
	}
	d := r.Dump(t0.Add(time.Minute), "test")
	if d.Dropped != 2 || len(d.Ops) != 3 {
		t.Fatalf("dropped %d, kept %d: want 2 and 3", d.Dropped, len(d.Ops))
	}
	want := []struct {
		op    uint64
		state string
		bytes int64
	}{{2, FlightDone, 120}, {3, FlightFailed, 160}, {4, FlightRunning, 200}}
	for i, w := range want {
		o := d.Ops[i]
		if o.Op != w.op || o.State != w.state || o.Bytes != w.bytes || o.Seq != w.op {
			t.Errorf("op %d: %+v, want op %d %s %d bytes", i, o, w.op, w.state, w.bytes)
		}
	}
	if d.Ops[1].Culprit != 0 || !strings.Contains(d.Ops[1].Err, "timeout") {
		t.Errorf("failed op: culprit %d, error %q", d.Ops[1].Culprit, d.Ops[1].Err)
	}
	if got := slices.Collect(r.Since(3)); len(got) != 1 || got[0].Op != 3 {
		t.Errorf("Since(3) = %+v, want op 3 only (op 4 runs)", got)
	}
	if got := slices.Collect(r.Since(0)); len(got) != 2 {
		t.Errorf("Since(0) = %d ops, want the 2 kept and resolved", len(got))
	}
	for op := range r.Since(0) {
		if op.Op != 2 {
			t.Errorf("the first op yielded is %d, want 2", op.Op)
		}
		break // stopping early unlocks the recorder
	}
	r.Next()
	// A finish for an operation overwritten in the ring changes nothing.
	r.finish(t0, WorldGroup, OpID{Op: 0}, nil, -1)
	if d2 := r.Dump(t0, ""); d2.Ops[0].Op != 2 {
		t.Errorf("a late finish changed the ring: %+v", d2.Ops[0])
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseFlightDump(b)
	if err != nil {
		t.Fatalf("a dump does not parse back: %v", err)
	}
	if len(back.Ops) != 3 || !back.Ops[2].End.IsZero() || back.Ops[0].End.IsZero() {
		t.Errorf("round trip: %+v", back.Ops)
	}
}

// hangOnMem runs two all-reduces on P ranks of a memory network, then a
// third that rank late does not enter: the others time out. It returns
// every rank's dump.
func hangOnMem(t *testing.T, P, late int) []FlightDump {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Timeout = 150 * time.Millisecond
	_, comms := startMem(t, P, cfg)
	bufs := make([][]float32, P)
	for r := range bufs {
		bufs[r] = make([]float32, 1000)
	}
	for range 2 {
		noErrors(t, allReduceEverywhere(comms, bufs, Sum))
	}
	errs := make([]error, P)
	var wg sync.WaitGroup
	for r, c := range comms {
		if r == late {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = c.AllReduce(context.Background(), bufs[r], Sum).Wait()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if r != late && !errors.Is(err, ErrTimeout) {
			t.Fatalf("rank %d: %v, want a timeout", r, err)
		}
	}
	dumps := make([]FlightDump, P)
	for r, c := range comms {
		dumps[r] = FlightOf(c).Dump(time.Now(), "test")
	}
	return dumps
}

// TestAlignNamesTheRankThatDidNotEnter: three ranks, rank 2 never enters
// the third all-reduce; the alignment names it, with the op, and the
// others as waiting; without rank 2's dump it is named as silent.
func TestAlignNamesTheRankThatDidNotEnter(t *testing.T) {
	dumps := hangOnMem(t, 3, 2)
	a := Align(dumps, nil)
	v := a.Verdict
	if v == nil {
		t.Fatal("no verdict")
	}
	if v.Rank != 2 || v.What != "did not enter" || v.Op != 2 || v.Gen != 0 || v.Kind != "AllReduce" || v.Bytes != 4000 {
		t.Fatalf("verdict %+v: want rank 2 did not enter AllReduce gen 0 op 2 of 4000 bytes", v)
	}
	if len(v.Waiting) != 2 || v.Waiting[0] != 0 || v.Waiting[1] != 1 {
		t.Errorf("waiting %v, want [0 1]", v.Waiting)
	}
	// The detail quotes a waiting rank's error, the one naming rank 2 when
	// one does: which rank times out first is a race (rank 1 may time out
	// on rank 0, itself stuck on rank 2, and abort it), so neither error
	// is sure to name rank 2.
	a0, a1 := a.Groups[0].Ops[2].Errs[0], a.Groups[0].Ops[2].Errs[1]
	switch {
	case namesRank(a0, 2):
		if v.Detail != "rank 0: "+a0 {
			t.Errorf("detail %q, want rank 0's error %q, which names rank 2", v.Detail, a0)
		}
	case namesRank(a1, 2):
		if v.Detail != "rank 1: "+a1 {
			t.Errorf("detail %q, want rank 1's error %q, which names rank 2", v.Detail, a1)
		}
	case v.Detail != "rank 0: "+a0:
		t.Errorf("detail %q, want rank 0's error %q (no error names rank 2)", v.Detail, a0)
	}
	var text bytes.Buffer
	if err := a.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"not entered", "verdict: rank 2 did not enter AllReduce", "rank 0", "failed"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}

	// Without rank 2's dump: the failures of the others blame it.
	b := Align(dumps[:2], nil)
	if b.Verdict == nil || b.Verdict.Rank != 2 || !strings.HasPrefix(b.Verdict.What, "sent no dump") {
		t.Fatalf("verdict without rank 2's dump: %+v", b.Verdict)
	}
	if len(b.Missing) != 1 || b.Missing[0] != 2 {
		t.Errorf("missing %v, want [2]", b.Missing)
	}
}

// TestAlignBlamesTheSilentMember: every rank entered, one never
// finished; the failed ranks' culprit is named.
func TestAlignBlamesTheSilentMember(t *testing.T) {
	t0 := time.Unix(0, 0)
	g := []FlightGroup{{ID: 7, Members: []int{0, 1, 2}}}
	op := func(state string, culprit int) []FlightOp {
		return []FlightOp{{Seq: 0, Group: 7, Kind: "AllGather", Bytes: 8, State: state, Start: t0, Culprit: culprit}}
	}
	dumps := []FlightDump{
		{Rank: 0, Size: 3, Groups: g, Ops: op(FlightFailed, 1)},
		{Rank: 1, Size: 3, Groups: g, Ops: op(FlightRunning, -1)},
		{Rank: 2, Size: 3, Groups: g, Ops: op(FlightFailed, 1)},
	}
	v := Align(dumps, nil).Verdict
	if v == nil || v.Rank != 1 || v.What != "did not finish" || v.Group != 7 {
		t.Fatalf("verdict %+v, want rank 1 did not finish in group 7", v)
	}
	// Everything done: no verdict.
	for i := range dumps {
		dumps[i].Ops[0].State = FlightDone
	}
	if v := Align(dumps, nil).Verdict; v != nil {
		t.Fatalf("verdict %+v with every operation done", v)
	}
}

// TestAlignPicksTheFirstStuckGroup: with two groups pending, the verdict
// is about the operation entered first.
func TestAlignPicksTheFirstStuckGroup(t *testing.T) {
	t0 := time.Unix(0, 0)
	gs := []FlightGroup{{ID: 0, Members: []int{0, 1}}, {ID: 9, Members: []int{0, 1}}}
	dumps := []FlightDump{
		{Rank: 0, Size: 2, Groups: gs, Ops: []FlightOp{
			{Seq: 0, Group: 9, Kind: "ReduceScatter", State: FlightRunning, Start: t0, Culprit: -1},
			{Seq: 1, Group: 0, Kind: "AllReduce", State: FlightRunning, Start: t0.Add(time.Second), Culprit: -1}}},
		{Rank: 1, Size: 2, Groups: gs, Ops: []FlightOp{}},
	}
	v := Align(dumps, nil).Verdict
	if v == nil || v.Group != 9 || v.Rank != 1 || v.What != "did not enter" {
		t.Fatalf("verdict %+v, want rank 1 did not enter group 9's ReduceScatter", v)
	}
}

func TestParseFlightDumpRejects(t *testing.T) {
	good := `{"rank":0,"size":2,"time":"2026-01-01T00:00:00Z","groups":[{"id":0,"members":[0,1]}],"ops":[{"seq":0,"group":0,"gen":0,"op":0,"kind":"AllReduce","bytes":4,"state":"done","start":"2026-01-01T00:00:00Z","culprit":-1}],"dropped":0}`
	if _, err := ParseFlightDump([]byte(good)); err != nil {
		t.Fatalf("good dump: %v", err)
	}
	for name, bad := range map[string]string{
		"not json":      `{"rank":`,
		"rank outside":  strings.Replace(good, `"rank":0`, `"rank":5`, 1),
		"unknown kind":  strings.Replace(good, `"AllReduce"`, `"Gossip"`, 1),
		"unknown state": strings.Replace(good, `"done"`, `"maybe"`, 1),
		"unknown group": strings.Replace(good, `"group":0`, `"group":3`, 1),
		"member out":    strings.Replace(good, `[0,1]`, `[0,9]`, 1),
		"culprit out":   strings.Replace(good, `"culprit":-1`, `"culprit":7`, 1),
		"huge world":    strings.Replace(good, `"size":2`, `"size":1000000000`, 1),
	} {
		if _, err := ParseFlightDump([]byte(bad)); !errors.Is(err, ErrBadDump) {
			t.Errorf("%s: %v, want ErrBadDump", name, err)
		}
	}
}

// FuzzParseFlightDump: any bytes give a dump or ErrBadDump, and a parsed
// dump aligns without a panic.
func FuzzParseFlightDump(f *testing.F) {
	f.Add([]byte(`{"rank":0,"size":2,"groups":[{"id":0,"members":[0,1]}],"ops":[{"seq":0,"group":0,"kind":"AllReduce","state":"running","culprit":1}]}`))
	f.Add([]byte(`{"rank":1,"size":2,"groups":[],"ops":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseFlightDump(b)
		if err != nil {
			if !errors.Is(err, ErrBadDump) {
				t.Fatalf("error %v is not ErrBadDump", err)
			}
			return
		}
		a := Align([]FlightDump{d}, nil)
		if err := a.WriteText(&bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestVerdictDetailPrefersTheErrorNamingTheCulprit: of the waiting ranks'
// errors, the verdict quotes the one that names the blamed rank, as a
// whole number, else the first.
func TestVerdictDetailPrefersTheErrorNamingTheCulprit(t *testing.T) {
	op := &AlignedOp{Errs: []string{"aborted by rank 1: nothing from rank 0", "nothing from rank 20", "nothing from rank 2 for 1s", ""}}
	members := []int{0, 1, 4, 2}
	if got, want := verdictDetail(op, members, 2), "rank 4: nothing from rank 2 for 1s"; got != want {
		t.Errorf("detail %q, want %q", got, want)
	}
	if got, want := verdictDetail(op, members, 7), "rank 0: aborted by rank 1: nothing from rank 0"; got != want {
		t.Errorf("no error names rank 7: detail %q, want the first error %q", got, want)
	}
	if got := verdictDetail(&AlignedOp{Errs: []string{"", ""}}, members[:2], 1); got != "" {
		t.Errorf("no errors: detail %q, want none", got)
	}
	for _, c := range []struct {
		text string
		want bool
	}{{"rank 2", true}, {"rank 20", false}, {"rank 20, rank 2: x", true}, {"rank 2x", true}, {"trank 12", false}} {
		if got := namesRank(c.text, 2); got != c.want {
			t.Errorf("namesRank(%q, 2) = %v, want %v", c.text, got, c.want)
		}
	}
}

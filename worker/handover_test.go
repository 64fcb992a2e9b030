package worker

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// A leaving worker's part, handed over in chunks to the worker actor of a
// standby, is held there whole: the same parameters, optimizer state and
// update count, at the same step, so the standby can serve as the part's
// root. A chunk that starts no hand-over is refused.
func TestShellTakesAHandOver(t *testing.T) {
	s := mlpSetup(t)
	spec := s.spec(t, 2, 2, pipeline.Kind1F1B, false, 0)
	wd := newWorld(t, spec, 1)
	wd.losses(t, s, 3, s.batch)
	from := wd.workers[1]
	ps, err := from.ExportPart()
	if err != nil {
		t.Fatal(err)
	}
	if ps.Hold.Part != 1 || ps.Hold.Applied != 3 || ps.Steps != 3 || len(ps.Bufs) < 2 {
		t.Fatalf("exported part %d at step %d, %d updates, %d buffers", ps.Hold.Part, ps.Hold.Applied, ps.Steps, len(ps.Bufs))
	}

	sys, err := actors.NewSystem(actors.SystemConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Close() })
	w, err := New(spec, cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	sh, err := Spawn(sys, w, ShellConfig{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sh.Stop)
	ask := func(m any) any {
		t.Helper()
		res, err := sys.Root().RequestFuture(sh.PID(), m, time.Minute).Result()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	stray := ask(&workerpb.PartChunk{Part: 1, Applied: 3, Buffer: 1, Offset: 2, Values: []float32{1}}).(*workerpb.PartTaken)
	if err := stray.Failed(); !errors.Is(err, ErrConfig) {
		t.Fatalf("a chunk without a start: %v, want ErrConfig", err)
	}
	lens := make([]uint64, len(ps.Bufs))
	for i, b := range ps.Bufs {
		lens[i] = uint64(len(b))
	}
	var last *workerpb.PartTaken
	for b, buf := range ps.Bufs {
		for off := 0; off < len(buf); off += 7 { // small chunks: offsets inside every buffer
			end := min(off+7, len(buf))
			last = ask(&workerpb.PartChunk{Part: int32(ps.Hold.Part), Applied: uint64(ps.Hold.Applied), Cursor: uint64(ps.Hold.Cursor),
				OptSteps: uint64(ps.Steps), Lens: lens, Buffer: uint32(b), Offset: uint64(off), Values: buf[off:end],
				Last: b == len(ps.Bufs)-1 && end == len(buf)}).(*workerpb.PartTaken)
			if err := last.Failed(); err != nil {
				t.Fatalf("buffer %d, offset %d: %v", b, off, err)
			}
		}
	}
	if want := from.Checksum(); last.Checksum != want {
		t.Fatalf("the standby holds checksum %016x, the leaver %016x", last.Checksum, want)
	}
	st := ask(&workerpb.StatusRequest{}).(*workerpb.Status)
	if st.HeldPart != 1 || st.Applied != 3 || st.Cursor != uint64(ps.Hold.Cursor) || st.JobStep != 3 || st.Rank != -1 {
		t.Fatalf("the standby's status after the hand-over: %v", st)
	}
	got := ask(&ExportRequest{}).(*Exported)
	if got.Err != nil || got.State.Steps != ps.Steps || !slices.EqualFunc(got.State.Bufs, ps.Bufs, slices.Equal) {
		t.Fatalf("the standby's state differs from the leaver's (%v)", got.Err)
	}
}

package pipeline

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestCursorDeliverErrors(t *testing.T) {
	s := mustBuild(t, Config{Kind: Kind1F1B, Stages: 3, MicroBatches: 2})
	c, err := NewCursor(s, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Next(); ok {
		t.Fatal("stage 1 can run before its first activation arrives")
	}
	if op, ok := c.Waiting(); !ok || op != (Op{RecvAct, 0, 0}) {
		t.Fatalf("waiting %v %v", op, ok)
	}
	bad := []struct {
		m    Message
		want error
		text string
	}{
		{Message{Kind: RecvAct, Micro: 0, From: 0, To: 1}, ErrUnexpectedMessage, "not a send"},
		{Message{Kind: SendAct, Micro: 0, From: 2, To: 1}, ErrUnexpectedMessage, "stage 1 got send_act 0 from stage 2 to stage 1"},
		{Message{Kind: SendGrad, Micro: 0, From: 0, To: 1}, ErrUnexpectedMessage, "send_grad 0 from stage 0"},
		{Message{Kind: SendAct, Micro: 0, From: 0, To: 2}, ErrUnexpectedMessage, "to stage 2"},
		{Message{Kind: SendAct, Micro: 5, From: 0, To: 1}, ErrUnexpectedMessage, "never receives"},
	}
	for _, b := range bad {
		if err := c.Deliver(b.m); !errors.Is(err, b.want) || !strings.Contains(err.Error(), b.text) {
			t.Errorf("%v: %v, want %v mentioning %q", b.m, err, b.want, b.text)
		}
	}
	act0 := Message{Kind: SendAct, Micro: 0, From: 0, To: 1}
	if err := c.Deliver(act0); err != nil {
		t.Fatal(err)
	}
	if err := c.Deliver(act0); !errors.Is(err, ErrDuplicateMessage) {
		t.Fatalf("second copy: %v", err)
	}
	op, ok := c.Next()
	if !ok || op != (Op{RecvAct, 0, 0}) {
		t.Fatalf("next %v %v", op, ok)
	}
	if err := c.Done(computeOp(Forward, 0)); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("done with the wrong op: %v", err)
	}
	if err := c.Done(op); err != nil {
		t.Fatal(err)
	}
	if err := c.Deliver(act0); !errors.Is(err, ErrDuplicateMessage) {
		t.Fatalf("copy after consumption: %v", err)
	}
	// A gradient may come long before its receive op: it waits.
	if err := c.Deliver(Message{Kind: SendGrad, Micro: 1, From: 2, To: 1}); err != nil {
		t.Fatal(err)
	}
	if c.Position() != 1 || c.Len() != 12 || c.Finished() || c.Stage() != 1 {
		t.Fatalf("position %d len %d", c.Position(), c.Len())
	}
	c.Reset()
	if _, ok := c.Waiting(); !ok || c.Position() != 0 {
		t.Fatal("Reset did not rewind")
	}
	if err := c.Deliver(act0); err != nil {
		t.Fatalf("after Reset the first activation is expected again: %v", err)
	}
	if _, err := NewCursor(s, 3); !errors.Is(err, ErrBadArgument) {
		t.Fatal(err)
	}
	// Past the end.
	one := mustBuild(t, Config{Kind: KindGPipe, Stages: 1, MicroBatches: 1})
	c1, _ := NewCursor(one, 0)
	for {
		op, ok := c1.Next()
		if !ok {
			break
		}
		if err := c1.Done(op); err != nil {
			t.Fatal(err)
		}
	}
	if !c1.Finished() {
		t.Fatal("not finished")
	}
	if _, ok := c1.Waiting(); ok {
		t.Fatal("a finished stage waits")
	}
	if err := c1.Done(computeOp(Forward, 0)); !errors.Is(err, ErrBadArgument) || !strings.Contains(err.Error(), "after the end") {
		t.Fatal(err)
	}
}

// toyStage is one stage of a toy scalar network h' = tanh(w·h + c), run by
// a toy executor through a Cursor, as a Stage actor will run real layers.
type toyStage struct {
	w, c    float64
	dw, dc  float64
	in, out map[int]float64 // saved input and output per micro-batch
	actIn   map[int]float64 // arrived activations
	gradIn  map[int]float64 // arrived output gradients
	actOut  map[int]float64 // outputs waiting for SendAct
	gradOut map[int]float64 // input gradients waiting for SendGrad
	dOut    map[int]float64 // last stage: loss gradient per micro-batch
}

func toyParams(P int) (w, c []float64) {
	for s := range P {
		w = append(w, 0.5+0.1*float64(s))
		c = append(c, 0.05*float64(s)-0.1)
	}
	return w, c
}

func toyData(M int) (x, y []float64) {
	for m := range M {
		x = append(x, math.Sin(float64(m)+1))
		y = append(y, math.Cos(float64(m)))
	}
	return x, y
}

// toySequential runs the M micro-batches one after another through all P
// layers, accumulating gradients in micro-batch order: the reference.
func toySequential(P, M int) (dw, dc []float64, loss float64) {
	w, c := toyParams(P)
	x, y := toyData(M)
	dw, dc = make([]float64, P), make([]float64, P)
	for m := range M {
		hs := []float64{x[m]}
		for s := range P {
			hs = append(hs, math.Tanh(w[s]*hs[s]+c[s]))
		}
		d := hs[P] - y[m]
		loss += 0.5 * d * d
		for s := P - 1; s >= 0; s-- {
			dz := d * (1 - hs[s+1]*hs[s+1])
			dw[s] += dz * hs[s]
			dc[s] += dz
			d = dz * w[s]
		}
	}
	return dw, dc, loss
}

// toyPipeline runs schedule s with one Cursor per stage. Each turn the
// seeded random source picks either a stage with a runnable op or an
// in-flight message to deliver, so messages arrive late, early and out of
// order. It records ops and held activations into a Recorder with a
// logical clock (one tick per turn).
func toyPipeline(t *testing.T, s *Schedule, seed uint64) (dw, dc []float64, loss float64, tl *Timeline) {
	t.Helper()
	P, M := s.Stages, s.MicroBatches
	rng := rand.New(rand.NewPCG(seed, 1))
	w, c := toyParams(P)
	x, y := toyData(M)
	origin := time.Unix(0, 0)
	rec, err := NewRecorder(P, origin)
	if err != nil {
		t.Fatal(err)
	}
	tick := 0
	now := func() time.Time { return origin.Add(time.Duration(tick) * time.Millisecond) }
	stages := make([]*toyStage, P)
	cursors := make([]*Cursor, P)
	for i := range stages {
		stages[i] = &toyStage{w: w[i], c: c[i], in: map[int]float64{}, out: map[int]float64{}, actIn: map[int]float64{}, gradIn: map[int]float64{},
			actOut: map[int]float64{}, gradOut: map[int]float64{}, dOut: map[int]float64{}}
		if cursors[i], err = NewCursor(s, i); err != nil {
			t.Fatal(err)
		}
	}
	type flight struct {
		msg Message
		val float64
	}
	var net []flight
	for {
		var runnable []int
		for i, cur := range cursors {
			if _, ok := cur.Next(); ok {
				runnable = append(runnable, i)
			}
		}
		if len(runnable) == 0 && len(net) == 0 {
			break
		}
		tick++
		if len(net) > 0 && (len(runnable) == 0 || rng.IntN(2) == 0) {
			k := rng.IntN(len(net))
			f := net[k]
			net = append(net[:k], net[k+1:]...)
			if err := cursors[f.msg.To].Deliver(f.msg); err != nil {
				t.Fatal(err)
			}
			st := stages[f.msg.To]
			if f.msg.Kind == SendAct {
				st.actIn[f.msg.Micro] = f.val
			} else {
				st.gradIn[f.msg.Micro] = f.val
			}
			continue
		}
		i := runnable[rng.IntN(len(runnable))]
		op, _ := cursors[i].Next()
		st, m := stages[i], op.Micro
		start := now()
		switch op.Kind {
		case RecvAct, RecvGrad:
			// The value is already in actIn / gradIn; taking it is free.
		case Forward:
			h := x[m]
			if i > 0 {
				h = st.actIn[m]
				delete(st.actIn, m)
			}
			st.in[m] = h
			out := math.Tanh(st.w*h + st.c)
			if !s.Recompute {
				st.out[m] = out // with recompute, only the input is kept
			}
			if i < P-1 {
				st.actOut[m] = out
			}
			rec.Hold(i, m, 16, start)
			if i == P-1 {
				d := out - y[m]
				loss += 0.5 * d * d
				st.dOut[m] = d
			}
			if s.Recompute {
				rec.Hold(i, m, 8, start)
			}
		case Recompute:
			st.out[m] = math.Tanh(st.w*st.in[m] + st.c)
			rec.Hold(i, m, 16, start)
		case Backward:
			out, ok := st.out[m]
			if !ok {
				t.Fatalf("stage %d: backward %d without its activations", i, m)
			}
			d := st.dOut[m]
			if i < P-1 {
				d = st.gradIn[m]
				delete(st.gradIn, m)
			}
			dz := d * (1 - out*out)
			st.dw += dz * st.in[m]
			st.dc += dz
			if i > 0 {
				st.gradOut[m] = dz * st.w
			}
			delete(st.out, m)
			rec.Release(i, m, start)
		case SendAct:
			net = append(net, flight{MessageOf(i, op), st.actOut[m]})
			delete(st.actOut, m)
		case SendGrad:
			net = append(net, flight{MessageOf(i, op), st.gradOut[m]})
			delete(st.gradOut, m)
		}
		if err := cursors[i].Done(op); err != nil {
			t.Fatal(err)
		}
		if err := rec.Op(i, op, start, start.Add(time.Millisecond/2)); err != nil {
			t.Fatal(err)
		}
	}
	for i, cur := range cursors {
		if !cur.Finished() {
			t.Fatalf("seed %d: stage %d stuck at op %d of %d", seed, i, cur.Position(), cur.Len())
		}
		dw = append(dw, stages[i].dw)
		dc = append(dc, stages[i].dc)
	}
	return dw, dc, loss, rec.Take()
}

// TestPipelineMatchesSequential is the schedules' numeric property: driven
// through Cursors with messages delivered in random order, GPipe and 1F1B
// (with and without recomputation) give the same loss and gradients as
// running the micro-batches one by one. Equality is exact: every stage
// applies the same float64 operations in the same order (backwards run in
// micro-batch order in both schedules), so not a bit may differ. It also
// checks, from what the toy executor held, that 1F1B keeps at most
// min(P−s, M) micro-batches alive on stage s and GPipe M.
func TestPipelineMatchesSequential(t *testing.T) {
	for _, k := range []Kind{KindGPipe, Kind1F1B} {
		for _, rc := range []bool{false, true} {
			for P := 1; P <= 5; P++ {
				for _, M := range []int{1, 2, 3, 7} {
					wdw, wdc, wloss := toySequential(P, M)
					s := mustBuild(t, Config{Kind: k, Stages: P, MicroBatches: M, Recompute: rc})
					for seed := range uint64(3) {
						dw, dc, loss, tl := toyPipeline(t, s, seed)
						name := fmt.Sprintf("%s P=%d M=%d recompute=%v seed=%d", k, P, M, rc, seed)
						if loss != wloss {
							t.Fatalf("%s: loss %v, sequential %v", name, loss, wloss)
						}
						for i := range P {
							if dw[i] != wdw[i] || dc[i] != wdc[i] {
								t.Fatalf("%s stage %d: grads (%v, %v), sequential (%v, %v)", name, i, dw[i], dc[i], wdw[i], wdc[i])
							}
						}
						st := tl.Stats()
						for i, got := range st.PeakInFlight() {
							want := M
							if k == Kind1F1B {
								want = min(P-i, M)
							}
							if got != want {
								t.Fatalf("%s stage %d: %d micro-batches alive at peak, want %d", name, i, got, want)
							}
						}
					}
				}
			}
		}
	}
}

package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/pipeline"
)

// What a worker does to join a generation, from what it holds.
func TestHoldingPlan(t *testing.T) {
	dp2pp2, _ := mesh.Of(2, 2)
	at := func(rank int, src Source, step int) Form {
		return Form{Generation: 3, Mesh: dp2pp2, Rank: rank, Step: step, Cursor: data.Cursor(8 * step), Source: src, World0: 2}
	}
	seed := Source{Kind: FromSeed}
	roots := Source{Kind: FromReplica, Roots: []int{0, 3}}
	ckpt := Source{Kind: FromCheckpoint, Step: 4}
	dp4, _ := mesh.Of(4, 1)
	zat := func(rank int, src Source, step int) Form {
		return Form{Generation: 3, Mesh: dp4, Rank: rank, Step: step, Cursor: data.Cursor(8 * step), Source: src, World0: 2, ZeroGroup: 2}
	}
	zroots := Source{Kind: FromReplica, Roots: []int{0, 1}}
	zheld := func(stage, shard, applied int) Holding {
		return Holding{Part: stage, Applied: applied, Cursor: data.Cursor(8 * applied), World0: 2, ZeroGroup: 2, ZeroShard: shard}
	}
	held := func(stage, applied int) Holding {
		return Holding{Part: stage, Applied: applied, Cursor: data.Cursor(8 * applied), World0: 2}
	}
	cases := []struct {
		name  string
		h     Holding
		built int
		f     Form
		want  FormPlan
		err   error
	}{
		{"fresh start", NoHolding, -1, at(2, seed, 0),
			FormPlan{Build: 1, Root: -1, Next: held(1, 0)}, nil},
		{"the root serves its stage", held(0, 7), 0, at(0, roots, 7),
			FormPlan{Build: -1, Root: 0, Next: held(0, 7)}, nil},
		{"a replica behind takes the root's state", held(0, 5), 0, at(1, roots, 7),
			FormPlan{Build: -1, Root: 0, Next: held(0, 7)}, nil},
		{"a member moved to another stage rebuilds", held(0, 7), 0, at(2, roots, 7),
			FormPlan{Build: 1, Root: 3, Next: held(1, 7)}, nil},
		{"state ahead of a checkpoint restore is dropped", held(1, 9), 1, at(3, ckpt, 4),
			FormPlan{Drop: true, Build: -1, Restore: 4, Root: -1, Next: held(1, 4)}, nil},
		{"a torn step is rolled back", Holding{Part: 1, Applied: 8, Cursor: 64, Undo: true, UndoCursor: 56}, 1,
			Form{Generation: 3, Mesh: dp2pp2, Rank: 3, Step: 7, Cursor: 56, Source: roots, RollBack: true, World0: 2},
			FormPlan{RollBack: true, Build: -1, Root: 3, Next: held(1, 7)}, nil},
		{"standby keeps what it holds", held(0, 5), 0, Form{Generation: 3, Rank: -1, Step: 7, World0: 2},
			FormPlan{Build: -1, Root: -1, Next: held(0, 5)}, nil},
		{"standby ahead drops", held(0, 9), 0, Form{Generation: 3, Rank: -1, Step: 7, World0: 2},
			FormPlan{Drop: true, Build: -1, Root: -1, Next: Holding{Part: -1, World0: 2}}, nil},
		{"no copy to roll back", held(1, 8), 1, Form{Generation: 3, Mesh: dp2pp2, Rank: 3, Step: 7, RollBack: true, Source: roots},
			FormPlan{}, ErrNoState},
		{"a root that does not hold its stage", held(0, 5), 0, at(0, roots, 7), FormPlan{}, ErrNoState},
		{"a rank outside the mesh", NoHolding, -1, at(4, seed, 0), FormPlan{}, ErrConfig},
		// ZeRO shard groups of 2 in dp4: rank r holds shard r%2, the roots
		// are by slot (stage·2 + shard).
		{"a ZeRO shard's root serves it", zheld(0, 1, 7), 0, zat(1, zroots, 7),
			FormPlan{Build: -1, Root: 1, Next: zheld(0, 1, 7)}, nil},
		{"a replica of a ZeRO shard takes it from the root", NoHolding, -1, zat(3, zroots, 7),
			FormPlan{Build: 0, Root: 1, Next: zheld(0, 1, 7)}, nil},
		{"a member moved to the other shard takes it", zheld(0, 0, 7), 0, zat(3, zroots, 7),
			FormPlan{Build: -1, Root: 1, Next: zheld(0, 1, 7)}, nil},
		{"a root holding the other shard", zheld(0, 0, 7), 0, zat(1, zroots, 7), FormPlan{}, ErrNoState},
		{"a root holding the shard for another group size", Holding{Part: 0, Applied: 7, Cursor: 56, World0: 2, ZeroGroup: 4, ZeroShard: 1}, 0,
			zat(1, zroots, 7), FormPlan{}, ErrNoState},
		{"roots by part under ZeRO", NoHolding, -1, zat(1, Source{Kind: FromReplica, Roots: []int{0}}, 7), FormPlan{}, ErrConfig},
		{"a shard group that does not divide the replicas", NoHolding, -1,
			Form{Generation: 3, Mesh: dp4, Rank: 1, Step: 7, Source: seed, ZeroGroup: 3}, FormPlan{}, ErrConfig},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.h.Plan(tc.f, tc.built)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("plan %+v (%v),\nwant %+v", got, err, tc.want)
			}
		})
	}
}

// stateOf is every buffer of a worker's training state, on the host.
func stateOf(w *Worker) [][]float32 {
	var out [][]float32
	for _, b := range w.stateBufs() {
		h := make([]float32, b.Len())
		w.be.Download(h, b)
		out = append(out, h)
	}
	return out
}

func sameState(a, b [][]float32) bool {
	return slices.EqualFunc(a, b, func(x, y []float32) bool { return slices.Equal(x, y) })
}

// A generation forms from a surviving replica: the member that trained
// nothing takes the root's weights and optimizer state bit for bit, and
// the two then train in lockstep.
func TestFormFromReplica(t *testing.T) {
	s := mlpSetup(t)
	spec := s.spec(t, 1, 1, pipeline.Kind1F1B, false, 0)
	solo := newWorld(t, spec, 1)
	solo.losses(t, s, 3, s.batch)
	veteran := solo.workers[0]
	veteran.Close()
	newcomer, err := New(spec, cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	defer newcomer.Close()
	m, _ := mesh.Of(2, 1)
	f := Form{Generation: 2, Mesh: m, Step: 3, Cursor: data.Cursor(3 * s.batch), Source: Source{Kind: FromReplica, Roots: []int{0}}}
	net := formAll(t, f, []*Worker{veteran, newcomer})
	if !sameState(stateOf(veteran), stateOf(newcomer)) {
		t.Fatal("the newcomer's state differs from the root's")
	}
	if h := newcomer.Holding(); h.Part != 0 || h.Applied != 3 {
		t.Fatalf("newcomer holds %+v", h)
	}
	wd := &world{gen: 2, mesh: m, workers: []*Worker{veteran, newcomer}, net: net}
	if got := wd.losses(t, s, 5, s.batch); len(got) != 2 {
		t.Fatalf("trained %d more steps, want 2", len(got))
	}
}

// A pipeline stage undoes its last step exactly: weights, optimizer state,
// step and cursor come back bit for bit; it refuses to undo twice.
func TestFormRollsBackATornStep(t *testing.T) {
	s := mlpSetup(t)
	spec := s.spec(t, 2, 2, pipeline.Kind1F1B, false, 0)
	spec.KeepUndo = true
	wd := newWorld(t, spec, 1)
	wd.losses(t, s, 2, s.batch)
	stage1 := wd.workers[1]
	before, sum2 := stateOf(stage1), stage1.Checksum()
	if len(before) < 3 {
		t.Fatalf("the stage's state is %d buffers, want the weights and AdamW's two moments", len(before))
	}
	wd.losses(t, s, 3, s.batch) // step 3
	if h := stage1.Holding(); h.Applied != 3 || !h.Undo {
		t.Fatalf("after step 3 the stage holds %+v", h)
	}
	if got := stage1.UndoChecksum(); got != sum2 || got == stage1.Checksum() {
		t.Fatalf("after step 3 the undo checksum is %x, want step 2's %x (step 3's: %x)", got, sum2, stage1.Checksum())
	}
	for _, w := range wd.workers {
		w.Close()
	}
	one, _ := mesh.Of(1, 2)
	f := Form{Generation: 2, Mesh: one, Rank: -1, Step: 2, Cursor: data.Cursor(2 * s.batch), RollBack: true}
	if err := stage1.Form(context.Background(), f, nil); err != nil {
		t.Fatal(err)
	}
	if !sameState(before, stateOf(stage1)) {
		t.Fatal("the state after the undo differs from the state before step 3")
	}
	if h := stage1.Holding(); h.Applied != 2 || h.Cursor != data.Cursor(2*s.batch) || h.Undo {
		t.Fatalf("after the undo the stage holds %+v", h)
	}
	if stage1.Checksum() != sum2 || stage1.UndoChecksum() != 0 {
		t.Fatalf("after the undo the checksums are %x and (undo) %x, want %x and 0", stage1.Checksum(), stage1.UndoChecksum(), sum2)
	}
	if err := stage1.Form(context.Background(), Form{Generation: 3, Rank: -1, Step: 1, RollBack: true}, nil); !errors.Is(err, ErrNoState) {
		t.Fatalf("a second undo: %v", err)
	}
}

// A checkpoint written by a 2-stage world restores into a worker that
// holds the whole model (the stages resharded by name), which then holds
// the same weights.
func TestFormFromCheckpoint(t *testing.T) {
	s := gptSetup(t)
	dir := t.TempDir()
	spec := s.spec(t, 2, 2, pipeline.Kind1F1B, false, 0)
	spec.CkptDir = dir
	wd := newWorld(t, spec, 1)
	wd.losses(t, s, 2, s.batch)
	snap := &checkpoint.Snapshot{Meta: checkpoint.Meta{Step: 2, World: checkpoint.World{DP: 1, PP: 2}}}
	var whole []float32
	for _, w := range wd.workers {
		if err := w.Capture(snap); err != nil {
			t.Fatal(err)
		}
		ws, err := w.Weights(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		whole = append(whole, ws...)
	}
	if _, err := checkpoint.Save(checkpoint.OSFS{}, dir, snap, 0); err != nil {
		t.Fatal(err)
	}
	one := s.spec(t, 1, 1, pipeline.Kind1F1B, false, 0)
	one.CkptDir = dir
	w, err := New(one, cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	m, _ := mesh.Of(1, 1)
	if err := w.Form(context.Background(), Form{Generation: 1, Mesh: m, Step: 2, Source: Source{Kind: FromCheckpoint, Step: 2}}, nil); err != nil {
		t.Fatal(err)
	}
	if ws, _ := w.Weights(context.Background()); !slices.Equal(ws, whole) {
		t.Fatal("the restored weights differ from the stages' weights")
	}
	if err := w.Form(context.Background(), Form{Generation: 2, Mesh: m, Step: 9, Source: Source{Kind: FromCheckpoint, Step: 9}}, nil); err == nil {
		t.Fatal("a restore from a missing checkpoint succeeded")
	} else if h := w.Holding(); h.Part != -1 {
		t.Fatalf("after a failed restore the worker claims %+v", h)
	}
}

// formAll forms workers[r] at rank r of a generation over a fresh
// in-memory network (f's Rank set for each), all at once.
func formAll(t *testing.T, f Form, workers []*Worker) *collective.MemNetwork {
	t.Helper()
	net := collective.NewMemNetwork(len(workers))
	comms, err := net.Start(collective.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(net.Close)
	errs := make([]error, len(workers))
	var wg sync.WaitGroup
	for r, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := f
			f.Rank = r
			errs[r] = w.Form(context.Background(), f, comms[r])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return net
}

// ZeRO under elastic worlds: dp4 in shard groups of 2 loses rank 0. In
// the next dp4 world one survivor keeps its shard, one moves to the other
// shard and takes it from that shard's holder, and a newcomer takes its
// shard from a replica; then the world shrinks to dp2 on the survivors'
// shards as they are. Every generation's state is the replicas' bit for
// bit, and the losses are one worker's over all the steps (within 1e-4
// relative: float32 sums in another order, as for every world).
func TestZeroReformsFromShardReplicas(t *testing.T) {
	s := gptSetup(t)
	spec := s.spec(t, 1, 1, pipeline.Kind1F1B, false, 0)
	ref := newWorld(t, spec, 1).losses(t, s, 7, s.batch)
	for _, stage := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("zero%d", stage), func(t *testing.T) {
			zs := *spec
			zs.Zero, zs.ZeroGroup, zs.KeepUndo = stage, 2, true
			wd := newWorld(t, &zs, 4)
			got := wd.losses(t, s, 1, s.batch)
			sums := make([]uint64, 4)
			for i, w := range wd.workers {
				sums[i] = w.Checksum()
			}
			got = append(got, wd.losses(t, s, 2, s.batch)...)
			for i, w := range wd.workers {
				// With ZeRO-3 a worker's checksum is of the weights it owns.
				if u := w.UndoChecksum(); u != sums[i] {
					t.Fatalf("rank %d's undo checksum after step 2 is %x, want step 1's %x", i, u, sums[i])
				}
			}
			a, b, c, d := wd.workers[0], wd.workers[1], wd.workers[2], wd.workers[3]
			a.Close()
			newcomer, err := New(&zs, cpu.New(1))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(newcomer.Close)
			dp4, _ := mesh.Of(4, 1)
			// Ranks 0 and 2 hold shard 0, ranks 1 and 3 shard 1: b moves
			// to shard 0 (root c at rank 2), the newcomer takes shard 1
			// from d at rank 1.
			f := Form{Generation: 2, Mesh: dp4, Step: 2, Cursor: data.Cursor(2 * s.batch), ZeroGroup: 2,
				Source: Source{Kind: FromReplica, Roots: []int{2, 1}}}
			members := []*Worker{b, d, c, newcomer}
			wd = &world{gen: 2, mesh: dp4, workers: members, net: formAll(t, f, members)}
			if !sameState(stateOf(b), stateOf(c)) || !sameState(stateOf(newcomer), stateOf(d)) {
				t.Fatal("a member's shard differs from its root's after the generation formed")
			}
			if h := b.Holding(); h.ZeroShard != 0 || h.ZeroGroup != 2 || h.Applied != 2 {
				t.Fatalf("the member that moved holds %+v, want shard 0 of 2 at step 2", h)
			}
			got = append(got, wd.losses(t, s, 5, s.batch)...)
			dp2, _ := mesh.Of(2, 1)
			f = Form{Generation: 3, Mesh: dp2, Step: 5, Cursor: data.Cursor(5 * s.batch), ZeroGroup: 2,
				Source: Source{Kind: FromReplica, Roots: []int{0, 1}}}
			members = []*Worker{c, newcomer}
			wd = &world{gen: 3, mesh: dp2, workers: members, net: formAll(t, f, members)}
			got = append(got, wd.losses(t, s, 7, s.batch)...)
			for i := range ref {
				if math.Abs(got[i]-ref[i]) > 1e-4*math.Abs(ref[i]) {
					t.Errorf("step %d: loss %v, one worker %v", i+1, got[i], ref[i])
				}
			}
		})
	}
}

// killOnGather is a communicator that calls kill when armed and an
// all-gather starts: under ZeRO-1 that is the gather of the weights after
// the update, so the step fails with some shards updated.
type killOnGather struct {
	collective.Communicator
	kill  func()
	armed *atomic.Bool
}

func (c *killOnGather) AllGather(ctx context.Context, buf []float32) *collective.Handle {
	if c.armed.Load() {
		c.kill()
	}
	return c.Communicator.AllGather(ctx, buf)
}

func (c *killOnGather) Group(ranks []int) (collective.Communicator, error) {
	g, err := c.Communicator.Group(ranks)
	if err != nil {
		return nil, err
	}
	return &killOnGather{Communicator: g, kill: c.kill, armed: c.armed}, nil
}

// A ZeRO step that fails after its update (the weights' gather loses rank
// 1) is undone from the copy kept before it (Spec.KeepUndo, as agents
// keep): the state and the step count are as before the step, bit for
// bit. Without a copy the worker drops its torn state and holds nothing.
func TestZeroStepFailingAfterItsUpdateIsUndone(t *testing.T) {
	s := gptSetup(t)
	for _, keep := range []bool{true, false} {
		t.Run(fmt.Sprintf("keep-undo=%v", keep), func(t *testing.T) {
			spec := s.spec(t, 1, 1, pipeline.Kind1F1B, false, 0)
			spec.Zero, spec.KeepUndo = 1, keep
			var armed atomic.Bool
			var wd *world
			kill := func() { wd.net.Kill(1, true) }
			wd = newWrappedWorld(t, spec, 2, func(_ int, c collective.Communicator) collective.Communicator {
				return &killOnGather{Communicator: c, kill: kill, armed: &armed}
			})
			wd.losses(t, s, 1, s.batch)
			w := wd.workers[0]
			before := stateOf(w)
			armed.Store(true)
			_, errs := wd.step(s, 1, s.batch)
			if errs[0] == nil {
				t.Fatal("the step whose weight gather lost a peer succeeded")
			}
			h := w.Holding()
			if !keep {
				if h.Part != -1 {
					t.Fatalf("without an undo copy the worker holds %+v, want nothing", h)
				}
				return
			}
			if h.Applied != 1 || !sameState(before, stateOf(w)) {
				t.Fatalf("after the failed step the worker holds %+v; want step 1 with the state from before it (error %v)", h, errs[0])
			}
		})
	}
}

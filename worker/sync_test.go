package worker

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/pipeline"
)

// roundStep runs step i on every worker of wd, ending a round when round;
// every rank must succeed.
func (wd *world) roundStep(t *testing.T, s setup, i int, round bool) []StepResult {
	t.Helper()
	res, errs := wd.stepRound(s, i, s.batch, round)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("step %d rank %d: %v", i+1, r, err)
		}
	}
	return res
}

// Between rounds the replicas step alone and differ; a round makes them
// agree, sending only then.
func TestReplicasDifferBetweenRounds(t *testing.T) {
	s := gptSetup(t)
	for _, mode := range []SyncMode{SyncLocalSGD, SyncDiLoCo} {
		t.Run(mode.String(), func(t *testing.T) {
			spec := s.spec(t, 1, 1, pipeline.Kind1F1B, false, 0)
			spec.Sync = Sync{Mode: mode, OuterLR: 0.7, OuterMomentum: 0.9, OuterNesterov: true}
			wd := newWorld(t, spec, 3)
			res := wd.roundStep(t, s, 0, false)
			if res[0].Checksum == res[1].Checksum || res[0].SyncBytes != 0 {
				t.Fatalf("a step without a round: checksums %x and %x, %d bytes synchronised", res[0].Checksum, res[1].Checksum, res[0].SyncBytes)
			}
			res = wd.roundStep(t, s, 1, true)
			for r := range res {
				if res[r].Checksum != res[0].Checksum || res[r].SyncBytes == 0 {
					t.Fatalf("after a round rank %d has checksum %x (rank 0 %x) and sent %d bytes", r, res[r].Checksum, res[0].Checksum, res[r].SyncBytes)
				}
			}
		})
	}
}

// A round that a lost replica breaks fails the step and, with a copy
// kept, undoes its local update: the survivor holds the step before,
// ready to run the round again with the others.
func TestBrokenRoundIsUndone(t *testing.T) {
	s := gptSetup(t)
	spec := s.spec(t, 1, 1, pipeline.Kind1F1B, false, 0)
	spec.Sync, spec.KeepUndo = Sync{Mode: SyncDiLoCo, OuterLR: 0.7}, true
	wd := newWorld(t, spec, 2)
	wd.roundStep(t, s, 0, false)
	w := wd.workers[0]
	before := w.Checksum()
	wd.net.Kill(1, true)
	_, err := w.Step(context.Background(), StepRequest{Generation: 1, Step: 1, Cursor: data.Cursor(s.batch), Batch: s.batch, LR: 1e-2,
		GlobalTargets: s.globalTargets(s.batch), Round: true})
	if !errors.Is(err, collective.ErrPeerLost) && !errors.Is(err, collective.ErrAborted) {
		t.Fatalf("a round with a dead peer: %v", err)
	}
	if w.Checksum() != before || w.Holding().Applied != 1 {
		t.Fatalf("the broken round left checksum %x (before %x) and %d steps applied, want 1", w.Checksum(), before, w.Holding().Applied)
	}
}

// When a new generation forms mid-round, each surviving replica keeps
// its own progress; a joining worker takes the root replica's state and,
// under DiLoCo, starts from the global parameters (local SGD: from the
// root's). The next round averages over every member.
func TestNewGenerationKeepsRoundProgress(t *testing.T) {
	s := gptSetup(t)
	for _, mode := range []SyncMode{SyncLocalSGD, SyncDiLoCo} {
		t.Run(mode.String(), func(t *testing.T) {
			spec := s.spec(t, 1, 1, pipeline.Kind1F1B, false, 0)
			spec.Sync, spec.KeepUndo = Sync{Mode: mode, OuterLR: 0.7, OuterMomentum: 0.9}, true
			wd := newWorld(t, spec, 2)
			seed := wd.workers[0].Checksum() // the global parameters: no round yet
			wd.roundStep(t, s, 0, false)
			res := wd.roundStep(t, s, 1, false)
			if res[0].Checksum == res[1].Checksum {
				t.Fatal("the replicas agree without a round")
			}
			joiner, err := New(spec, cpu.New(1))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(joiner.Close)
			m, _ := mesh.New(3, 1, 1)
			net := collective.NewMemNetwork(3)
			comms, err := net.Start(collective.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(net.Close)
			workers := append(wd.workers, joiner)
			errs := make([]error, 3)
			var wg sync.WaitGroup
			for r, w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[r] = w.Form(context.Background(), Form{Generation: 2, Mesh: m, Rank: r, Step: 2, Cursor: data.Cursor(2 * s.batch),
						Source: Source{Kind: FromReplica, Roots: []int{0}}, World0: 2}, comms[r])
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("forming rank %d: %v", r, err)
				}
			}
			for r := range 2 {
				if got := workers[r].Checksum(); got != res[r].Checksum {
					t.Errorf("surviving rank %d's parameters changed in the transfer: %x, held %x", r, got, res[r].Checksum)
				}
			}
			want := res[0].Checksum
			if mode == SyncDiLoCo {
				want = seed
			}
			if got := joiner.Checksum(); got != want || joiner.Holding().Applied != 2 {
				t.Errorf("the joining worker holds %x at step %d, want %x at step 2", got, joiner.Holding().Applied, want)
			}
			wd = &world{gen: 2, mesh: m, workers: workers, net: net}
			res = wd.roundStep(t, s, 2, true)
			for r := range res {
				if res[r].Checksum != res[0].Checksum {
					t.Fatalf("after the round rank %d differs from rank 0", r)
				}
			}
		})
	}
}

// A round's step that the fp16 loss scaler skips (an inf on one rank)
// still ends the round: no replica applies its update, and the replicas
// agree afterwards.
func TestSkippedStepStillEndsTheRound(t *testing.T) {
	s := gptSetup(t)
	for _, mode := range []SyncMode{SyncLocalSGD, SyncDiLoCo} {
		t.Run(mode.String(), func(t *testing.T) {
			spec := s.spec(t, 1, 1, pipeline.Kind1F1B, false, 0)
			spec.Sync, spec.Precision = Sync{Mode: mode, OuterLR: 0.7, OuterMomentum: 0.9}, kernels.F16
			spec.Overflow = &Overflow{Rank: 1, Step: 2}
			wd := newWorld(t, spec, 2)
			for i, round := range []bool{false, true} {
				res := make([]StepResult, 2)
				errs := make([]error, 2)
				var wg sync.WaitGroup
				for r, w := range wd.workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						res[r], errs[r] = w.Step(context.Background(), StepRequest{Generation: 1, Step: i, Cursor: data.Cursor(i * s.batch),
							Batch: s.batch, LR: 1e-2, GlobalTargets: s.globalTargets(s.batch), Checksum: true, Round: round, LossScale: 1024})
					}()
				}
				wg.Wait()
				for r := range errs {
					if errs[r] != nil {
						t.Fatalf("step %d rank %d: %v", i+1, r, errs[r])
					}
				}
				if round && (!res[0].Skipped || !res[1].Skipped || res[0].Checksum != res[1].Checksum) {
					t.Errorf("the round's step: skipped %v/%v, checksums %x/%x; want skipped on both and equal", res[0].Skipped, res[1].Skipped, res[0].Checksum, res[1].Checksum)
				}
			}
		})
	}
}

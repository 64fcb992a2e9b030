package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/failure"
	"github.com/troupe-ml/troupe/safetensors"
	"github.com/troupe-ml/troupe/train"
	"github.com/troupe-ml/troupe/worker"
)

// Checkpoints: the job's rank 0 saves the replica every Config.CkptEvery
// steps through the checkpoint package's atomic commit, into an in-memory
// file system shared by the nodes (the job's checkpoint directory); a
// torn-write fault crashes the writer at one of the save's file-system
// operations and the storage with it (checkpoint.MemFS.CrashTorn: only
// synced bytes and entries are sure to survive, others at random).
const ckptDir = "ckpt"

// saveMsg asks rank 0 to save its replica, at step (its state includes
// step steps); savedMsg answers.
type (
	saveMsg struct {
		gen  uint64
		step int
	}
	savedMsg struct {
		gen  uint64
		step int
		err  error
	}
)

func (s *sim) latestCheckpoint() train.CheckpointInfo {
	if s.cfg.CkptEvery == 0 {
		return train.CheckpointInfo{Err: fmt.Errorf("%w: the job keeps none", checkpoint.ErrNoCheckpoint)}
	}
	ck, err := checkpoint.OpenLatest(s.fs, ckptDir)
	if err != nil {
		if !errors.Is(err, checkpoint.ErrNoCheckpoint) {
			s.check.fail(InvCheckpoint, "the latest checkpoint does not open: %v", err)
		}
		return train.CheckpointInfo{Err: err}
	}
	defer ck.Close()
	m := ck.Manifest
	return train.CheckpointInfo{Step: int(m.Step), Cursor: m.Sampler.Cursor}
}

// save writes the replica as the checkpoint of its step (the worker's
// checkpoint shard and the leader's commit, in one for a single part).
func (w *member) save(leader string, m saveMsg) {
	s := w.n.s
	reply := func(err error) { s.send(w.n.id, leader, savedMsg{gen: m.gen, step: m.step, err: err}) }
	if m.gen != w.gen || w.hold.Applied != m.step || w.hold.Part < 0 {
		reply(failure.Wrapf(failure.Stale, "%s holds step %d of generation %d, asked to save step %d of generation %d", w.n.id, w.hold.Applied, w.gen, m.step, m.gen))
		return
	}
	snap := &checkpoint.Snapshot{Meta: checkpoint.Meta{Step: int64(m.step), Generation: m.gen, World: checkpoint.World{DP: 1, PP: 1},
		Sampler: &data.SamplerState{N: s.cfg.Samples, Seed: samplerSeed, Shuffle: true, Cursor: w.hold.Cursor}}}
	for _, t := range []struct {
		name string
		v    []float32
	}{{"params", w.params}, {"momentum", w.moment}} {
		snap.Add(checkpoint.Tensor{TensorSpec: checkpoint.TensorSpec{Name: t.name, DType: safetensors.F32, Shape: []int{len(t.v)}}, Data: f32Bytes(t.v)})
	}
	var fsys checkpoint.FS = s.fs
	var tear *checkpoint.FaultFS
	if s.tearNext && !s.quiet() && s.spare(1) {
		s.tearNext = false
		tear = checkpoint.NewFaultFS(s.fs, checkpoint.Fault{Op: checkpoint.OpAny, N: 1 + s.rng.IntN(30), Mode: checkpoint.Crash, Torn: s.rng.IntN(64)})
		fsys = tear
	}
	_, err := checkpoint.Save(fsys, ckptDir, snap, 2)
	if tear != nil && tear.Crashed() {
		// The tear may come after the commit: then this save is the
		// latest, if the storage kept it.
		c := &s.check
		c.tornStep, c.torn = m.step, savedState{checksum: w.checksum(), history: slices.Clone(w.history)}
		// The writer dies at the tear, and the storage loses what it had
		// not synced.
		s.faults++
		s.tornWrites++
		s.tracef("FAULT torn checkpoint write of step %d: %s crashes at file-system operation %d", m.step, w.n.id, tear.Ops())
		s.fs = s.fs.CrashTorn(rand.New(rand.NewPCG(s.rng.Uint64(), 1)))
		s.crash(w.n)
		s.check.checkpointOpens()
		return
	}
	if err != nil && !errors.Is(err, checkpoint.ErrCommitted) {
		reply(failure.Wrapf(failure.Output, "checkpoint of step %d: %v", m.step, err))
		return
	}
	s.check.saved(m.step, w.checksum(), w.history)
	s.tracef("%s saved the checkpoint of step %d", w.n.id, m.step)
	reply(nil)
}

// restore loads the replica from the checkpoint of step.
func (w *member) restore(step int) error {
	s := w.n.s
	ck, err := checkpoint.Open(s.fs, ckptDir, int64(step))
	if err != nil {
		if latest, lerr := checkpoint.OpenLatest(s.fs, ckptDir); lerr == nil {
			newer := latest.Manifest.Step > int64(step)
			latest.Close()
			if newer && errors.Is(err, checkpoint.ErrNoCheckpoint) {
				// The form is stale: this worker hung (or its form was
				// delayed) through later generations, which trained and
				// saved checkpoints, and retention removed the chosen one.
				// Its generation is over, the leader no longer waits for
				// the answer, and the worker holds nothing until its next
				// form.
				return failure.Wrapf(failure.Stale, "the checkpoint of step %d was removed after later ones: %v", step, err)
			}
		}
		s.check.fail(InvCheckpoint, "%s cannot open the checkpoint of step %d the leader chose: %v", w.n.id, step, err)
		return err
	}
	defer ck.Close()
	var vals [2][]float32
	for i, name := range []string{"params", "momentum"} {
		t, err := ck.ReadTensor(name)
		if err == nil {
			vals[i], err = t.Float32()
		}
		if err != nil {
			s.check.fail(InvCheckpoint, "%s reading %s of checkpoint step %d: %v", w.n.id, name, step, err)
			return err
		}
	}
	w.params, w.moment, w.built = vals[0], vals[1], true
	s.restores++
	s.tracef("%s restored the checkpoint of step %d", w.n.id, step)
	w.history = s.check.restored(w, step)
	return nil
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// checkpoint invariants (InvCheckpoint).

// saved records a committed checkpoint: its state and the steps it holds.
func (c *checker) saved(step int, sum uint64, h []applied) {
	c.ckpts[step] = savedState{checksum: sum, history: slices.Clone(h)}
}

type savedState struct {
	checksum uint64
	history  []applied
}

// restored checks a replica restored from the checkpoint of step against
// what was saved, and gives the steps it holds.
func (c *checker) restored(w *member, step int) []applied {
	st, ok := c.ckpts[step]
	if !ok {
		c.fail(InvCheckpoint, "%s restored a checkpoint of step %d that no save committed", w.n.id, step)
		return nil
	}
	if sum := worker.Checksum(w.params); sum != st.checksum {
		c.fail(InvCheckpoint, "%s restored step %d with checksum %x, saved %x", w.n.id, step, sum, st.checksum)
	}
	return slices.Clone(st.history)
}

// checkpointOpens checks, after a torn write, that the latest checkpoint
// is one that was committed and opens whole.
func (c *checker) checkpointOpens() {
	s := c.s
	ck, err := checkpoint.OpenLatest(s.fs, ckptDir)
	if errors.Is(err, checkpoint.ErrNoCheckpoint) && len(c.ckpts) == 0 {
		return
	}
	if err != nil {
		c.fail(InvCheckpoint, "after a torn write the latest checkpoint does not open: %v", err)
		return
	}
	defer ck.Close()
	if step := int(ck.Manifest.Step); step == c.tornStep {
		c.ckpts[step] = c.torn
	}
	if _, ok := c.ckpts[int(ck.Manifest.Step)]; !ok {
		c.fail(InvCheckpoint, "after a torn write the latest checkpoint is step %d, which no save committed", ck.Manifest.Step)
		return
	}
	if err := ck.Verify(); err != nil {
		c.fail(InvCheckpoint, "after a torn write the latest checkpoint (step %d) is corrupt: %v", ck.Manifest.Step, err)
	}
}

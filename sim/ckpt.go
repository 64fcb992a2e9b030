package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/failure"
	"github.com/troupe-ml/troupe/safetensors"
	"github.com/troupe-ml/troupe/train/leader"
)

// Checkpoints: the job's rank 0 saves the replica every Config.CkptEvery
// steps through the checkpoint package's atomic commit, into an in-memory
// file system shared by the nodes (the job's checkpoint directory); a
// torn-write fault crashes the writer at one of the save's file-system
// operations and the storage with it (checkpoint.MemFS.CrashTorn: only
// synced bytes and entries are sure to survive, others at random). A model
// cut into parts is saved as the executor saves its shards: the leader
// begins the save (checkpoint.BeginSave), replica 0's rank of every part
// writes the part's shard (checkpoint.WriteShard), and the leader commits
// them once (BuildManifest, Commit); a torn write then crashes the leader
// in its commit.
const ckptDir = "ckpt"

// saveMsg asks rank 0 to save its replica, at step (its state includes
// step steps), or with tmp a part's rank to write its shard into the
// save's temporary directory; savedMsg answers (with the shard's
// checkpoint.Part, and for the checker the state written).
type (
	saveMsg struct {
		gen  uint64
		step int
		tmp  string
		// fs is the storage the save began in (s.fs then): a torn write
		// since crashed it, and the save's files may be gone.
		fs *checkpoint.MemFS
	}
	savedMsg struct {
		gen     uint64
		step    int
		err     error
		part    int
		written *checkpoint.Part
		state   savedState
	}
)

func (s *sim) latestCheckpoint() leader.Checkpoint {
	if s.cfg.CkptEvery == 0 {
		return leader.Checkpoint{Err: fmt.Errorf("%w: the job keeps none", checkpoint.ErrNoCheckpoint)}
	}
	ck, err := checkpoint.OpenLatest(s.fs, ckptDir)
	if err != nil {
		if !errors.Is(err, checkpoint.ErrNoCheckpoint) {
			s.check.fail(InvCheckpoint, "the latest checkpoint does not open: %v", err)
		}
		return leader.Checkpoint{Err: err}
	}
	defer ck.Close()
	m := ck.Manifest
	return leader.Checkpoint{Step: int(m.Step), Cursor: m.Sampler.Cursor}
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
	if m.tmp != "" {
		w.saveShard(leader, m)
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
		c.tornStep, c.torn = m.step, []savedState{{checksum: w.checksum(), history: slices.Clone(w.history)}}
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
	s.check.saved(m.step, []savedState{{checksum: w.checksum(), history: slices.Clone(w.history)}})
	s.tracef("%s saved the checkpoint of step %d", w.n.id, m.step)
	reply(nil)
}

// restore loads slot's state (its part's, without ZeRO) from the
// checkpoint of step.
func (w *member) restore(step, slot int) error {
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
		name = s.tensorName(name, slot)
		t, err := ck.ReadTensor(name)
		if err == nil {
			vals[i], err = t.Float32()
		}
		if err != nil {
			s.check.fail(InvCheckpoint, "%s reading %s of checkpoint step %d: %v", w.n.id, name, step, err)
			return err
		}
	}
	w.params, w.moment, w.builtPart = vals[0], vals[1], slot/max(1, s.cfg.zeroGroup())
	s.restores++
	s.tracef("%s restored the checkpoint of step %d", w.n.id, step)
	w.history = s.check.restored(w, step, slot)
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

// saved records a committed checkpoint: each part's state and the steps
// it holds.
func (c *checker) saved(step int, parts []savedState) {
	c.ckpts[step] = parts
}

type savedState struct {
	checksum uint64
	history  []applied
}

// restored checks a replica restored from the checkpoint of step against
// what was saved, and gives the steps it holds.
func (c *checker) restored(w *member, step, part int) []applied {
	parts, ok := c.ckpts[step]
	if !ok || part < 0 || part >= len(parts) {
		c.fail(InvCheckpoint, "%s restored part %d of a checkpoint of step %d that no save committed", w.n.id, part, step)
		return nil
	}
	st := parts[part]
	if sum := c.s.stateSum(w.params, w.moment); sum != st.checksum {
		c.fail(InvCheckpoint, "%s restored part %d of step %d with checksum %x, saved %x", w.n.id, part, step, sum, st.checksum)
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

// tensorName is the checkpoint tensor holding name ("params",
// "momentum") of part: the name itself for a model in one part, else
// "<name>.p<part>".
//
// With ZeRO it is "<name>.s<slot>", the state a slot holds (its part's
// parameters, at ZeRO-3 their shard, and the momentum's shard).
func (s *sim) tensorName(name string, slot int) string {
	switch {
	case s.cfg.Zero > 0:
		return fmt.Sprintf("%s.s%d", name, slot)
	case s.cfg.parts() == 1:
		return name
	}
	return fmt.Sprintf("%s.p%d", name, slot)
}

// ckptWorld is the world that writes a checkpoint of a model in parts:
// one rank (replica 0's) of each part.
func (s *sim) ckptWorld() checkpoint.World {
	pp, tp, dp := max(1, s.cfg.PP), max(1, s.cfg.TP), max(1, s.cfg.zeroGroup())
	return checkpoint.World{DP: dp, PP: pp, TP: tp, Size: pp * tp * dp}
}

// saveShard writes the worker's part as its shard of the save in m.tmp
// (the executor's per-rank write) and reports the shard to the leader.
func (w *member) saveShard(leader string, m saveMsg) {
	s := w.n.s
	part, tp, zg := w.hold.Part, max(1, s.cfg.TP), max(1, s.cfg.zeroGroup())
	stage, slot := part/tp, w.hold.Part*zg+w.hold.ZeroShard
	// Every rank of a stage lists the stage's tensors (each slot's); it
	// writes its own. With ZeRO the shard group's rank z is the world's
	// data-parallel rank z.
	var specs []checkpoint.TensorSpec
	sizes := func(sl int) [2]int {
		if s.cfg.Zero == 0 {
			n := len(s.partIdx[sl])
			return [2]int{n, n}
		}
		lo, hi := s.shardRange(sl/zg, sl%zg)
		if s.cfg.Zero == 3 {
			return [2]int{hi - lo, hi - lo}
		}
		return [2]int{len(s.partIdx[sl/zg]), hi - lo}
	}
	for t := range tp {
		for z := range zg {
			sl := (stage*tp+t)*zg + z
			for i, name := range []string{"params", "momentum"} {
				specs = append(specs, checkpoint.TensorSpec{Name: s.tensorName(name, sl), DType: safetensors.F32, Shape: []int{sizes(sl)[i]}, Stage: stage})
			}
		}
	}
	t, k := part%tp, 2*(part%tp*zg+w.hold.ZeroShard)
	r := checkpoint.RankShard{World: s.ckptWorld(), Step: int64(m.step), Stage: stage, TPRank: t, DPRank: w.hold.ZeroShard, Specs: specs,
		Slices: []checkpoint.ShardSlice{
			{Tensor: k, Offsets: []int{0}, Sizes: []int{len(w.params)}, Data: f32Bytes(w.params)},
			{Tensor: k + 1, Offsets: []int{0}, Sizes: []int{len(w.moment)}, Data: f32Bytes(w.moment)},
		}}
	msg := savedMsg{gen: m.gen, step: m.step, part: slot, state: savedState{checksum: w.stateSum(), history: slices.Clone(w.history)}}
	if m.fs != s.fs {
		msg.err = storageCrashed(m.step)
		s.send(w.n.id, leader, msg)
		return
	}
	p, err := checkpoint.WriteShard(s.fs, filepath.Join(ckptDir, m.tmp), r)
	if err != nil {
		msg.err = failure.Wrapf(failure.Output, "checkpoint of step %d, part %d: %v", m.step, part, err)
	}
	msg.written = p
	s.send(w.n.id, leader, msg)
}

// storageCrashed is the failure of a save of a model in parts that a torn
// write crashed the storage under, between its begin and its commit: the
// files it wrote that were not yet synced into their directory may be
// gone. The save is abandoned as aborted (transient): the leader core
// starts a new generation, which saves again. (The real checkpointer's
// commit would find a shard missing, checkpoint.ErrCorrupt, which is
// permanent; the simulator's storage crash, shared by every node, is
// harsher than a writer's own crash, which is what tears a real save.)
func storageCrashed(step int) error {
	return failure.Wrapf(failure.Aborted, "checkpoint of step %d: the storage crashed while its shards were written", step)
}

// commitShards commits the save in tmp once every part's shard is written
// (the leader's checkpointer.saveShards): the manifest, then the atomic
// commit. The save may be torn: the leader then crashes in the commit.
// done: the checkpoint is committed (or was already).
func (l *leaderShell) commitShards(lp *stepLoop) (done bool, err error) {
	n, s := l.n, l.n.s
	parts := make([]*checkpoint.Part, len(lp.shards))
	states := make([]savedState, len(lp.shards))
	for i, m := range lp.shards {
		parts[i], states[i] = m.written, m.state
	}
	meta := checkpoint.Meta{Step: int64(lp.step), Generation: lp.gen, World: s.ckptWorld(),
		Sampler: &data.SamplerState{N: s.cfg.Samples, Seed: samplerSeed, Shuffle: true, Cursor: data.Cursor(lp.cursor)}}
	if lp.fs != s.fs {
		return false, storageCrashed(lp.step)
	}
	man, err := checkpoint.BuildManifest(meta, parts)
	if err != nil {
		return false, failure.Wrapf(failure.Output, "checkpoint of step %d: %v", lp.step, err)
	}
	var fsys checkpoint.FS = s.fs
	var tear *checkpoint.FaultFS
	if s.tearNext && !s.quiet() && s.spare(1) {
		s.tearNext = false
		tear = checkpoint.NewFaultFS(s.fs, checkpoint.Fault{Op: checkpoint.OpAny, N: 1 + s.rng.IntN(12), Mode: checkpoint.Crash, Torn: s.rng.IntN(64)})
		fsys = tear
	}
	err = checkpoint.Commit(fsys, ckptDir, lp.tmp, man, checkpoint.CommitOptions{Keep: 2})
	if tear != nil && tear.Crashed() {
		c := &s.check
		c.tornStep, c.torn = lp.step, states
		s.faults++
		s.tornWrites++
		s.tracef("FAULT torn checkpoint commit of step %d: %s crashes at file-system operation %d", lp.step, n.id, tear.Ops())
		s.fs = s.fs.CrashTorn(rand.New(rand.NewPCG(s.rng.Uint64(), 1)))
		s.crash(n)
		s.check.checkpointOpens()
		return false, nil
	}
	if errors.Is(err, checkpoint.ErrCommitted) {
		// Another generation's leader committed this step first (its
		// bits may differ: another number of replicas), and that one
		// stays.
		s.tracef("%s: the checkpoint of step %d was committed by another leader", n.id, lp.step)
		return true, nil
	}
	if _, serr := s.fs.Stat(filepath.Join(ckptDir, lp.tmp)); err != nil && serr != nil {
		// Its temporary directory is gone: a later generation's commit
		// removed it as a leftover while this leader hung between the
		// shards and the commit. The save is superseded, not failed.
		return false, failure.Wrapf(failure.Stale, "checkpoint of step %d: a later commit removed its temporary directory: %v", lp.step, err)
	}
	if err != nil && !errors.Is(err, checkpoint.ErrPrune) {
		return false, failure.Wrapf(failure.Output, "checkpoint of step %d: %v", lp.step, err)
	}
	s.check.saved(lp.step, states)
	s.tracef("%s committed the checkpoint of step %d (%d parts)", n.id, lp.step, len(parts))
	return true, nil
}

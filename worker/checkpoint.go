package worker

import (
	"fmt"
	"path/filepath"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/nn/optim"
)

// Capture adds what this worker contributes to a checkpoint written from
// this process: replica 0 of its part (a stage, or a tensor-parallel shard
// of one) adds the weights and the optimizer state; with ZeRO each rank of
// the first shard group adds its shard of the optimizer state. Other ranks
// add nothing. Call it on every rank.
func (w *Worker) Capture(snap *checkpoint.Snapshot) error {
	st, err := w.heldStage()
	if err != nil {
		return err
	}
	o, ok := w.partOptions(false)
	if !ok {
		return nil
	}
	return snap.AddPart(st, w.model, w.opt, o)
}

// partOptions says what this rank writes of its part: with every, each
// data-parallel rank adds the weights (they are partitioned among the
// part's ranks), else replica 0 does; the ZeRO shard of the optimizer
// state goes with the rank that holds it in the first shard group, and
// when the replicas synchronise in rounds replica 0's whole. ok is false
// when the rank adds nothing.
func (w *Worker) partOptions(every bool) (o checkpoint.PartOptions, ok bool) {
	d := w.st.coord.DP
	o = checkpoint.PartOptions{Weights: every || d == 0, Owner: -1}
	if z := w.st.zero; z != nil && d < z.S {
		o.Owner = d
	}
	if w.spec.Sync.Local() && d == 0 {
		o.Owner = 0 // replica 0's optimizer state, whole (see rounds)
	}
	if g := w.zeroWeights(); g != nil && w.model.Set.Weights() == nil {
		// ZeRO-3: the weights are sharded like the optimizer state.
		o.Weights, o.OwnedWeights = false, &optim.State{Buf: g.owned, Ranges: w.st.zero.sorted}
	}
	return o, o.Weights || o.Owner >= 0
}

// heldStage is the pipeline stage of the part the worker holds, for a
// checkpoint.
func (w *Worker) heldStage() (int, error) {
	if w.st == nil || w.hold.Part < 0 {
		return 0, fmt.Errorf("%w: no stage to checkpoint", ErrNoState)
	}
	return w.hold.Part / w.spec.TPSize(), nil
}

// SaveShard writes this worker's share of a checkpoint into dir/tmp: its
// part's tensors (a tensor-parallel shard's blocks of them), split among
// the part's data-parallel ranks, and its part manifest. meta's World is the generation's. It returns the bytes of
// the stage's state.
func (w *Worker) SaveShard(meta checkpoint.Meta, dir, tmp string) (int64, error) {
	st, err := w.heldStage()
	if err != nil {
		return 0, err
	}
	if meta.World.DP != w.mesh.DP || meta.World.PP != w.mesh.PP || meta.World.TPSize() != w.mesh.TP {
		return 0, fmt.Errorf("%w: a checkpoint of a %v world from a worker of a %v world", ErrConfig, meta.World, w.mesh)
	}
	snap := &checkpoint.Snapshot{Meta: meta}
	o, _ := w.partOptions(true)
	if err := snap.AddPart(st, w.model, w.opt, o); err != nil {
		return 0, err
	}
	shard, err := snap.Shard(st, w.st.coord.DP, w.st.coord.TP)
	if err != nil {
		return 0, err
	}
	fsys := checkpoint.OSFS{}
	path := filepath.Join(dir, tmp)
	part, err := checkpoint.WriteShard(fsys, path, shard)
	if err != nil {
		return 0, err
	}
	if err := checkpoint.WritePart(fsys, path, part); err != nil {
		return 0, err
	}
	return snap.Bytes(), nil
}

package worker

import (
	"fmt"
	"path/filepath"

	"github.com/troupe-ml/troupe/checkpoint"
)

// Capture adds the part the worker holds (a stage, or a tensor-parallel
// shard of one: weights and optimizer state) to snap, for a checkpoint
// written from this process.
func (w *Worker) Capture(snap *checkpoint.Snapshot) error {
	st, err := w.heldStage()
	if err != nil {
		return err
	}
	return snap.AddStage(st, w.model, w.opt)
}

// heldStage is the pipeline stage of the part the worker holds, for a
// checkpoint.
func (w *Worker) heldStage() (int, error) {
	if w.st == nil || w.hold.Part < 0 {
		return 0, fmt.Errorf("%w: no stage to checkpoint", ErrNoState)
	}
	return w.hold.Part / w.spec.Shards(), nil
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
	if meta.World.DP != w.mesh.DP || meta.World.PP != w.mesh.PP || meta.World.Shards() != w.mesh.TP {
		return 0, fmt.Errorf("%w: a checkpoint of a %v world from a worker of a %v world", ErrConfig, meta.World, w.mesh)
	}
	snap := &checkpoint.Snapshot{Meta: meta}
	if err := snap.AddStage(st, w.model, w.opt); err != nil {
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

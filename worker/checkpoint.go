package worker

import (
	"fmt"
	"path/filepath"

	"github.com/troupe-ml/troupe/checkpoint"
)

// Capture adds the stage the worker holds (weights and optimizer state) to
// snap, for a checkpoint written from this process.
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
	switch {
	case w.st == nil || w.hold.Part < 0:
		return 0, fmt.Errorf("%w: no stage to checkpoint", ErrNoState)
	case w.spec.Shards() > 1:
		return 0, fmt.Errorf("%w: checkpoints of tensor-parallel shards are not written yet", ErrConfig)
	}
	return w.hold.Part, nil
}

// SaveShard writes this worker's share of a checkpoint into dir/tmp: its
// stage's tensors, split among the stage's data-parallel ranks, and its
// part manifest. meta's World is the generation's. It returns the bytes of
// the stage's state.
func (w *Worker) SaveShard(meta checkpoint.Meta, dir, tmp string) (int64, error) {
	st, err := w.heldStage()
	if err != nil {
		return 0, err
	}
	if meta.World.DP != w.mesh.DP || meta.World.PP != w.mesh.PP {
		return 0, fmt.Errorf("%w: a checkpoint of a %v world from a worker of a %v world", ErrConfig, meta.World, w.mesh)
	}
	snap := &checkpoint.Snapshot{Meta: meta}
	if err := snap.AddStage(st, w.model, w.opt); err != nil {
		return 0, err
	}
	shard, err := snap.Shard(st, w.st.coord.DP)
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

package worker

import (
	"fmt"
	"path/filepath"

	"github.com/troupe-ml/troupe/checkpoint"
)

// Capture adds the stage the worker holds (weights and optimizer state) to
// snap, for a checkpoint written from this process.
func (w *Worker) Capture(snap *checkpoint.Snapshot) error {
	if w.st == nil || w.hold.Stage < 0 {
		return fmt.Errorf("%w: no stage to checkpoint", ErrNoState)
	}
	return snap.AddStage(w.hold.Stage, w.model, w.opt)
}

// SaveShard writes this worker's share of a checkpoint into dir/tmp: its
// stage's tensors, split among the stage's data-parallel ranks, and its
// part manifest. meta's World is the generation's. It returns the bytes of
// the stage's state.
func (w *Worker) SaveShard(meta checkpoint.Meta, dir, tmp string) (int64, error) {
	if w.st == nil || w.hold.Stage < 0 {
		return 0, fmt.Errorf("%w: no stage to checkpoint", ErrNoState)
	}
	if meta.World.DP != w.mesh.DP || meta.World.PP != w.mesh.PP {
		return 0, fmt.Errorf("%w: a checkpoint of a %v world from a worker of a %v world", ErrConfig, meta.World, w.mesh)
	}
	snap := &checkpoint.Snapshot{Meta: meta}
	if err := snap.AddStage(w.hold.Stage, w.model, w.opt); err != nil {
		return 0, err
	}
	shard, err := snap.Shard(w.hold.Stage, w.st.coord.DP)
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

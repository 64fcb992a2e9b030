package checkpoint

import (
	"errors"
	"path/filepath"
)

// Save writes snap as the checkpoint of step snap.Meta.Step in dir and
// commits it, the way a world of snap.Meta.World ranks would: the
// snapshot is split among the ranks (Partition), each rank's shard file is
// written and synced into a fresh temporary directory, the parts are merged
// into the manifest, and Commit makes it the latest and prunes beyond keep
// checkpoints (0 keeps all). Files are written one after another, so the
// order of file-system operations is deterministic (crash tests count on
// it).
//
// It returns the committed manifest. ErrCommitted means the step is already
// the latest checkpoint and nothing was written; an error wrapping ErrPrune
// means the checkpoint is committed but pruning failed. On any other error
// the previous checkpoint is still the latest, and the temporary directory
// is removed when the file system allows (a later commit removes what a
// crash leaves).
func Save(fsys FS, dir string, snap *Snapshot, keep int) (*Manifest, error) {
	shards, err := snap.Shards()
	if err != nil {
		return nil, err
	}
	tmp, err := BeginSave(fsys, dir, snap.Meta.Step)
	if err != nil {
		return nil, err
	}
	m, err := saveIn(fsys, dir, tmp, snap.Meta, shards, keep)
	if err != nil && !errors.Is(err, ErrPrune) {
		_ = fsys.RemoveAll(filepath.Join(dir, tmp)) // best effort; the next commit prunes leftovers
		return nil, err
	}
	return m, err
}

func saveIn(fsys FS, dir, tmp string, meta Meta, shards []RankShard, keep int) (*Manifest, error) {
	tmpPath := filepath.Join(dir, tmp)
	parts := make([]*Part, len(shards))
	for i, sh := range shards {
		p, err := WriteShard(fsys, tmpPath, sh)
		if err != nil {
			return nil, err
		}
		parts[i] = p
	}
	m, err := BuildManifest(meta, parts)
	if err != nil {
		return nil, err
	}
	if err := Commit(fsys, dir, tmp, m, CommitOptions{Keep: keep}); err != nil {
		return m, err
	}
	return m, nil
}

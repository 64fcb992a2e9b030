package train

import (
	"context"
	"time"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// saver writes a checkpoint of an executor's workers (groupExecutor.Save)
// and returns how long training paused for it. How depends on where the
// workers live, which their launcher knows: it picks the saver once, when
// it builds the executor.
type saver interface {
	save(ctx context.Context, e *groupExecutor, meta checkpoint.Meta) (time.Duration, error)
}

var (
	_ saver = noSaver{}
	_ saver = captureSaver{}
	_ saver = shardSaver{}
)

// noSaver is the saver of a run without a checkpoint directory.
type noSaver struct{}

func (noSaver) save(context.Context, *groupExecutor, checkpoint.Meta) (time.Duration, error) {
	return 0, errNoCheckpointDir
}

// captureSaver checkpoints workers that are actors of this process: their
// state is captured at the step boundary (by pointer) and written in the
// background.
type captureSaver struct{ ck *checkpointer }

// capturing is the saver of in-process workers into ck (none: noSaver).
func capturing(ck *checkpointer) saver {
	if ck == nil {
		return noSaver{}
	}
	return captureSaver{ck}
}

func (s captureSaver) save(ctx context.Context, e *groupExecutor, meta checkpoint.Meta) (time.Duration, error) {
	return s.ck.saveAsync(meta, func(snap *checkpoint.Snapshot) error {
		// Every rank is asked; each adds what it writes (replica 0 the
		// weights, ZeRO shards their optimizer state).
		for r := range e.mesh.Size() {
			p := e.peers[r]
			msgs := make([]any, e.size)
			msgs[p] = &worker.CaptureRequest{Peer: uint32(p), Snap: snap}
			if _, err := e.call(ctx, msgs); err != nil {
				return err
			}
		}
		return nil
	})
}

// shardSaver checkpoints workers in other processes: every rank writes its
// shard into the checkpoint's temporary directory and this process
// commits it.
type shardSaver struct{ ck *checkpointer }

// sharding is the saver of workers elsewhere into ck (none: noSaver).
func sharding(ck *checkpointer) saver {
	if ck == nil {
		return noSaver{}
	}
	return shardSaver{ck}
}

func (s shardSaver) save(ctx context.Context, e *groupExecutor, meta checkpoint.Meta) (time.Duration, error) {
	return s.ck.saveShards(meta, func(meta []byte, tmp string) (int64, error) {
		replies, err := e.call(ctx, e.byRank(func(_ int, p uint32) any {
			return &workerpb.SaveShard{Peer: p, Generation: e.gen, Dir: s.ck.dir, Tmp: tmp, Meta: meta}
		}))
		var n int64
		for _, r := range replies {
			if s, ok := r.(*workerpb.ShardSaved); ok {
				n += int64(s.Bytes)
			}
		}
		return n, err
	})
}

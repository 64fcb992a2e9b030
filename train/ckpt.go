package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/actors/actorspb"
	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
)

// stateHolder is an engine whose replica-0 state this process can read
// between steps (one process: a single worker, or worker actors here).
type stateHolder interface {
	// capture adds every stage of one replica to s.
	capture(s *checkpoint.Snapshot) error
}

// shardWriter is an engine whose ranks write their own checkpoint shards
// (worker processes).
type shardWriter interface {
	saveShards(step int64, dir, tmp string, meta []byte) (int64, error)
}

// checkpointer saves the run's state every CkptEvery steps into CkptDir:
// asynchronously when the state is in this process (a snapshot at the step
// boundary, written in the background, never two writes at once), else by
// every rank writing its shard and this process committing.
type checkpointer struct {
	cfg   *Config
	fsys  checkpoint.FS
	saver *checkpoint.AsyncSaver
	log   *zap.Logger
	conf  json.RawMessage
}

// newCheckpointer saves asynchronously from snapshots of this process's
// state when async is set, else through the ranks' own shard writes.
func newCheckpointer(cfg *Config, async bool, log *zap.Logger) (*checkpointer, error) {
	if cfg.CkptDir == "" {
		return nil, nil
	}
	conf, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	c := &checkpointer{cfg: cfg, fsys: checkpoint.OSFS{}, log: log, conf: conf}
	if async {
		c.saver, err = checkpoint.NewAsyncSaver(c.fsys, checkpoint.SaverConfig{Dir: cfg.CkptDir, Keep: cfg.Keep},
			checkpoint.WithOnWritten(func(r checkpoint.WriteResult) {
				if r.Err != nil {
					log.Error("checkpoint write failed", zap.Int64("step", r.Step), zap.Error(r.Err))
					return
				}
				log.Info("checkpoint written", zap.Int64("step", r.Step), zap.Int64("bytes", r.Bytes),
					zap.Float64("write_gb_per_s", r.GBps()))
			}))
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

// meta is the training state a checkpoint after step carries.
func (c *checkpointer) meta(step int, gen uint64, s *data.Sampler, sched optim.Schedule) checkpoint.Meta {
	st := s.State()
	return checkpoint.Meta{
		Step: int64(step), Generation: gen,
		World:    checkpoint.World{DP: c.cfg.DP, PP: c.cfg.PP},
		Sampler:  &st,
		Schedule: checkpoint.ScheduleStateOf(sched, int64(step)),
		Config:   c.conf,
	}
}

// save checkpoints the state after step (steps done), read from src (a
// stateHolder when asynchronous, else a shardWriter), and returns how long
// the training loop paused for it.
func (c *checkpointer) save(src any, meta checkpoint.Meta) (time.Duration, error) {
	if c.saver != nil {
		st, err := c.saver.Save(func(s *checkpoint.Snapshot) error {
			s.Meta = meta
			return src.(stateHolder).capture(s)
		})
		if err != nil {
			return st.Pause(), fmt.Errorf("train: checkpoint at step %d: %w", meta.Step, err)
		}
		return st.Pause(), nil
	}
	start := time.Now()
	sw, ok := src.(shardWriter)
	if !ok {
		return 0, errors.New("train: this world cannot write checkpoints")
	}
	tmp, err := checkpoint.BeginSave(c.fsys, c.cfg.CkptDir, meta.Step)
	if errors.Is(err, checkpoint.ErrCommitted) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	// The workers hold the optimizers; this process describes theirs: the
	// same configuration, one update per step.
	o, err := optim.New(nn.NewParamSet(cpu.New(1), 0), c.cfg.Optim)
	if err != nil {
		return 0, err
	}
	meta.Optimizer = checkpoint.OptimizerStateOf(o)
	meta.Optimizer.Steps = meta.Step
	mj, err := json.Marshal(meta)
	if err != nil {
		return 0, err
	}
	n, err := sw.saveShards(meta.Step, c.cfg.CkptDir, tmp, mj)
	if err != nil {
		return time.Since(start), fmt.Errorf("train: checkpoint at step %d: %w", meta.Step, err)
	}
	parts, err := checkpoint.ReadParts(c.fsys, c.cfg.CkptDir+"/"+tmp)
	if err != nil {
		return time.Since(start), err
	}
	// Every rank of a stage used the same optimizer: the first part's
	// optimizer state describes them all.
	m, err := checkpoint.BuildManifest(meta, parts)
	if err != nil {
		return time.Since(start), err
	}
	if err := checkpoint.Commit(c.fsys, c.cfg.CkptDir, tmp, m, checkpoint.CommitOptions{Keep: c.cfg.Keep}); err != nil && !errors.Is(err, checkpoint.ErrPrune) {
		return time.Since(start), err
	}
	pause := time.Since(start)
	c.log.Info("checkpoint written", zap.Int64("step", meta.Step), zap.Int64("bytes", n),
		zap.Float64("write_gb_per_s", float64(n)/pause.Seconds()/1e9))
	return pause, nil
}

// close waits for the last write and reports its error.
func (c *checkpointer) close() error {
	if c == nil || c.saver == nil {
		return nil
	}
	return c.saver.Close()
}

// resumePoint opens the latest checkpoint of cfg.CkptDir for --resume: the
// step to start from and the sampler state, or step 0 and nil when there is
// none. It sets cfg.ResumeFrom so that every worker restores its part.
func resumePoint(cfg *Config, log *zap.Logger) (int, *data.SamplerState, error) {
	ck, err := checkpoint.OpenLatest(checkpoint.OSFS{}, cfg.CkptDir)
	if errors.Is(err, checkpoint.ErrNoCheckpoint) {
		log.Info("--resume: no checkpoint in --ckpt-dir, starting from scratch", zap.String("dir", cfg.CkptDir))
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, fmt.Errorf("train: --resume: %w", err)
	}
	defer ck.Close()
	m := ck.Manifest
	if m.Sampler == nil {
		return 0, nil, fmt.Errorf("train: --resume: checkpoint step %d has no sampler state", m.Step)
	}
	cfg.ResumeFrom = m.Step
	log.Info("resuming", zap.String("dir", cfg.CkptDir), zap.Int64("step", m.Step), zap.Stringer("written_by", m.World),
		zap.Uint64("generation", m.Generation))
	return int(m.Step), m.Sampler, nil
}

// restore loads a worker's model part and optimizer from cfg.ResumeFrom.
func restore(cfg *Config, m *nn.Model, opt optim.Optimizer) error {
	if cfg.ResumeFrom <= 0 {
		return nil
	}
	ck, err := checkpoint.Open(checkpoint.OSFS{}, cfg.CkptDir, cfg.ResumeFrom)
	if err != nil {
		return fmt.Errorf("train: --resume: %w", err)
	}
	defer ck.Close()
	if err := ck.Restore(m.Set, opt); err != nil {
		return fmt.Errorf("train: --resume from step %d: %w", cfg.ResumeFrom, err)
	}
	return nil
}

func (e *singleEngine) capture(s *checkpoint.Snapshot) error {
	return s.AddStage(0, e.r.Model, e.r.Opt)
}

func (e *dpEngine) capture(s *checkpoint.Snapshot) error {
	if e.local == nil {
		return errors.New("train: the workers are in other processes")
	}
	for st, w := range e.local {
		m, opt := w.State()
		if err := s.AddStage(st, m, opt); err != nil {
			return err
		}
	}
	return nil
}

func (e *dpEngine) saveShards(step int64, dir, tmp string, meta []byte) (int64, error) {
	return callShards(e.call).saveShards(step, dir, tmp, meta)
}

// callShards is a shardWriter through a Coordinator that the function
// reaches: the world's ranks write their shards (worker processes, or the
// agents of an elastic job).
type callShards func(any) (any, error)

func (call callShards) saveShards(step int64, dir, tmp string, meta []byte) (int64, error) {
	res, err := call(&actors.SaveCall{Req: &actorspb.SaveShard{Step: uint64(step), Dir: dir, Tmp: tmp, Meta: meta}})
	if err != nil {
		return 0, err
	}
	rep := res.(*actors.SaveReport)
	return rep.Bytes, rep.Err
}

var (
	_ stateHolder = (*singleEngine)(nil)
	_ stateHolder = (*dpEngine)(nil)
	_ shardWriter = (*dpEngine)(nil)
	_ shardWriter = callShards(nil)
)

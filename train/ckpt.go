package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
)

// checkpointer saves a run's state into its checkpoint directory: from a
// snapshot of workers in this process, written in the background (never
// two writes at once), or by every rank writing its shard and this
// process committing.
type checkpointer struct {
	dir   string
	keep  int
	fsys  checkpoint.FS
	optim optim.Config
	conf  json.RawMessage
	log   *zap.Logger
	saver *checkpoint.AsyncSaver // made by the first asynchronous save
	// prom records every write (nil: none).
	prom *promMetrics
}

// setObserver has every checkpoint write recorded in p (c may be nil: no
// checkpoints).
func (c *checkpointer) setObserver(p *promMetrics) {
	if c != nil {
		c.prom = p
	}
}

// newCheckpointer is nil when cfg has no checkpoint directory.
func newCheckpointer(cfg *Config, log *zap.Logger) (*checkpointer, error) {
	if cfg.CkptDir == "" {
		return nil, nil
	}
	conf, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return &checkpointer{dir: cfg.CkptDir, keep: cfg.Keep, fsys: checkpoint.OSFS{}, optim: cfg.Optim, conf: conf, log: log}, nil
}

// meta is the training state a checkpoint after step carries (the
// executor adds the world).
func (c *checkpointer) meta(step int, gen uint64, sampler data.SamplerState, sched optim.Schedule) checkpoint.Meta {
	return checkpoint.Meta{Step: int64(step), Generation: gen, Sampler: &sampler,
		Schedule: checkpoint.ScheduleStateOf(sched, int64(step)), Config: c.conf}
}

// saveAsync snapshots the state with capture now and writes it in the
// background; it returns how long training paused.
func (c *checkpointer) saveAsync(meta checkpoint.Meta, capture func(*checkpoint.Snapshot) error) (time.Duration, error) {
	if c.saver == nil {
		var err error
		c.saver, err = checkpoint.NewAsyncSaver(c.fsys, checkpoint.SaverConfig{Dir: c.dir, Keep: c.keep},
			checkpoint.WithOnWritten(func(r checkpoint.WriteResult) {
				c.prom.observeCheckpoint(r.Bytes, r.Duration, r.Err)
				if r.Err != nil {
					c.log.Error("checkpoint write failed", zap.Int64("step", r.Step), zap.Error(r.Err))
					return
				}
				c.log.Info("checkpoint written", zap.Int64("step", r.Step), zap.Int64("bytes", r.Bytes),
					zap.Float64("write_gb_per_s", r.GBps()))
			}))
		if err != nil {
			return 0, err
		}
	}
	st, err := c.saver.Save(func(s *checkpoint.Snapshot) error {
		s.Meta = meta
		return capture(s)
	})
	if errors.Is(err, checkpoint.ErrWrite) { // the write of an earlier step, which names it
		return st.Pause(), fmt.Errorf("train: %w", err)
	}
	if err != nil {
		return st.Pause(), fmt.Errorf("train: checkpoint at step %d: %w", meta.Step, err)
	}
	return st.Pause(), nil
}

// saveShards has every rank write its shard into a temporary directory
// (write gets the meta as JSON and the directory's name), then commits.
func (c *checkpointer) saveShards(meta checkpoint.Meta, write func(meta []byte, tmp string) (int64, error)) (time.Duration, error) {
	start := time.Now()
	tmp, err := checkpoint.BeginSave(c.fsys, c.dir, meta.Step)
	if errors.Is(err, checkpoint.ErrCommitted) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	// The workers hold the optimizers; this process describes theirs: the
	// same configuration, one update per step.
	o, err := optim.New(nn.NewParamSet(cpu.New(1), 0), c.optim)
	if err != nil {
		return 0, err
	}
	meta.Optimizer = checkpoint.OptimizerStateOf(o)
	meta.Optimizer.Steps = meta.Step
	mj, err := json.Marshal(meta)
	if err != nil {
		return 0, err
	}
	n, err := write(mj, tmp)
	if err != nil {
		c.prom.observeCheckpoint(0, 0, err)
		return time.Since(start), fmt.Errorf("train: checkpoint at step %d: %w", meta.Step, err)
	}
	parts, err := checkpoint.ReadParts(c.fsys, filepath.Join(c.dir, tmp))
	if err != nil {
		return time.Since(start), err
	}
	m, err := checkpoint.BuildManifest(meta, parts)
	if err != nil {
		return time.Since(start), err
	}
	if err := checkpoint.Commit(c.fsys, c.dir, tmp, m, checkpoint.CommitOptions{Keep: c.keep}); err != nil && !errors.Is(err, checkpoint.ErrPrune) {
		c.prom.observeCheckpoint(0, 0, err)
		return time.Since(start), err
	}
	pause := time.Since(start)
	c.prom.observeCheckpoint(n, pause, nil)
	c.log.Info("checkpoint written", zap.Int64("step", meta.Step), zap.Int64("bytes", n),
		zap.Float64("write_gb_per_s", float64(n)/pause.Seconds()/1e9))
	return pause, nil
}

// close waits for the last background write and reports its error.
func (c *checkpointer) close() error {
	if c == nil || c.saver == nil {
		return nil
	}
	err := c.saver.Close()
	c.saver = nil
	return err
}

// resumePoint is where a run with Resume continues: the latest
// checkpoint's step and sampler state, or step 0 and nil when there is
// none.
func resumePoint(cfg *Config, log *zap.Logger) (int, *data.SamplerState, *checkpoint.ScalerState, error) {
	ck, err := checkpoint.OpenLatest(checkpoint.OSFS{}, cfg.CkptDir)
	if errors.Is(err, checkpoint.ErrNoCheckpoint) {
		if cfg.ResumeRequired {
			return 0, nil, nil, &FieldError{Field: "ResumeRequired", Msg: fmt.Sprintf("found no checkpoint in %s to resume from", cfg.CkptDir), Class: checkpoint.ErrNoCheckpoint}
		}
		log.Warn("not resumed: no checkpoint in the checkpoint directory, starting from step 0", zap.String("dir", cfg.CkptDir))
		return 0, nil, nil, nil
	}
	if err != nil {
		return 0, nil, nil, fmt.Errorf("train: resume: %w", err)
	}
	defer ck.Close()
	m := ck.Manifest
	if m.Sampler == nil {
		return 0, nil, nil, fmt.Errorf("train: resume: %w: checkpoint step %d has no sampler state", checkpoint.ErrManifest, m.Step)
	}
	log.Info("resumed from the latest checkpoint", zap.String("dir", cfg.CkptDir), zap.Int64("step", m.Step), zap.Stringer("written_by", m.World),
		zap.Uint64("generation", m.Generation))
	return int(m.Step), m.Sampler, m.LossScaler, nil
}

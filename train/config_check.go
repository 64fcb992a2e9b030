package train

import (
	"math"
	"net"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/worker"
)

// Validate reports the first setting that cannot work, as a *FieldError;
// it changes nothing.
func (c Config) Validate() error {
	r := c.withDefaults()
	return r.check()
}

func (c *Config) check() error {
	if err := c.checkModel(); err != nil {
		return err
	}
	if err := c.checkTraining(); err != nil {
		return err
	}
	if err := c.checkWorld(); err != nil {
		return err
	}
	if err := c.checkSync(); err != nil {
		return err
	}
	return c.checkOutputs()
}

func (c *Config) checkModel() error {
	def, err := nn.Lookup(c.Model)
	if err != nil {
		return modelErr("Model", err)
	}
	if _, err := def.Resolve(c.ModelArgs); err != nil {
		return modelErr("ModelArgs", err)
	}
	return nil
}

func (c *Config) checkTraining() error {
	switch {
	case c.Batch <= 0:
		return fieldErr("Batch", "must be positive, got %d", c.Batch)
	case c.Accum < 1:
		return fieldErr("Accum", "must be positive, got %d", c.Accum)
	case c.Batch%c.Accum != 0:
		return fieldErr("Batch", "%d is not divisible by {Accum} %d", c.Batch, c.Accum)
	case c.Steps < 0 || c.Epochs < 0 || math.IsNaN(c.Epochs):
		return fieldErr("Steps", "and {Epochs} must be ≥ 0")
	case c.Steps == 0 && c.Epochs == 0:
		return fieldErr("Steps", "or {Epochs}: give one")
	case c.Steps > 0 && c.Epochs > 0:
		return fieldErr("Steps", "%d and {Epochs} %g are both set: give one", c.Steps, c.Epochs)
	case c.ClipNorm < 0:
		return fieldErr("ClipNorm", "must be ≥ 0")
	case c.EvalEvery < 0 || c.EvalBatches < 0:
		return fieldErr("EvalEvery", "and {EvalBatches} must be ≥ 0")
	case c.Threads < 0:
		return fieldErr("Threads", "must be ≥ 0")
	case c.Schedule != Constant && c.Schedule != Cosine:
		return fieldErr("Schedule", "%q: want constant or cosine", c.Schedule)
	}
	if err := c.Optim.Validate(); err != nil {
		return fieldErr("Optim", "%v", err)
	}
	if err := c.lrSchedule(c.Steps).Validate(); err != nil {
		return fieldErr("LR", "schedule: %v", err)
	}
	return nil
}

func (c *Config) checkWorld() error {
	switch {
	case c.DP < 1:
		return fieldErr("DP", "must be positive, got %d", c.DP)
	case c.PP < 1 || c.PP > pipeline.MaxStages:
		return fieldErr("PP", "must be 1 to %d, got %d", pipeline.MaxStages, c.PP)
	case c.MicroBatches < 1:
		return fieldErr("MicroBatches", "must be positive, got %d", c.MicroBatches)
	case c.Procs < 0:
		return fieldErr("Procs", "must be ≥ 0")
	case c.TP < 1 || c.TP > mesh.MaxSize:
		return fieldErr("TP", "must be 1 to %d, got %d", mesh.MaxSize, c.TP)
	case c.Zero < 0 || c.Zero > 3:
		return fieldErr("Zero", "stage %d: want 0, 1, 2 or 3", c.Zero)
	case !c.Precision.Valid():
		return fieldErr("Precision", "%q: want "+dtypes, c.Precision)
	case !c.ReduceDType.Valid():
		return fieldErr("ReduceDType", "%q: want "+dtypes, c.ReduceDType)
	case !(c.LossScaleInit > 0) || c.LossScaleWindow < 1 || !(c.LossScaleMin > 0) || c.LossScaleMin > c.LossScaleInit:
		return fieldErr("LossScaleInit", "%g, {LossScaleWindow} %d, {LossScaleMin} %g: want a positive scale at least the floor, and a window of at least 1 step", c.LossScaleInit, c.LossScaleWindow, c.LossScaleMin)
	case c.Zero == 3 && c.Batch/c.DP < c.microBatches():
		return fieldErr("Batch", "%d over {DP} %d leaves %d rows a replica, fewer than its %d micro-batches: ZeRO-3's gathers need every replica to run each one", c.Batch, c.DP, c.Batch/c.DP, c.microBatches())
	case c.ZeroGroup < 0 || c.ZeroGroup > 0 && c.DP%c.ZeroGroup != 0:
		return fieldErr("ZeroGroup", "%d must divide {DP} %d (0: shard over all of it)", c.ZeroGroup, c.DP)
	case c.ZeroGroup > 0 && c.Zero == 0:
		return fieldErr("ZeroGroup", "applies with {Zero} ≥ 1")
	case c.SequenceParallel && c.TP == 1:
		return fieldErr("SequenceParallel", "splits the activations among tensor-parallel shards: it needs {TP} > 1")
	case c.Procs > 0 && c.Procs%(c.PP*c.TP) != 0:
		return fieldErr("Procs", "%d runs one worker per process: it must be a multiple of {PP} × {TP} = %d", c.Procs, c.PP*c.TP)
	case c.Procs > 0 && c.DP*c.PP*c.TP != c.Procs:
		return fieldErr("Procs", "%d runs one worker per process: {DP} × {PP} × {TP} must be %d, got %d × %d × %d", c.Procs, c.Procs, c.DP, c.PP, c.TP)
	case c.PP > 1 && c.Accum != 1:
		return fieldErr("Accum", "does not apply with {PP} > 1: micro-batches accumulate the gradients (use {MicroBatches})")
	case c.PP > 1 && c.Batch/c.DP < c.MicroBatches:
		return fieldErr("Batch", "%d over %d replicas leaves %d rows, fewer than {MicroBatches} %d", c.Batch, c.DP, c.Batch/c.DP, c.MicroBatches)
	case c.PP == 1 && (c.MicroBatches != 1 || c.Recompute || c.StageLayers != ""):
		return fieldErr("MicroBatches", "{Recompute} and {StageLayers} need {PP} > 1 (use {Accum} for accumulation)")
	case c.PipelineSchedule != pipeline.KindGPipe && c.PipelineSchedule != pipeline.Kind1F1B:
		return fieldErr("PipelineSchedule", "%v: want gpipe or 1f1b", c.PipelineSchedule)
	case c.Partition != ByParams && c.Partition != ByTime:
		return fieldErr("Partition", "%q: want params or time", c.Partition)
	case c.BucketMB <= 0:
		return fieldErr("BucketMB", "must be positive")
	case c.CheckEvery < 0:
		return fieldErr("CheckEvery", "must be ≥ 0")
	case c.Transport != actors.TransportAuto && c.Transport != actors.TransportTCP && c.Transport != actors.TransportActor && c.Transport != actors.TransportShm:
		return fieldErr("Transport", "%q: want auto, tcp, shm or actor", c.Transport)
	case !c.AllReduceAlgo.Valid():
		return fieldErr("AllReduceAlgo", "%q: want auto or ring", c.AllReduceAlgo)
	case c.CollectiveTimeout <= 0 || c.StepTimeout <= 0:
		return fieldErr("CollectiveTimeout", "and {StepTimeout} must be positive")
	}
	return nil
}

func (c *Config) checkSync() error {
	mode, err := c.Sync.mode()
	if err != nil {
		return fieldErr("Sync", "%q: want "+syncMethods, c.Sync)
	}
	local := mode == worker.SyncLocalSGD || mode == worker.SyncDiLoCo
	if mode == worker.SyncAsync {
		if err := c.checkAsync(); err != nil {
			return err
		}
	} else if c.MaxStaleness < 0 {
		return fieldErr("MaxStaleness", "must be 0 or more, got %d", c.MaxStaleness)
	}
	switch {
	case c.Servers < 0:
		return fieldErr("Servers", "must be 1 or more, got %d", c.Servers)
	case c.Servers > 1 && mode != worker.SyncAsync:
		return fieldErr("Servers", "%d parameter servers apply with {Sync} async (%v has none)", c.Servers, mode)
	case c.MaxRestarts < 0:
		return fieldErr("MaxRestarts", "must be 0 or more, got %d", c.MaxRestarts)
	case c.MaxRestarts > 0 && (mode != worker.SyncAsync || c.Procs == 0):
		return fieldErr("MaxRestarts", "starts a replica's worker process again: it applies with {Sync} async and {Procs}")
	}
	switch {
	case !local && c.SyncEvery != 0:
		return fieldErr("SyncEvery", "applies with {Sync} local-sgd or diloco (%v has no rounds)", mode)
	case local && c.SyncEvery < 1:
		return fieldErr("SyncEvery", "must be at least 1 with {Sync} %v: the steps of a round, e.g. 20", mode)
	case !c.SyncDType.Valid():
		return fieldErr("SyncDType", "%q: want "+dtypes, c.SyncDType)
	case c.SyncDType.kernel() != kernels.F32 && mode != worker.SyncDiLoCo:
		return fieldErr("SyncDType", "%s applies to DiLoCo's pseudo-gradients ({Sync} diloco); step's gradients travel in {ReduceDType}, and local SGD averages the parameters themselves, which 16 bits would round", c.SyncDType)
	case c.OuterNesterov && mode != worker.SyncDiLoCo:
		return fieldErr("OuterNesterov", "applies with {Sync} diloco")
	case local && c.Zero > 0:
		return fieldErr("Zero", "%d shards the optimizer state among the replicas; {Sync} %v keeps each replica's whole (use ZeRO 0)", c.Zero, mode)
	case local && c.CkptEvery%c.SyncEvery != 0:
		return fieldErr("CkptEvery", "%d must be a multiple of {SyncEvery} %d: a checkpoint is taken at a round's end, when the replicas agree", c.CkptEvery, c.SyncEvery)
	case local && c.CheckEvery%c.SyncEvery != 0:
		return fieldErr("CheckEvery", "%d must be a multiple of {SyncEvery} %d: the replicas agree only at a round's end", c.CheckEvery, c.SyncEvery)
	case local && c.EvalEvery%c.SyncEvery != 0:
		return fieldErr("EvalEvery", "%d must be a multiple of {SyncEvery} %d: the model is evaluated at a round's end, when the replicas agree", c.EvalEvery, c.SyncEvery)
	}
	if err := c.sync().Validate(); err != nil {
		return fieldErr("Sync", "%v", err)
	}
	return nil
}

// checkAsync refuses what asynchronous training does not do.
func (c *Config) checkAsync() error {
	switch {
	case c.MaxStaleness < 0:
		return fieldErr("MaxStaleness", "must be 0 or more, got %d", c.MaxStaleness)
	case c.PP > 1 || c.TP > 1:
		return fieldErr("Sync", "async trains whole replicas: {PP} and {TP} must be 1, got %d and %d", c.PP, c.TP)
	case c.Zero > 0:
		return fieldErr("Zero", "%d shards the optimizer state among the replicas; {Sync} async keeps it on the parameter servers (use ZeRO 0, and {Servers} to shard it)", c.Zero)
	case c.Procs > 0 && c.Procs != c.DP:
		return fieldErr("Procs", "%d runs one replica per process under {Sync} async: {DP} must be %d, got %d", c.Procs, c.Procs, c.DP)
	case c.Precision.kernel() == kernels.F16:
		return fieldErr("Precision", "fp16's loss scaler skips a step on every rank together; {Sync} async has no such agreement (use bf16)")
	case c.ReduceDType.kernel() != kernels.F32:
		return fieldErr("ReduceDType", "{Sync} async reduces no gradients between replicas: each is applied whole")
	case c.CheckEvery > 0:
		return fieldErr("CheckEvery", "compares the replicas' weights; under {Sync} async they hold different versions by design")
	}
	return nil
}

func (c *Config) checkOutputs() error {
	switch {
	case c.CkptEvery < 0 || c.Keep < 0:
		return fieldErr("CkptEvery", "and {Keep} must be ≥ 0")
	case (c.CkptEvery > 0 || c.Resume) && c.CkptDir == "":
		return fieldErr("CkptDir", "is needed by {CkptEvery} and {Resume}")
	case c.ResumeRequired && !c.Resume:
		return fieldErr("ResumeRequired", "needs {Resume}")
	case c.Trace != "" && c.PP == 1:
		return fieldErr("Trace", "records the stages of a pipeline: it needs {PP} > 1")
	}
	if c.StragglerThreshold < 0 {
		return fieldErr("StragglerThreshold", "%s is negative", c.StragglerThreshold)
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			return fieldErr("MetricsAddr", "%q: want HOST:PORT (%v)", c.MetricsAddr, err)
		}
	}
	return nil
}

package train

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/worker"
)

// Config is one training run. The zero value of a field takes its default
// (DefaultConfig's values are the defaults of troupe train); Validate says
// what cannot work and changes nothing.
//
// Its fields are grouped by concern into the embedded structs below; every
// field is promoted, so that cfg.LR and cfg.DP read and write as if Config
// were flat, and it serializes as one flat object (MarshalJSON).
type Config struct {
	ModelConfig
	DataConfig
	OptimConfig
	MeshConfig
	PrecisionConfig
	SyncConfig
	CommConfig
	CheckpointConfig
	ObserveConfig
}

// ModelConfig is the model a run trains.
type ModelConfig struct {
	// Model is a registered model's name (nn.Register: package models'
	// and a program's own).
	Model string
	// ModelArgs are the model's options the run sets, by option name
	// ("d-model": "256"); the others take the model's defaults
	// (nn.ModelDef.Options).
	ModelArgs nn.Args
	// Context is the tokens of a sequence sample: the data's windows and
	// a sequence model's context.
	Context int
}

// DataConfig is what a run trains on and for how long: the dataset, its
// order, the global batch and the run's length.
type DataConfig struct {
	// Data is the dataset spec (see data.Open); empty: the model's
	// (nn.ModelDef.Data: gospec for the GPT, mnist for the MLP).
	Data string
	// Vocab is "char", "byte" or "gpt2" for text data (data.VocabChar…;
	// package data owns the set).
	Vocab string
	// Shuffle draws each epoch in a new order; false walks the data in order.
	Shuffle bool
	// Seed drives initialisation and shuffling.
	Seed uint64

	// Batch is the global batch in samples (sequences for a sequence model).
	Batch int
	// Steps is the number of optimizer steps from the start of training.
	Steps int
	// Epochs, when positive, is the run's length in epochs instead (Steps
	// must then be 0).
	Epochs float64
	// Accum is the number of micro-steps per optimizer step (gradient
	// accumulation, without pipelining); Batch must be divisible by it.
	Accum int
}

// OptimConfig is the optimizer and its learning rate's course.
type OptimConfig struct {
	// Optim is the optimizer; LR and the schedule below drive its rate.
	Optim optim.Config
	// LR is the peak learning rate.
	LR float64
	// Schedule is the rate's course; Warmup its warm-up steps;
	// MinLRFactor the cosine floor as a fraction of LR.
	Schedule    LRSchedule
	Warmup      int
	MinLRFactor float64
	// ClipNorm clips gradients to this global L2 norm (0: no clipping).
	ClipNorm float64
}

// MeshConfig is the shape of the world and where its workers run: the
// data-, pipeline- and tensor-parallel sizes (DP × PP × TP workers), how
// the data-parallel axis shards the state (ZeRO), how the pipeline axis
// cuts and schedules the model, and the processes, threads and kernels
// backend.
type MeshConfig struct {
	// DP is the number of data-parallel replicas (1: a single worker).
	DP int
	// PP is the number of pipeline stages (1: no pipelining).
	PP int
	// TP is the number of tensor-parallel shards of every stage (1: none):
	// Megatron-LM's column- and row-parallel layers, heads split among
	// the shards, a vocabulary-parallel embedding, head and loss.
	TP int

	// Zero is the ZeRO stage over the data-parallel axis (0: none; 1: the
	// optimizer state sharded, each replica updating its 1/D of every
	// gradient bucket; 2: the gradients too, each bucket's freed once
	// reduced, every micro-batch; 3: the weights too, each layer's
	// gathered for its passes and freed after). ZeroGroup shards within groups of that many
	// replicas and replicates across the groups (0: the whole
	// data-parallel group; hybrid sharding, HSDP).
	Zero, ZeroGroup int
	// SequenceParallel splits the activations between the
	// tensor-parallel regions along the sequence (needs TP > 1 and the
	// GPT).
	SequenceParallel bool

	// MicroBatches is the number of micro-batches per replica and step.
	MicroBatches int
	// PipelineSchedule is the pipeline schedule (its zero value is GPipe;
	// troupe train's default is 1F1B).
	PipelineSchedule pipeline.Kind
	// Recompute keeps only each stage's input in the forward pass and
	// recomputes the rest during backward (activation checkpointing).
	Recompute bool
	// StageLayers cuts the model explicitly: units per stage, "3,3,2".
	StageLayers string
	// Partition balances the stages when StageLayers is empty.
	Partition Partition

	// Procs runs the world as that many OS processes on this machine (one
	// worker each; DP × PP × TP must be Procs, or DP unset), connected through
	// protoactor remote on loopback, like torchrun --standalone; see
	// Options.WorkerCommand.
	Procs int
	// Device is the kernels backend ("cpu"; any name kernels.Open knows,
	// a set that depends on the build); Threads the thread budget of
	// this process (0: GOMAXPROCS), split among its local workers. With
	// Procs it is each worker process's (0: an equal share of this
	// process's GOMAXPROCS, at least one).
	Device  string
	Threads int
}

// PrecisionConfig is the number types of compute and of the gradients'
// reduction, and fp16's loss scaler.
type PrecisionConfig struct {
	// Precision is the compute type: fp32 (or empty), or bf16 or fp16 for
	// mixed precision: fp32 master weights and optimizer state, compute
	// copies of the weights in the low type refreshed after each update,
	// GEMMs in the low type with fp32 accumulation, the activations kept
	// for the backward pass in the low type, LayerNorm, softmax and the
	// loss in fp32.
	Precision DType
	// ReduceDType is the type gradients travel in between replicas: fp32
	// (or empty), or bf16 or fp16, halving the bytes, each hop of the ring
	// rounding its sums (NCCL's bf16 all-reduce; bf16 reductions are
	// known to destabilise large worlds, hence the fp32 default).
	ReduceDType DType
	// LossScaleInit, LossScaleWindow and LossScaleMin tune fp16's dynamic
	// loss scaler (PyTorch GradScaler: initial scale 65536, ×2 after 2000
	// steps in a row without an overflow, ×0.5 at one, whose step is
	// skipped on every rank); a step that overflows at LossScaleMin ends
	// the run with ErrLoss.
	LossScaleInit   float64
	LossScaleWindow int
	LossScaleMin    float64
}

// SyncConfig is how the data-parallel replicas keep together: every step,
// in rounds (local SGD, DiLoCo) or asynchronously through parameter
// servers, and the check that they agree.
type SyncConfig struct {
	// Sync is how the data-parallel replicas synchronise: "step" (or
	// empty: every step's gradients are reduced, PyTorch DDP),
	// "local-sgd" (each replica steps on its own gradients, the
	// parameters are averaged every SyncEvery steps, the optimizer state
	// stays local) or "diloco" (each replica steps on its own gradients
	// with the inner optimizer, Optim; every SyncEvery steps the
	// pseudo-gradients θ_global − θ_local are averaged and applied to the
	// global parameters by the outer optimizer, SGD with OuterLR,
	// OuterMomentum and OuterNesterov, and every replica continues from
	// them). A round also ends at the last step, and evaluations,
	// checksum checks and checkpoints fall on round ends (their cadences
	// must be multiples of SyncEvery), when the replicas agree. "async"
	// trains asynchronously: DP replicas compute the gradients of whole
	// batches on a parameter server's weights without waiting for each
	// other, and the server applies each as one optimizer step unless it
	// was computed more than MaxStaleness updates ago (then its batch is
	// computed again, on fresh weights). See docs/SYNC.md.
	Sync      SyncMethod
	SyncEvery int
	// MaxStaleness bounds the updates applied between the weights an
	// asynchronous gradient was computed on and its own (Sync async; 0:
	// only gradients on the current weights, sequential SGD;
	// DefaultConfig: 4).
	MaxStaleness int
	// Servers is how many parameter servers hold the model under Sync
	// async (0 or 1: one holds every parameter and the optimizer state).
	// More shard it: each owns 1/Servers of every parameter bucket and of
	// the optimizer state (ZeRO-3's shards), applies its chunks of each
	// update, and the clipping norm sums theirs.
	Servers int
	// MaxRestarts, with Procs and Sync async, starts a replica's worker
	// process again when it exits, up to this many times in all: the new
	// process joins the job and computes on the server's weights of the
	// moment (0: a lost replica stays lost).
	MaxRestarts int
	// OuterLR, OuterMomentum and OuterNesterov are DiLoCo's outer
	// optimizer (DefaultConfig: 0.7 and 0.9, the DiLoCo paper's, and no
	// Nesterov; OuterMomentum 0 is none).
	OuterLR, OuterMomentum float64
	OuterNesterov          bool
	// SyncDType is the type DiLoCo's pseudo-gradients travel in between
	// replicas: fp32 (or empty), or bf16 or fp16 (half the bytes).
	SyncDType DType
	// CheckEvery compares the replicas' parameter checksums every so many
	// steps and fails on divergence (0: never).
	CheckEvery int
}

// CommConfig is how gradients and activations travel between workers,
// and how long a collective or a step may wait.
type CommConfig struct {
	// Transport carries gradient chunks between processes: auto (the data
	// plane, through shared memory to the processes on this host and over
	// TCP to the others), tcp (TCP only), shm (shared memory only: every
	// process on this host, Linux), or actor (protobuf bytes through
	// protoactor remote).
	Transport actors.Transport
	// AllReduceAlgo is how gradient all-reduces run: "auto" (recursive
	// doubling for buckets up to 64 KiB; above, hierarchical when the
	// replicas run on several hosts with several on each, the ring
	// otherwise) or "ring" (always, as NCCL_ALGO=Ring pins NCCL's).
	AllReduceAlgo AllReduceAlgo
	// BucketMB caps a gradient bucket in MiB (PyTorch's bucket_cap_mb).
	BucketMB float64
	// CollectiveTimeout bounds a collective's wait on a silent peer.
	CollectiveTimeout time.Duration
	// StepTimeout bounds the wait for a step's answers.
	StepTimeout time.Duration
}

// CheckpointConfig is where a run's state comes from and goes to: its
// checkpoints, the weights it starts from and the weights it ends with.
type CheckpointConfig struct {
	// CkptDir holds the checkpoints; CkptEvery saves one every so many
	// steps (0: never); Keep keeps the last so many (0: all).
	CkptDir   string
	CkptEvery int
	Keep      int
	// Resume continues from the latest checkpoint in CkptDir (from scratch,
	// saying so, when there is none).
	Resume bool
	// ResumeRequired, with Resume, fails the run when CkptDir holds no
	// checkpoint instead of starting from scratch.
	ResumeRequired bool
	// Init loads initial weights from a safetensors file.
	Init string
	// Save writes the final weights to a safetensors file (also when the
	// run is stopped: see Run).
	Save string
}

// ObserveConfig is what a run tells about itself: evaluations, logs,
// metrics, traces and the flight recorder's dumps.
type ObserveConfig struct {
	// EvalEvery evaluates on held-out data every so many steps (0: at the
	// end only); EvalBatches bounds each evaluation (0: the whole test set).
	EvalEvery, EvalBatches int
	// LogEvery logs a progress line every so many steps when there is no
	// progress bar.
	LogEvery int
	// MetricsOut writes one JSON object per step to this file.
	MetricsOut string
	// MetricsAddr serves Prometheus metrics (/metrics), /healthz and
	// /readyz on this HOST:PORT (":0" picks a port; the log says which).
	// Worker processes serve none: their parent reports the steps.
	MetricsAddr string
	// StragglerThreshold logs a warning naming the replica whose compute
	// in a step passed the median of its part's replicas by more than this
	// (0: never; the lag is in the metrics either way).
	StragglerThreshold time.Duration
	// Trace writes a Chrome trace-event file of the pipeline stages (in
	// one process, or shipped from worker processes with Procs).
	Trace string
	// DumpDir receives the ranks' flight-recorder dumps: when a step
	// times out or a rank goes silent, on SIGUSR1 (the CLI), and on
	// request (/debug/flight), one directory per event that
	// `troupe explain hang` reads. Default: troupe-dumps in the system's
	// temporary directory.
	DumpDir string
}

// DefaultConfig is `troupe train` with no flags: the registry's default
// model (nn.DefaultModel; the GPT of ../shared/anchors/torch_gpt_tiny.py,
// which package models registers as the default) on its data (the Go
// specification). Model is empty when no registered model is the default;
// Validate then asks for one.
func DefaultConfig() Config {
	var model string
	if def, err := nn.DefaultModel(); err == nil {
		model = def.Name
	}
	return Config{
		ModelConfig: ModelConfig{Model: model, Context: 64},
		DataConfig:  DataConfig{Vocab: "char", Shuffle: true, Seed: 1, Batch: 32, Steps: 300, Accum: 1},
		OptimConfig: OptimConfig{Optim: optim.DefaultConfig("adamw"), LR: 1e-3, Schedule: Cosine, Warmup: 20, MinLRFactor: 0.1, ClipNorm: 1},
		MeshConfig: MeshConfig{DP: 1, PP: 1, TP: 1, MicroBatches: 1, PipelineSchedule: pipeline.Kind1F1B,
			Partition: ByParams, Device: "cpu"},
		PrecisionConfig:  PrecisionConfig{LossScaleInit: 65536, LossScaleWindow: 2000, LossScaleMin: 1},
		SyncConfig:       SyncConfig{OuterLR: 0.7, OuterMomentum: 0.9, MaxStaleness: 4},
		CommConfig:       CommConfig{Transport: actors.TransportAuto, AllReduceAlgo: AllReduceAuto, BucketMB: 25, CollectiveTimeout: 30 * time.Second, StepTimeout: 10 * time.Minute},
		CheckpointConfig: CheckpointConfig{Keep: 3},
		ObserveConfig:    ObserveConfig{LogEvery: 10, StragglerThreshold: 500 * time.Millisecond},
	}
}

// DefaultConfigFor is DefaultConfig for the registered model: its name,
// and its recipe (nn.ModelDef.Recipe) where it has one. The MLP's is SGD
// with momentum 0.9, batch 64, two epochs with the learning rate decaying
// from 0.05 to 0 on a cosine (98% test accuracy on MNIST).
func DefaultConfigFor(model string) (Config, error) {
	def, err := nn.Lookup(model)
	if err != nil {
		return Config{}, modelErr("Model", err)
	}
	c := DefaultConfig()
	c.Model = def.Name
	if r := def.Recipe; r != nil {
		c.applyRecipe(*r)
	}
	return c, nil
}

// applyRecipe sets the fields a model's recipe sets.
func (c *Config) applyRecipe(r nn.Recipe) {
	if r.Batch > 0 {
		c.Batch = r.Batch
	}
	if r.Optim != "" {
		c.Optim = optim.DefaultConfig(r.Optim)
		c.Optim.Momentum = float32(r.Momentum)
	}
	if r.LR > 0 {
		c.LR = r.LR
	}
	if r.Schedule != "" {
		c.Schedule = LRSchedule(r.Schedule)
	}
	switch {
	case r.Warmup == nn.NoWarmup:
		c.Warmup = 0
	case r.Warmup > 0:
		c.Warmup = r.Warmup
	}
	switch {
	case r.MinLRFactor == nn.NoMinLR:
		c.MinLRFactor = 0
	case r.MinLRFactor > 0:
		c.MinLRFactor = r.MinLRFactor
	}
	switch {
	case r.ClipNorm == nn.NoClip:
		c.ClipNorm = 0
	case r.ClipNorm > 0:
		c.ClipNorm = r.ClipNorm
	}
	if r.Epochs > 0 {
		c.Steps, c.Epochs = 0, float64(r.Epochs)
	}
}

// withDefaults is c with every unset field given its default and derived
// fields filled (DP from Procs).
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.Model = strings.ToLower(c.Model)
	if c.DP == 0 {
		c.DP = 1
	}
	if c.PP == 0 {
		c.PP = 1
	}
	if c.TP == 0 {
		c.TP = 1
	}
	if c.Procs > 0 && c.DP == 1 && c.PP > 0 && c.TP > 0 && c.Procs%(c.PP*c.TP) == 0 {
		c.DP = c.Procs / (c.PP * c.TP)
	}
	if c.MicroBatches == 0 {
		c.MicroBatches = 1
	}
	if c.Servers == 0 {
		c.Servers = 1
	}
	if c.Accum == 0 {
		c.Accum = 1
	}
	if c.Partition == "" {
		c.Partition = ByParams
	}
	if c.Schedule == "" {
		c.Schedule = d.Schedule
	}
	if c.Transport == "" {
		c.Transport = d.Transport
	}
	if c.AllReduceAlgo == "" {
		c.AllReduceAlgo = d.AllReduceAlgo
	}
	if c.LossScaleInit == 0 {
		c.LossScaleInit = d.LossScaleInit
	}
	if c.LossScaleWindow == 0 {
		c.LossScaleWindow = d.LossScaleWindow
	}
	if c.LossScaleMin == 0 {
		c.LossScaleMin = d.LossScaleMin
	}
	if c.OuterLR == 0 {
		c.OuterLR = d.OuterLR
	}
	if c.LogEvery <= 0 {
		c.LogEvery = d.LogEvery
	}
	if c.Device == "" {
		c.Device = d.Device
	}
	if c.BucketMB == 0 {
		c.BucketMB = d.BucketMB
	}
	if c.CollectiveTimeout == 0 {
		c.CollectiveTimeout = d.CollectiveTimeout
	}
	if c.StepTimeout == 0 {
		c.StepTimeout = d.StepTimeout
	}
	return c
}

// microBatches is the number of micro-batches of a replica's share of a
// step: the pipeline's, or the accumulation steps without pipelining.
func (c *Config) microBatches() int {
	if c.PP > 1 {
		return c.MicroBatches
	}
	return c.Accum
}

// sync is the replicas' synchronisation (the Sync fields parsed).
func (c *Config) sync() worker.Sync {
	mode, _ := c.Sync.mode()
	return worker.Sync{Mode: mode, OuterLR: c.OuterLR, OuterMomentum: c.OuterMomentum, OuterNesterov: c.OuterNesterov, DType: c.SyncDType.kernel()}
}

// roundAt reports whether step (0-based) of a run of total steps ends a
// synchronisation round (false when the replicas synchronise every step):
// every SyncEvery steps, and at the last.
func (c *Config) roundAt(step, total int) bool {
	if c.SyncEvery < 1 || !c.sync().Local() {
		return false
	}
	return (step+1)%c.SyncEvery == 0 || step+1 == total
}

// roundsUpTo is the number of rounds that ended by step (0-based) of a
// run of total steps.
func (c *Config) roundsUpTo(step, total int) int {
	if c.SyncEvery < 1 || !c.sync().Local() {
		return 0
	}
	n := (step + 1) / c.SyncEvery
	if step+1 == total && total%c.SyncEvery != 0 {
		n++
	}
	return n
}

// lrSchedule is the learning rate over a run of total steps.
func (c *Config) lrSchedule(total int) optim.Schedule {
	return optim.Schedule{Base: c.LR, Kind: string(c.Schedule), Warmup: c.Warmup, Total: total, MinFactor: c.MinLRFactor}
}

// SetModelArg sets the model option name (see nn.ModelDef.Options) to
// value, written as the option's text: an int, a float, a bool, a string
// or a []int ("784,256,10").
func (c *Config) SetModelArg(name string, value any) {
	if c.ModelArgs == nil {
		c.ModelArgs = nn.Args{}
	}
	switch v := value.(type) {
	case []int:
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = strconv.Itoa(x)
		}
		c.ModelArgs[name] = strings.Join(parts, ",")
	default:
		c.ModelArgs[name] = fmt.Sprint(v)
	}
}

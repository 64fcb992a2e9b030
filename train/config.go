package train

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
)

// ErrConfig reports an invalid training configuration.
var ErrConfig = errors.New("train: invalid config")

// Config is one training run.
type Config struct {
	// Model is "gpt" or "mlp".
	Model string
	// MLPSizes are the MLP's layer sizes d0, …, dn (d0 must match the data's
	// features and dn its classes; empty: 784-256-10, or data-derived ends).
	MLPSizes []int
	// GPT shape; Vocab comes from the data.
	DModel, NLayers, Heads, Context int
	// Untied gives the GPT an LM head of its own.
	Untied bool

	// Data is the dataset spec (see data.Open); empty: gospec for the GPT,
	// mnist for the MLP.
	Data string
	// Vocab is "char" or "byte" for text data.
	Vocab string
	// Shuffle draws each epoch in a new order; false walks the data in order.
	Shuffle bool

	// Batch is the global batch in samples (sequences for the GPT).
	Batch int
	// Steps is the number of optimizer steps from the start of training.
	Steps int
	// Epochs, when positive, sets Steps to cover that many epochs.
	Epochs float64
	// Accum is the number of micro-steps per optimizer step (gradient
	// accumulation); Batch must be divisible by it.
	Accum int

	// Optim is the optimizer; LR and the schedule below drive its rate.
	Optim optim.Config
	// LR is the peak learning rate.
	LR float64
	// Schedule is "constant" or "cosine"; Warmup its warm-up steps;
	// MinLRFactor the cosine floor as a fraction of LR.
	Schedule    string
	Warmup      int
	MinLRFactor float64
	// ClipNorm clips gradients to this global L2 norm (0: no clipping).
	ClipNorm float64

	// Seed drives initialisation and shuffling.
	Seed uint64
	// Init loads initial weights from a safetensors file.
	Init string
	// Save writes the final weights to a safetensors file.
	Save string
	// MetricsOut writes one JSON object per step to this file.
	MetricsOut string
	// EvalEvery evaluates on held-out data every so many steps (0: at the
	// end only); EvalBatches bounds each evaluation (0: the whole test set).
	EvalEvery, EvalBatches int
	// LogEvery logs a progress line every so many steps when stderr is not
	// a terminal.
	LogEvery int

	// Device is the kernels backend ("cpu"); Threads the thread budget of
	// this process (0: GOMAXPROCS), split among its local workers.
	Device  string
	Threads int

	// DP is the number of data-parallel replicas (1: a single worker).
	DP int
	// Procs runs the world as that many OS processes on this machine (one
	// worker each; DP must be Procs or unset), connected through
	// protoactor remote on loopback, like torchrun --standalone.
	Procs int
	// BucketMB caps a gradient bucket in MiB (PyTorch's bucket_cap_mb).
	BucketMB float64
	// CheckEvery compares the replicas' parameter checksums every so many
	// steps and fails on divergence (0: never).
	CheckEvery int
	// Transport carries gradient chunks between processes: "tcp" (the data
	// plane) or "actor" (protobuf bytes through protoactor remote).
	Transport string
	// CollectiveTimeout bounds a collective's wait on a silent peer.
	CollectiveTimeout time.Duration
	// StepTimeout bounds the Coordinator's wait for a step's answers.
	StepTimeout time.Duration

	// PP is the number of pipeline stages (1: no pipelining).
	PP int
	// MicroBatches is the number of micro-batches per replica and step.
	MicroBatches int
	// PipelineSchedule is the pipeline schedule: "gpipe" or "1f1b".
	PipelineSchedule string
	// Recompute keeps only each stage's input in the forward pass and
	// recomputes the rest during backward (activation checkpointing).
	Recompute bool
	// StageLayers cuts the model explicitly: units per stage, "3,3,2".
	StageLayers string
	// Partition balances the stages by "params" (parameter count, the
	// default) or "time" (each unit's forward and backward, measured on a
	// micro-batch before training).
	Partition string
	// Trace writes a Chrome trace-event file of the pipeline stages (in
	// one process, or shipped from worker processes with --procs).
	Trace string

	// CkptDir holds the checkpoints; CkptEvery saves one every so many
	// steps (0: never); Keep keeps the last so many (0: all).
	CkptDir   string
	CkptEvery int
	Keep      int
	// Resume continues from the latest checkpoint in CkptDir (from scratch,
	// saying so, when there is none).
	Resume bool
	// ResumeFrom is the checkpoint step every worker restores from; Run
	// sets it when resuming.
	ResumeFrom int64 `json:"resume_from"`
}

// ErrDiverged reports replicas whose parameters differ.
var ErrDiverged = errors.New("train: replicas diverged")

// DefaultConfig is `troupe train` with no flags: the GPT of
// ../shared/anchors/torch_gpt_tiny.py on the Go specification.
func DefaultConfig() Config {
	return Config{
		Model: "gpt", DModel: 128, NLayers: 4, Heads: 4, Context: 64,
		Vocab: "char", Shuffle: true,
		Batch: 32, Steps: 300, Accum: 1,
		Optim: optim.DefaultConfig("adamw"), LR: 1e-3, Schedule: "cosine", Warmup: 20, MinLRFactor: 0.1, ClipNorm: 1,
		Seed: 1, LogEvery: 10, Device: "cpu", Keep: 3,
		DP: 1, BucketMB: 25, CheckEvery: 0, Transport: "tcp", PP: 1, MicroBatches: 1, PipelineSchedule: "1f1b",
		CollectiveTimeout: 30 * time.Second, StepTimeout: 10 * time.Minute,
	}
}

// DefaultMLPConfig is the MLP classifier on MNIST: 784-256-10, SGD with
// momentum 0.9, batch 64, two epochs with the learning rate decaying from
// 0.05 to 0 on a cosine (98% test accuracy).
func DefaultMLPConfig() Config {
	c := DefaultConfig()
	c.Model = "mlp"
	c.MLPSizes = []int{784, 256, 10}
	c.Batch = 64
	c.Optim = optim.Config{Name: "sgd", Momentum: 0.9}
	c.LR, c.Schedule, c.Warmup, c.MinLRFactor, c.ClipNorm = 0.05, "cosine", 0, 0, 0
	c.Epochs = 2
	return c
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	c.Model = strings.ToLower(c.Model)
	switch c.Model {
	case "gpt":
		g := nn.GPTConfig{Vocab: 1, Context: c.Context, DModel: c.DModel, Layers: c.NLayers, Heads: c.Heads}
		if err := g.Validate(); err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
	case "mlp":
		for _, d := range c.MLPSizes {
			if d <= 0 {
				return fmt.Errorf("%w: --layers sizes must be positive, got %v", ErrConfig, c.MLPSizes)
			}
		}
		if len(c.MLPSizes) == 1 {
			return fmt.Errorf("%w: --layers needs at least an input and an output size", ErrConfig)
		}
	default:
		return fmt.Errorf("%w: unknown --model %q (want gpt or mlp)", ErrConfig, c.Model)
	}
	if c.Batch <= 0 {
		return fmt.Errorf("%w: --batch must be positive, got %d", ErrConfig, c.Batch)
	}
	if c.Accum <= 0 {
		return fmt.Errorf("%w: --accum must be positive, got %d", ErrConfig, c.Accum)
	}
	if c.Batch%c.Accum != 0 {
		return fmt.Errorf("%w: --batch %d is not divisible by --accum %d", ErrConfig, c.Batch, c.Accum)
	}
	if c.Steps < 0 || c.Epochs < 0 || math.IsNaN(c.Epochs) {
		return fmt.Errorf("%w: --steps and --epochs must be ≥ 0", ErrConfig)
	}
	if c.Steps == 0 && c.Epochs == 0 {
		return fmt.Errorf("%w: give --steps or --epochs", ErrConfig)
	}
	if err := c.Optim.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if err := c.schedule(c.Steps).Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if c.ClipNorm < 0 {
		return fmt.Errorf("%w: --clip must be ≥ 0", ErrConfig)
	}
	if c.EvalEvery < 0 || c.EvalBatches < 0 {
		return fmt.Errorf("%w: --eval-every and --eval-batches must be ≥ 0", ErrConfig)
	}
	if c.Threads < 0 {
		return fmt.Errorf("%w: --threads must be ≥ 0", ErrConfig)
	}
	if c.DP <= 0 {
		c.DP = 1
	}
	if c.PP <= 0 {
		c.PP = 1
	}
	if c.MicroBatches <= 0 {
		c.MicroBatches = 1
	}
	if c.Procs < 0 {
		return fmt.Errorf("%w: --procs must be ≥ 0", ErrConfig)
	}
	if c.Procs > 0 {
		if c.Procs%c.PP != 0 {
			return fmt.Errorf("%w: --procs %d runs one worker per process: it must be a multiple of --pp %d", ErrConfig, c.Procs, c.PP)
		}
		if c.DP != 1 && c.DP*c.PP != c.Procs {
			return fmt.Errorf("%w: --procs %d runs one worker per process: --dp × --pp must be %d, got %d × %d", ErrConfig, c.Procs, c.Procs, c.DP, c.PP)
		}
		c.DP = c.Procs / c.PP
	}
	if c.PP > 1 {
		if c.Accum != 1 {
			return fmt.Errorf("%w: with --pp, micro-batches accumulate the gradients: use --micro-batches instead of --accum", ErrConfig)
		}
		if c.PipelineSchedule != "gpipe" && c.PipelineSchedule != "1f1b" {
			return fmt.Errorf("%w: --schedule %q: want gpipe or 1f1b", ErrConfig, c.PipelineSchedule)
		}
		if per := c.Batch / c.DP; per < c.MicroBatches {
			return fmt.Errorf("%w: --batch %d over %d replicas leaves %d rows, fewer than --micro-batches %d", ErrConfig, c.Batch, c.DP, per, c.MicroBatches)
		}
	} else if c.MicroBatches != 1 || c.Recompute || c.StageLayers != "" {
		return fmt.Errorf("%w: --micro-batches, --recompute and --stage-layers need --pp > 1 (use --accum for accumulation)", ErrConfig)
	}
	if c.CkptEvery < 0 || c.Keep < 0 {
		return fmt.Errorf("%w: --ckpt-every and --keep must be ≥ 0", ErrConfig)
	}
	if (c.CkptEvery > 0 || c.Resume) && c.CkptDir == "" {
		return fmt.Errorf("%w: --ckpt-every and --resume need --ckpt-dir", ErrConfig)
	}
	if c.Partition == "" {
		c.Partition = "params"
	}
	if c.Partition != "params" && c.Partition != "time" {
		return fmt.Errorf("%w: --partition %q: want params or time", ErrConfig, c.Partition)
	}
	if c.Trace != "" && c.PP == 1 {
		return fmt.Errorf("%w: --trace records the stages of a pipeline: it needs --pp > 1", ErrConfig)
	}
	if c.BucketMB <= 0 {
		return fmt.Errorf("%w: --bucket-mb must be positive", ErrConfig)
	}
	if c.CheckEvery < 0 {
		return fmt.Errorf("%w: --check-every must be ≥ 0", ErrConfig)
	}
	if c.Transport != "tcp" && c.Transport != "actor" {
		return fmt.Errorf("%w: --transport %q: want tcp or actor", ErrConfig, c.Transport)
	}
	if c.CollectiveTimeout <= 0 || c.StepTimeout <= 0 {
		return fmt.Errorf("%w: timeouts must be positive", ErrConfig)
	}
	if c.LogEvery <= 0 {
		c.LogEvery = 10
	}
	if c.Device == "" {
		c.Device = "cpu"
	}
	return nil
}

func (c *Config) schedule(total int) optim.Schedule {
	return optim.Schedule{Base: c.LR, Kind: c.Schedule, Warmup: c.Warmup, Total: total, MinFactor: c.MinLRFactor}
}

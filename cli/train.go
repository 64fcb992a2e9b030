package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/internal/probe"
	_ "github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/report"
	"github.com/troupe-ml/troupe/train"
)

// trainFlags are troupe train's flags; their defaults are the trainer's
// (train.DefaultConfig), and a --model with a recipe switches the defaults
// the user did not set to its own (train.DefaultConfigFor). The model's
// options are flags of their own (registerModelFlags).
type trainFlags struct {
	model                                         string
	context                                       int
	data, vocab                                   string
	shuffle                                       bool
	batch, steps, accum                           int
	epochs                                        float64
	optimizer, schedule                           string
	lr, clip, minLR                               float64
	momentum, weightDecay, dampening              float32
	beta1, beta2, eps                             float32
	nesterov                                      bool
	warmup                                        int
	seed                                          uint64
	init, save, metricsOut, metricsAddr, dumpDir  string
	precision, reduceDType                        string
	sync, syncDType                               string
	syncEvery, maxStaleness, maxRestarts, servers int
	outerLR, outerMomentum                        float64
	outerNesterov                                 bool
	lossScaleInit, lossScaleMin                   float64
	lossScaleWindow                               int
	evalEvery, evalBatches, logEvery              int
	device                                        string
	threads                                       int
	jsonOut                                       bool
	dp, procs, checkEvery                         int
	bucketMB                                      float64
	transport, allreduceAlgo                      string
	collTimeout, stepTimeout, straggler           time.Duration
	pp, tp, micro, zero, zeroGroup                int
	sp                                            bool
	pipeSchedule, stageLayers, trace              string
	partition                                     string
	recompute                                     bool
	ckptDir                                       string
	ckptEvery, keep                               int
	resume                                        string
	// configFile and printConfig are --config and --print-config (config.go).
	configFile  string
	printConfig bool
}

func newTrainCmd() *cobra.Command {
	f := &trainFlags{}
	var reportPath string
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train a model (with no flags: the default GPT on the Go specification, in this process)",
		Example: `  troupe train
  troupe train --model mlp --data mnist --epochs 2 --eval-every 500
  troupe train --model gpt --data ./input.txt --steps 1000 --lr 3e-4 --save gpt.safetensors
  troupe train --model mlp --layers 784,1024,1024,10 --init init.safetensors --metrics-out m.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.config(cmd.Flags())
			if err != nil {
				return err
			}
			if f.printConfig {
				return writeConfig(cmd.OutOrStdout(), cmd)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			dump, stopDump := dumpOnSignal()
			defer stopDump()
			o := train.Options{Logger: logger, WorkerCommand: workerCommand(), Dump: dump}
			if stderrTerm != nil {
				o.Progress = stderrTerm
			}
			var steps []train.StepMetrics
			if reportPath != "" {
				if err := checkReportPath(reportPath); err != nil {
					return err
				}
				o.OnStep = func(m train.StepMetrics) { steps = append(steps, m) }
				// A language model's report shows text it writes.
				o.KeepModel = wantsSample(&cfg)
			}
			sum, err := train.Run(ctx, cfg, o)
			var rerr error
			if reportPath != "" && len(steps) > 0 {
				// Also of a run that failed or was stopped: what it trained.
				title := "troupe train --model " + string(cfg.Model)
				if sum != nil {
					title = fmt.Sprintf("troupe train: %s on %s", sum.Model, sum.Data)
				}
				var sample *report.Sample
				if sum != nil && sum.Trained != nil {
					var serr error
					if sample, serr = reportSample(ctx, &cfg, sum.Trained, steps[len(steps)-1].Step); serr != nil {
						logger.Warn("the report goes without a text sample", zap.Error(serr))
					}
				}
				if rerr = writeReport(reportPath, title, steps, cfg.Trace, &cfg, sample); rerr != nil {
					rerr = fmt.Errorf("--report %s: %w", reportPath, rerr)
				}
			}
			if err != nil {
				if sum != nil && sum.Saved != "" {
					err = fmt.Errorf("%w (the weights of step %d were written to %s)", err, sum.SavedStep, sum.Saved)
				}
				err = inFlags(err)
				// A configuration the model or the world refuses once the
				// data is open (a shape, a cut) is a usage error as much as
				// one Validate finds before.
				var fe *train.FieldError
				if errors.As(err, &fe) && errors.Is(err, train.ErrConfig) {
					err = fmt.Errorf("%w: %w", errUsage, err)
				}
				return errors.Join(err, rerr)
			}
			// The summary is printed even when the report failed: the run
			// itself succeeded.
			if f.jsonOut {
				return errors.Join(json.NewEncoder(os.Stdout).Encode(sum), rerr)
			}
			line := fmt.Sprintf("trained %s on %s: %d steps, loss %.4f → %.4f, %.0f samples/s",
				sum.Model, sum.Data, sum.Steps, sum.FirstLoss, sum.FinalLoss, sum.SamplesPerS)
			if sum.TokensPerS > 0 {
				line += fmt.Sprintf(" (%.0f tokens/s)", sum.TokensPerS)
			}
			if sum.EvalLoss > 0 {
				line += fmt.Sprintf(", held-out loss %.4f", sum.EvalLoss)
			}
			if sum.EvalAcc > 0 {
				line += fmt.Sprintf(", accuracy %.2f%%", 100*sum.EvalAcc)
			}
			fmt.Fprintln(os.Stdout, line)
			return rerr
		},
	}
	f.register(cmd.Flags())
	f.registerOldWarmup(cmd.Flags())
	cmd.Flags().StringVar(&reportPath, "report", "", "write an HTML report of the run to this file at its end (see troupe report)")
	setAnnotation(cmd.Flags(), "report", annGroup, groupOutputs, "100") // after the shared ones
	return cmd
}

// dumpOnSignal returns a channel that receives once per SIGUSR1 (dump
// the flight recorders: Options.Dump) and the function that stops it.
func dumpOnSignal() (<-chan struct{}, func()) {
	sig := make(chan os.Signal, 1)
	out := make(chan struct{}, 1)
	quit, done := make(chan struct{}), make(chan struct{})
	signal.Notify(sig, syscall.SIGUSR1)
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-sig:
				select {
				case out <- struct{}{}:
				default: // a dump is pending already
				}
			}
		}
	}()
	return out, func() {
		signal.Stop(sig)
		close(quit)
		<-done
	}
}

// checkReportPath refuses a report path that cannot be written, before
// the run.
func checkReportPath(p string) error {
	if err := probe.File(p); err != nil {
		return fmt.Errorf("--report %s: %w", p, err)
	}
	return nil
}

// newWorkerCmd is the hidden body of a --procs worker process.
func newWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "__worker",
		Hidden: true,
		Short:  "one worker process of troupe train --procs (started by it)",
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			dump, stopDump := dumpOnSignal()
			defer stopDump()
			return train.RunWorkerProcess(ctx, os.Stdin, train.Options{Logger: logger, Dump: dump})
		},
	}
}

func init() { rootCmd.AddCommand(newTrainCmd(), newWorkerCmd()) }

// workerCommand runs one worker process of a --procs world: this
// executable's hidden __worker command.
func workerCommand() []string {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return []string{exe, "__worker"}
}

// register adds the training flags to fl (troupe train, troupe bench train
// and troupe agent share them), each under its heading in the help.
func (f *trainFlags) register(fl *pflag.FlagSet) {
	d := train.DefaultConfig()
	fl.StringVar(&f.model, "model", d.Model, modelHelp())
	registerModelFlags(fl)
	fl.IntVar(&f.context, "context", d.Context, "context length of a sequence model (tokens per sample)")
	fl.StringVar(&f.data, "data", "", "dataset: gospec (the Go spec, built in), mnist ($TROUPE_MNIST_DIR, the Go module cache or /usr/share/troupe/mnist), mnist:DIR, synthetic-mlp, synthetic-tokens, a text file, a *.safetensors file, an MNIST directory, or token shards memory-mapped: a directory of them (troupe data prepare's, with meta.json; llm.c's *_train_*.bin and *_val_*.bin; nanoGPT's headerless train.bin and val.bin), a glob ('dir/*_train_*.bin') or one .bin file; shards named val are the held-out set; their vocabulary is meta.json's, else the model's --vocab-size, else the largest id + 1 (default: gospec; with --model mlp mnist)")
	fl.StringVar(&f.vocab, "vocab", d.Vocab, "tokenisation of a text file: char, byte or gpt2 (GPT-2's BPE); token shards carry theirs in meta.json")
	fl.BoolVar(&f.shuffle, "shuffle", d.Shuffle, "shuffle every epoch (false: step t uses rows t·B … t·B+B−1 mod N)")
	fl.IntVar(&f.batch, "batch", d.Batch, "global batch size in samples")
	fl.IntVar(&f.steps, "steps", d.Steps, "optimizer steps, counted from the start of training (0: --epochs counts)")
	fl.Float64Var(&f.epochs, "epochs", d.Epochs, "train this many epochs instead of --steps (0: --steps counts)")
	fl.IntVar(&f.accum, "accum", d.Accum, "gradient accumulation: micro-steps per optimizer step")
	fl.StringVar(&f.optimizer, "optimizer", d.Optim.Name, "optimizer: adamw or sgd (one other than the model's starts --momentum, --dampening, --weight-decay, --beta1, --beta2 and --eps from its own settings: AdamW's as shown, SGD's 0)")
	fl.Float64Var(&f.lr, "lr", d.LR, "peak learning rate")
	fl.StringVar(&f.schedule, "lr-schedule", string(d.Schedule), "learning-rate schedule: cosine or constant")
	fl.IntVar(&f.warmup, "lr-warmup", d.Warmup, "linear learning-rate warm-up steps")
	fl.Float64Var(&f.minLR, "min-lr-factor", d.MinLRFactor, "cosine floor as a fraction of --lr")
	fl.Float32Var(&f.momentum, "momentum", d.Optim.Momentum, "SGD momentum")
	fl.Float32Var(&f.dampening, "dampening", d.Optim.Dampening, "SGD dampening")
	fl.BoolVar(&f.nesterov, "nesterov", d.Optim.Nesterov, "SGD Nesterov momentum")
	fl.Float32Var(&f.weightDecay, "weight-decay", d.Optim.WeightDecay, "weight decay (AdamW: decoupled; SGD: L2)")
	fl.Float32Var(&f.beta1, "beta1", d.Optim.Beta1, "AdamW β1")
	fl.Float32Var(&f.beta2, "beta2", d.Optim.Beta2, "AdamW β2")
	fl.Float32Var(&f.eps, "eps", d.Optim.Eps, "AdamW ε")
	fl.Float64Var(&f.clip, "clip", d.ClipNorm, "clip gradients to this global L2 norm (0: off)")
	fl.Uint64Var(&f.seed, "seed", d.Seed, "seed for initialisation and shuffling")
	fl.StringVar(&f.init, "init", "", "load initial weights from this safetensors file (PyTorch state_dict names)")
	fl.StringVar(&f.save, "save", "", "write the final weights to this safetensors file")
	fl.StringVar(&f.metricsOut, "metrics-out", "", "write one JSON object per step to this file")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics (/metrics), /healthz, /readyz and the flight recorders (/debug/flight) on HOST:PORT")
	fl.StringVar(&f.dumpDir, "dump-dir", "", "where the ranks' flight-recorder dumps go (a step that hangs, SIGUSR1), a directory per event for troupe explain hang (default: troupe-dumps in the temporary directory)")
	fl.IntVar(&f.evalEvery, "eval-every", 0, "evaluate on held-out data every N steps (0: at the end only)")
	fl.IntVar(&f.evalBatches, "eval-batches", 0, "batches per evaluation (0: the whole held-out set)")
	fl.IntVar(&f.logEvery, "log-every", d.LogEvery, "log a progress line every N steps when stderr is not a terminal")
	fl.StringVar(&f.device, "device", d.Device, "kernels backend: cpu (cuda when built with -tags cuda)")
	fl.IntVar(&f.threads, "threads", 0, "threads of this process for the kernels, split among its worker actors (0: GOMAXPROCS); with --procs, of each rank process (0: the cores split evenly among them, at least 1 each)")
	fl.BoolVar(&f.jsonOut, "json", false, "print the run summary as one JSON object on stdout")
	fl.IntVar(&f.dp, "dp", d.DP, "data-parallel replicas (worker actors) in this process")
	fl.IntVar(&f.procs, "procs", 0, "run the world (--dp × --pp × --tp) as N OS processes on loopback, one worker each (like torchrun --standalone); each gets ⌊cores/N⌋ threads unless --threads says")
	fl.Float64Var(&f.bucketMB, "bucket-mb", d.BucketMB, "gradient bucket cap in MiB (PyTorch's bucket_cap_mb)")
	fl.IntVar(&f.checkEvery, "check-every", 0, "compare the replicas' parameter checksums every N steps and fail on divergence (0: never)")
	fl.StringVar(&f.transport, "transport", string(d.Transport), "gradient transport between processes: auto (the data plane, through shared memory to processes on this host, TCP to others), tcp, shm (shared memory only) or actor (protoactor remote)")
	fl.StringVar(&f.allreduceAlgo, "allreduce-algo", string(d.AllReduceAlgo), "gradient all-reduce: auto (recursive doubling up to 64 KiB; above, hierarchical across hosts of several ranks each, else the ring) or ring")
	fl.DurationVar(&f.collTimeout, "collective-timeout", d.CollectiveTimeout, "abort a collective when a peer is silent this long")
	fl.DurationVar(&f.stepTimeout, "step-timeout", d.StepTimeout, "abort a step when a worker has not answered within this time")
	fl.DurationVar(&f.straggler, "straggler-threshold", d.StragglerThreshold, "log a warning naming a replica whose compute in a step passes its peers' median by more than this (0: never)")
	fl.IntVar(&f.pp, "pp", d.PP, "pipeline stages (stage actors, each with a contiguous range of the model's units)")
	fl.IntVar(&f.tp, "tp", d.TP, "tensor-parallel shards of every stage (Megatron-LM: column- and row-parallel layers, heads split, vocabulary-parallel embedding and loss)")
	fl.BoolVar(&f.sp, "sequence-parallel", false, "with --tp: split the activations between the tensor-parallel regions along the sequence (sequence models: gpt, llama)")
	fl.IntVar(&f.zero, "zero", 0, "ZeRO stage over the data-parallel replicas: 1 shards the optimizer state (each replica updates 1/D of every gradient bucket), 2 the gradients too, 3 the weights too (each layer's gathered for its passes)")
	fl.IntVar(&f.zeroGroup, "zero-group", 0, "with --zero: shard within groups of this many replicas and replicate across groups (hybrid sharding; 0: all replicas)")
	fl.StringVar(&f.precision, "precision", "fp32", "compute type: fp32, or bf16 or fp16 for mixed precision (fp32 master weights and optimizer state; GEMMs in the low type with fp32 accumulation; activations kept in it)")
	fl.StringVar(&f.reduceDType, "reduce-dtype", "fp32", "the type gradients travel in between replicas: fp32, or bf16 or fp16 (half the bytes; each hop of the ring rounds its sums)")
	fl.StringVar(&f.sync, "sync", "step", "how the replicas synchronise: step (every step's gradients, DDP), local-sgd (parameters averaged every --sync-every steps), diloco (pseudo-gradients averaged every --sync-every steps into an outer Nesterov-momentum SGD) or async (a parameter server applies each replica's gradient as it arrives, up to --max-staleness updates old)")
	fl.IntVar(&f.maxRestarts, "max-restarts", 0, "with --procs and --sync async: start a replica's process again when it exits, up to N times in all (the new one joins and computes on the server's weights)")
	fl.IntVar(&f.maxStaleness, "max-staleness", d.MaxStaleness, "with --sync async: reject a gradient computed on weights more than this many updates old (its batch is computed again; 0: sequential SGD)")
	fl.IntVar(&f.servers, "servers", 1, "with --sync async: parameter servers, each owning 1/N of the parameters and optimizer state and applying its shard of every update")
	fl.IntVar(&f.syncEvery, "sync-every", 0, "with --sync local-sgd or diloco: the steps of a round (H)")
	fl.Float64Var(&f.outerLR, "outer-lr", d.OuterLR, "with --sync diloco: the outer optimizer's learning rate")
	fl.Float64Var(&f.outerMomentum, "outer-momentum", d.OuterMomentum, "with --sync diloco: the outer optimizer's momentum (0: none)")
	fl.BoolVar(&f.outerNesterov, "outer-nesterov", false, "with --sync diloco: Nesterov momentum for the outer optimizer (the DiLoCo paper's)")
	fl.StringVar(&f.syncDType, "sync-dtype", "fp32", "with --sync diloco: the type the pseudo-gradients travel in between replicas: fp32, or bf16 or fp16 (half the bytes)")
	fl.Float64Var(&f.lossScaleInit, "loss-scale-init", d.LossScaleInit, "fp16: the dynamic loss scale to start from (PyTorch GradScaler's init_scale)")
	fl.IntVar(&f.lossScaleWindow, "loss-scale-window", d.LossScaleWindow, "fp16: double the loss scale after this many steps in a row without an overflow (growth_interval)")
	fl.Float64Var(&f.lossScaleMin, "loss-scale-min", d.LossScaleMin, "fp16: a step that overflows at this loss scale ends the run")
	fl.IntVar(&f.micro, "micro-batches", d.MicroBatches, "micro-batches per replica and step (with --pp)")
	fl.StringVar(&f.pipeSchedule, "schedule", d.PipelineSchedule.String(), "pipeline schedule: gpipe or 1f1b")
	fl.BoolVar(&f.recompute, "recompute", false, "activation checkpointing: keep only each stage's input, recompute the rest in backward")
	fl.StringVar(&f.stageLayers, "stage-layers", "", "units per stage, e.g. 3,3,2 (default: balanced by --partition)")
	fl.StringVar(&f.partition, "partition", "params", "balance the pipeline stages by params (parameter count) or time (each unit's forward and backward, measured before training)")
	fl.StringVar(&f.trace, "trace", "", "write a Chrome trace-event file (Perfetto) of the pipeline stages")
	fl.StringVar(&f.ckptDir, "ckpt-dir", "", "checkpoint directory (sharded safetensors + manifest.json, atomic commits)")
	fl.IntVar(&f.ckptEvery, "ckpt-every", 0, "save a checkpoint every N steps (0: never)")
	fl.IntVar(&f.keep, "keep", d.Keep, "keep the last K checkpoints (0: all)")
	fl.StringVar(&f.resume, "resume", "", "continue from the latest checkpoint in --ckpt-dir, with the model, data and training options it records (flags given override the training options; a model or data flag must match): --resume (or =auto) starts from step 0 when there is none, saying so; --resume=require fails then. --steps counts from the start of training")
	fl.Lookup("resume").NoOptDefVal = "auto"
	fl.StringVar(&f.configFile, "config", "", "read flags from this YAML (.yaml, .yml) or TOML (.toml) file, one key per flag: lr: 0.001, ckpt-dir: ckpt (flags on the command line win)")
	fl.BoolVar(&f.printConfig, "print-config", false, "write the run's flags as a --config file (YAML) on stdout and exit without training: the flags set on the command line or in --config, so that every other flag keeps its default and a resumed run still takes the options its checkpoint records")

	annotateModelDefaults(fl)

	inGroup(fl, groupModel, append(append([]string{"model"}, modelFlagNames()...), "context", "init")...)
	inGroup(fl, groupData, "data", "vocab", "shuffle", "batch", "accum", "steps", "epochs", "seed")
	inGroup(fl, groupOptim, "optimizer", "lr", "lr-schedule", "lr-warmup", "min-lr-factor", "momentum", "dampening", "nesterov", "weight-decay", "beta1", "beta2", "eps", "clip")
	inGroup(fl, groupParallel, "dp", "procs", "pp", "tp", "sequence-parallel", "micro-batches", "schedule", "stage-layers", "partition", "recompute", "zero", "zero-group")
	inGroup(fl, groupComm, "transport", "allreduce-algo", "bucket-mb", "reduce-dtype")
	inGroup(fl, groupSync, "sync", "sync-every", "sync-dtype", "outer-lr", "outer-momentum", "outer-nesterov", "max-staleness", "servers", "max-restarts")
	inGroup(fl, groupPrecision, "precision", "loss-scale-init", "loss-scale-window", "loss-scale-min")
	inGroup(fl, groupOutputs, "ckpt-dir", "ckpt-every", "keep", "resume", "save", "metrics-out", "json")
	inGroup(fl, groupEval, "eval-every", "eval-batches")
	inGroup(fl, groupObserve, "log-every", "metrics-addr", "trace", "dump-dir", "check-every", "straggler-threshold")
	inGroup(fl, groupRuntime, "device", "threads", "collective-timeout", "step-timeout")
	inGroup(fl, groupConfig, "config", "print-config")
	setAnnotation(fl, "config", annConfigFile, "true")
}

// registerOldWarmup adds --warmup, the old name of --lr-warmup (troupe
// train and troupe agent; troupe bench train has --warmup-steps, the steps
// left out of its timing, and no --warmup).
func (f *trainFlags) registerOldWarmup(fl *pflag.FlagSet) {
	fl.IntVar(&f.warmup, "warmup", train.DefaultConfig().Warmup, "the old name of --lr-warmup")
	setAnnotation(fl, "warmup", annAliasOf, "lr-warmup")
	if err := fl.MarkDeprecated("warmup", "use --lr-warmup"); err != nil {
		panic(err)
	}
}

// config builds the run's configuration (build) and validates it.
func (f *trainFlags) config(fl *pflag.FlagSet) (train.Config, error) {
	cfg, err := f.build(fl)
	if err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("%w: %w", errUsage, fromFile(fl, inFlags(err)))
	}
	return cfg, nil
}

// fromFile adds to a configuration error the --config file that set the
// flag it names, when one did.
func fromFile(fl *pflag.FlagSet, err error) error {
	var fe *train.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	name := flagName(fe.Field)
	if f := fl.Lookup(strings.TrimPrefix(name, "--")); f != nil && len(f.Annotations[annFromConfig]) > 0 {
		return fmt.Errorf("%w (%s is set in %s)", err, name, f.Annotations[annFromConfig][0])
	}
	return err
}

// build is the run's configuration, not validated: the model's defaults,
// then every flag the user set.
func (f *trainFlags) build(fl *pflag.FlagSet) (train.Config, error) {
	cfg, err := train.DefaultConfigFor(f.model)
	if err != nil {
		return cfg, fmt.Errorf("%w: %w", errUsage, inFlags(err))
	}
	cfg.ModelArgs = modelArgs(fl)
	set := func(name string, apply func()) {
		if fl.Changed(name) {
			apply()
		}
	}
	set("context", func() { cfg.Context = f.context })
	set("data", func() { cfg.Data = f.data })
	set("vocab", func() { cfg.Vocab = f.vocab })
	set("shuffle", func() { cfg.Shuffle = f.shuffle })
	set("batch", func() { cfg.Batch = f.batch })
	// --steps and --epochs are one choice: the one given counts, and 0
	// leaves it to the other.
	if fl.Changed("steps") && fl.Changed("epochs") && f.steps != 0 && f.epochs != 0 {
		return cfg, fmt.Errorf("%w: --steps %d and --epochs %g: give one (0 leaves the length to the other)", errUsage, f.steps, f.epochs)
	}
	set("steps", func() {
		if cfg.Steps = f.steps; f.steps != 0 {
			cfg.Epochs = 0
		}
	})
	set("epochs", func() {
		if cfg.Epochs = f.epochs; f.epochs != 0 {
			cfg.Steps = 0
		}
	})
	set("accum", func() { cfg.Accum = f.accum })
	// Another optimizer than the model's starts from its own defaults; the
	// model's keeps the model's settings (the MLP's SGD its momentum).
	set("optimizer", func() {
		if !strings.EqualFold(f.optimizer, cfg.Optim.Name) {
			cfg.Optim = optim.DefaultConfig(f.optimizer)
		}
	})
	set("lr", func() { cfg.LR = f.lr })
	set("lr-schedule", func() { cfg.Schedule = train.LRSchedule(f.schedule) })
	set("lr-warmup", func() { cfg.Warmup = f.warmup })
	set("min-lr-factor", func() { cfg.MinLRFactor = f.minLR })
	set("momentum", func() { cfg.Optim.Momentum = f.momentum })
	set("dampening", func() { cfg.Optim.Dampening = f.dampening })
	set("nesterov", func() { cfg.Optim.Nesterov = f.nesterov })
	set("weight-decay", func() { cfg.Optim.WeightDecay = f.weightDecay })
	set("beta1", func() { cfg.Optim.Beta1 = f.beta1 })
	set("beta2", func() { cfg.Optim.Beta2 = f.beta2 })
	set("eps", func() { cfg.Optim.Eps = f.eps })
	set("clip", func() { cfg.ClipNorm = f.clip })
	set("seed", func() { cfg.Seed = f.seed })
	cfg.Init, cfg.Save, cfg.MetricsOut, cfg.MetricsAddr, cfg.DumpDir = f.init, f.save, f.metricsOut, f.metricsAddr, f.dumpDir
	cfg.Precision, cfg.ReduceDType = train.DType(f.precision), train.DType(f.reduceDType)
	cfg.LossScaleInit, cfg.LossScaleWindow, cfg.LossScaleMin = f.lossScaleInit, f.lossScaleWindow, f.lossScaleMin
	cfg.Sync, cfg.SyncEvery, cfg.SyncDType, cfg.OuterNesterov = train.SyncMethod(f.sync), f.syncEvery, train.DType(f.syncDType), f.outerNesterov
	cfg.OuterLR, cfg.OuterMomentum = f.outerLR, f.outerMomentum
	for _, name := range []string{"outer-lr", "outer-momentum"} {
		if fl.Changed(name) && f.sync != "diloco" {
			return cfg, fmt.Errorf("%w: --%s applies with --sync diloco", errUsage, name)
		}
	}
	if fl.Changed("max-staleness") && f.sync != "async" {
		return cfg, fmt.Errorf("%w: --max-staleness applies with --sync async", errUsage)
	}
	cfg.MaxStaleness = f.maxStaleness
	set("max-restarts", func() { cfg.MaxRestarts = f.maxRestarts })
	if fl.Changed("servers") && f.servers < 1 {
		return cfg, fmt.Errorf("%w: --servers must be 1 or more, got %d", errUsage, f.servers)
	}
	set("servers", func() { cfg.Servers = f.servers })
	cfg.EvalEvery, cfg.EvalBatches, cfg.LogEvery = f.evalEvery, f.evalBatches, f.logEvery
	cfg.Device, cfg.Threads = f.device, f.threads
	set("dp", func() { cfg.DP = f.dp })
	set("procs", func() { cfg.Procs = f.procs })
	set("bucket-mb", func() { cfg.BucketMB = f.bucketMB })
	set("check-every", func() { cfg.CheckEvery = f.checkEvery })
	set("transport", func() { cfg.Transport = actors.Transport(f.transport) })
	set("allreduce-algo", func() { cfg.AllReduceAlgo = train.AllReduceAlgo(f.allreduceAlgo) })
	set("collective-timeout", func() { cfg.CollectiveTimeout = f.collTimeout })
	set("step-timeout", func() { cfg.StepTimeout = f.stepTimeout })
	set("straggler-threshold", func() { cfg.StragglerThreshold = f.straggler })
	set("pp", func() { cfg.PP = f.pp })
	set("tp", func() { cfg.TP = f.tp })
	set("zero", func() { cfg.Zero = f.zero })
	set("zero-group", func() { cfg.ZeroGroup = f.zeroGroup })
	set("sequence-parallel", func() { cfg.SequenceParallel = f.sp })
	set("micro-batches", func() { cfg.MicroBatches = f.micro })
	if fl.Changed("schedule") {
		k, err := pipeline.ParseKind(f.pipeSchedule)
		if err != nil {
			return cfg, fmt.Errorf("%w: --schedule %q: want gpipe or 1f1b", errUsage, f.pipeSchedule)
		}
		cfg.PipelineSchedule = k
	}
	set("recompute", func() { cfg.Recompute = f.recompute })
	set("stage-layers", func() { cfg.StageLayers = f.stageLayers })
	set("partition", func() { cfg.Partition = train.Partition(f.partition) })
	set("trace", func() { cfg.Trace = f.trace })
	cfg.CkptDir, cfg.CkptEvery = f.ckptDir, f.ckptEvery
	switch f.resume {
	case "", "false", "never":
	case "auto", "true":
		cfg.Resume = true
	case "require":
		cfg.Resume, cfg.ResumeRequired = true, true
	default:
		return cfg, fmt.Errorf("%w: --resume=%s: want auto (from the latest checkpoint when there is one) or require (fail without one)", errUsage, f.resume)
	}
	set("keep", func() { cfg.Keep = f.keep })
	step, err := cfg.FromCheckpoint(func(field string) bool { return flagSet(fl, field) })
	var fe *train.FieldError
	if errors.As(err, &fe) {
		return cfg, fmt.Errorf("%w: %w", errUsage, inFlags(err))
	}
	if err != nil {
		return cfg, err
	}
	if step >= 0 {
		logger.Debug("the model, data and training options not given come from the checkpoint", zap.String("dir", cfg.CkptDir), zap.Int64("step", step))
	}
	return cfg, nil
}

// flagSet reports whether the command line set a configuration field: Optim
// by any optimizer flag, Steps and Epochs by either (they are one choice).
func flagSet(fl *pflag.FlagSet, field string) bool {
	names := map[string][]string{
		"Optim": {"optimizer", "momentum", "dampening", "nesterov", "weight-decay", "beta1", "beta2", "eps"},
		"Steps": {"steps", "epochs"}, "Epochs": {"steps", "epochs"},
	}[field]
	if names == nil {
		names = []string{strings.TrimPrefix(flagName(field), "--")}
	}
	for _, n := range names {
		if fl.Changed(n) {
			return true
		}
	}
	return false
}

func parseInts(s string) ([]int, error) {
	parts := strings.Split(s, ",")
	out := make([]int, len(parts))
	for i, p := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", p)
		}
		out[i] = v
	}
	return out, nil
}

package cli

import (
	"errors"
	"strings"

	"github.com/troupe-ml/troupe/train"
)

// flagOf names the configuration fields of train.Config and
// train.AgentConfig by the flags that set them, so that a configuration
// error reads in the words the user typed.
var flagOf = map[string]string{
	"Model": "--model", "ModelArgs": "--model",
	"Context": "--context", "Data": "--data", "Vocab": "--vocab", "Shuffle": "--shuffle",
	"Batch": "--batch", "Steps": "--steps", "Epochs": "--epochs", "Accum": "--accum", "Optim": "--optimizer",
	"LR": "--lr", "Schedule": "--lr-schedule", "Warmup": "--lr-warmup", "MinLRFactor": "--min-lr-factor", "ClipNorm": "--clip",
	"Seed": "--seed", "Init": "--init", "Save": "--save", "MetricsOut": "--metrics-out", "MetricsAddr": "--metrics-addr", "DumpDir": "--dump-dir", "EvalEvery": "--eval-every",
	"EvalBatches": "--eval-batches", "LogEvery": "--log-every", "Device": "--device", "Threads": "--threads",
	"DP": "--dp", "Procs": "--procs", "BucketMB": "--bucket-mb", "CheckEvery": "--check-every", "Transport": "--transport", "AllReduceAlgo": "--allreduce-algo",
	"CollectiveTimeout": "--collective-timeout", "StepTimeout": "--step-timeout", "StragglerThreshold": "--straggler-threshold", "PP": "--pp", "TP": "--tp", "SequenceParallel": "--sequence-parallel", "Zero": "--zero", "ZeroGroup": "--zero-group", "Precision": "--precision", "ReduceDType": "--reduce-dtype", "Sync": "--sync", "SyncEvery": "--sync-every", "SyncDType": "--sync-dtype", "OuterLR": "--outer-lr", "OuterMomentum": "--outer-momentum", "OuterNesterov": "--outer-nesterov", "MaxStaleness": "--max-staleness", "MaxRestarts": "--max-restarts", "Servers": "--servers", "LossScaleInit": "--loss-scale-init", "LossScaleWindow": "--loss-scale-window", "LossScaleMin": "--loss-scale-min",
	"MicroBatches": "--micro-batches", "PipelineSchedule": "--schedule", "Recompute": "--recompute",
	"StageLayers": "--stage-layers", "Partition": "--partition", "Trace": "--trace", "CkptDir": "--ckpt-dir",
	"CkptEvery": "--ckpt-every", "Keep": "--keep", "Resume": "--resume", "ResumeRequired": "--resume=require",
	// troupe agent
	"Name": "--name", "Listen": "--listen", "Join": "--join", "MinNodes": "--min-nodes", "MaxNodes": "--max-nodes",
	"Quorum": "--quorum", "Key": "--key", "Timings": "--timings", "JoinTimeout": "--join-timeout",
	"LostStageTimeout": "--lost-stage-timeout", "RdzvTimeout": "--rdzv-timeout", "Rescale": "--rescale", "TLS": "--tls-ca/--tls-cert/--tls-key",
}

// flagName is the flag that sets field (an agent's Train.X is X's).
func flagName(field string) string {
	field = strings.TrimPrefix(field, "Train.")
	if opt, ok := strings.CutPrefix(field, "ModelArgs."); ok {
		return "--" + opt // a model's option is a flag of its own name
	}
	if f, ok := flagOf[field]; ok {
		return f
	}
	return field
}

// inFlags rewrites a configuration error in flag names; other errors come
// back as they are.
func inFlags(err error) error {
	var fe *train.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	return &flagError{msg: fe.Render(flagName), err: err}
}

// flagError is a configuration error said in flags; it unwraps to the
// original (errors.Is(err, train.ErrConfig) holds).
type flagError struct {
	msg string
	err error
}

func (e *flagError) Error() string { return e.msg }
func (e *flagError) Unwrap() error { return e.err }

package train

import (
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/worker"
)

// LRSchedule is the learning rate's course over the run.
type LRSchedule string

const (
	// Constant keeps the rate after the warm-up.
	Constant LRSchedule = "constant"
	// Cosine decays the rate on a cosine to LR × MinLRFactor at the last
	// step, after the warm-up.
	Cosine LRSchedule = "cosine"
)

// Partition is how a model is cut into pipeline stages.
type Partition string

const (
	// ByParams balances the stages' parameter counts.
	ByParams Partition = "params"
	// ByTime balances each unit's forward and backward time, measured on a
	// micro-batch before training.
	ByTime Partition = "time"
)

// DType is a number type as the flags write it: the compute type
// (Precision) and the types gradients and pseudo-gradients travel in
// (ReduceDType, SyncDType). Empty is FP32. kernels.ParseDType also reads
// its other spellings (float32, bfloat16, half…).
type DType string

const (
	// FP32 is IEEE single precision, the default.
	FP32 DType = "fp32"
	// BF16 is bfloat16: fp32's range, 8 bits of mantissa.
	BF16 DType = "bf16"
	// FP16 is IEEE half precision: 11 bits of mantissa, a narrow range
	// (hence the loss scaler).
	FP16 DType = "fp16"
)

// dtypes are DType's values, for errors.
const dtypes = "fp32, bf16 or fp16"

// Valid reports whether d is empty or names a type.
func (d DType) Valid() bool {
	_, err := kernels.ParseDType(string(d))
	return d == "" || err == nil
}

// kernel is d as the kernels' type (F32 when empty or not valid).
func (d DType) kernel() kernels.DType {
	dt, err := kernels.ParseDType(string(d))
	if err != nil {
		return kernels.F32
	}
	return dt
}

// SyncMethod is how the data-parallel replicas synchronise (Config.Sync).
// Empty is SyncStep.
type SyncMethod string

const (
	// SyncStep reduces every step's gradients (PyTorch DDP).
	SyncStep SyncMethod = "step"
	// SyncLocalSGD averages the parameters every SyncEvery steps.
	SyncLocalSGD SyncMethod = "local-sgd"
	// SyncDiLoCo averages the pseudo-gradients every SyncEvery steps and
	// applies them with the outer optimizer.
	SyncDiLoCo SyncMethod = "diloco"
	// SyncAsync trains asynchronously on parameter servers.
	SyncAsync SyncMethod = "async"
)

// syncMethods are SyncMethod's values, for errors.
const syncMethods = "step, local-sgd, diloco or async"

// mode is s as the workers' mode (worker.ParseSyncMode: "" is step,
// "localsgd" local-sgd).
func (s SyncMethod) mode() (worker.SyncMode, error) {
	return worker.ParseSyncMode(string(s))
}

// Valid reports whether s is empty or names a method.
func (s SyncMethod) Valid() bool {
	_, err := s.mode()
	return err == nil
}

// AllReduceAlgo is how gradient all-reduces run (Config.AllReduceAlgo).
type AllReduceAlgo string

const (
	// AllReduceAuto picks by bucket size and placement: recursive
	// doubling for small buckets, hierarchical across hosts of several
	// ranks each, the ring otherwise.
	AllReduceAuto AllReduceAlgo = "auto"
	// AllReduceRing always runs the ring (NCCL_ALGO=Ring).
	AllReduceRing AllReduceAlgo = "ring"
)

// Valid reports whether a names an algorithm.
func (a AllReduceAlgo) Valid() bool { return a == AllReduceAuto || a == AllReduceRing }

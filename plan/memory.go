package plan

import (
	"fmt"
	"math"
)

// DefaultBytesPerParam is the mixed-precision Adam recipe: fp16 weight (2) +
// fp16 gradient (2) + fp32 master weight, momentum and variance (4+4+4).
const DefaultBytesPerParam = 16

// DefaultOptimizerBytesPerParam is K in the ZeRO paper (Rajbhandari et al.,
// 2020): the fp32 master weight, momentum and variance of mixed-precision
// Adam, 4+4+4 bytes per parameter.
const DefaultOptimizerBytesPerParam = 12

// The model states besides the optimizer's: an fp16 weight and an fp16
// gradient per parameter.
const (
	weightBytesPerParam   = 2
	gradientBytesPerParam = 2
)

// MemoryConfig asks how much memory a model's training state takes with no
// sharding, and how many devices it needs.
//
// The model counts model states only (weights, gradients, optimizer states):
// activations, communication buffers, workspace and fragmentation come on
// top, as in the ZeRO paper's accounting.
type MemoryConfig struct {
	// Params is the number of parameters N.
	Params int64
	// BytesPerParam is B, the bytes of training state per parameter;
	// DefaultBytesPerParam (16) for mixed-precision Adam. It may be
	// fractional (quantised states).
	BytesPerParam float64
	// DeviceMem is one device's memory M in bytes. Zero means "not given":
	// the result then reports the total only and no device count.
	DeviceMem int64
}

// DefaultMemoryConfig returns a config for n parameters with the
// mixed-precision Adam recipe and no device size.
func DefaultMemoryConfig(n int64) MemoryConfig {
	return MemoryConfig{Params: n, BytesPerParam: DefaultBytesPerParam}
}

// Validate reports the first input the model cannot use.
func (c MemoryConfig) Validate() error {
	if c.Params <= 0 {
		return fmt.Errorf("%w: params %d must be positive", ErrInvalidConfig, c.Params)
	}
	if !(c.BytesPerParam > 0) || math.IsInf(c.BytesPerParam, 0) {
		return fmt.Errorf("%w: bytes per parameter %v must be positive and finite", ErrInvalidConfig, c.BytesPerParam)
	}
	if c.DeviceMem < 0 {
		return fmt.Errorf("%w: device memory %d must not be negative", ErrInvalidConfig, c.DeviceMem)
	}
	return nil
}

// MemoryResult is the unsharded footprint. Byte counts are whole bytes,
// rounded up.
type MemoryResult struct {
	Params        int64   `json:"params"`
	BytesPerParam float64 `json:"bytes_per_param"`
	// TotalBytes is N·B.
	TotalBytes float64 `json:"total_bytes"`
	// DeviceMemBytes and MinDevices are present only when a device size
	// was given. MinDevices is ceil(total / M): the fewest devices whose
	// memories together hold the state with nothing replicated.
	DeviceMemBytes int64 `json:"device_mem_bytes,omitempty"`
	MinDevices     int64 `json:"min_devices,omitempty"`
}

// Memory computes the unsharded footprint of cfg.
func Memory(cfg MemoryConfig) (MemoryResult, error) {
	if err := cfg.Validate(); err != nil {
		return MemoryResult{}, err
	}
	r := MemoryResult{
		Params:        cfg.Params,
		BytesPerParam: cfg.BytesPerParam,
		TotalBytes:    math.Ceil(float64(cfg.Params) * cfg.BytesPerParam),
	}
	if math.IsInf(r.TotalBytes, 0) {
		return MemoryResult{}, fmt.Errorf("%w: %d params × %v bytes overflows", ErrInvalidConfig, cfg.Params, cfg.BytesPerParam)
	}
	if cfg.DeviceMem > 0 {
		r.DeviceMemBytes = cfg.DeviceMem
		r.MinDevices = ceilDiv(r.TotalBytes, float64(cfg.DeviceMem))
	}
	return r, nil
}

// ZeROConfig asks for the per-device model states under ZeRO data
// parallelism.
type ZeROConfig struct {
	// Params is the number of parameters N.
	Params int64
	// Stage is the ZeRO stage: 0 replicates everything (plain DDP), 1
	// shards the optimizer states, 2 also the gradients, 3 also the weights.
	Stage int
	// DP is the number of data-parallel devices D the states are sharded
	// over.
	DP int
	// K is the optimizer bytes per parameter; DefaultOptimizerBytesPerParam
	// (12) for mixed-precision Adam.
	K float64
	// WeightBytes and GradBytes are the bytes of a weight and a gradient
	// (0: 2, the paper's fp16; 4 for fp32 training such as troupe's).
	WeightBytes, GradBytes float64
	// DeviceMem is one device's memory M in bytes; zero means not given and
	// the result carries no verdict.
	DeviceMem int64
}

// DefaultZeROConfig returns a config for n parameters at the given stage
// over dp devices, with Adam's K = 12 and no device size.
func DefaultZeROConfig(n int64, stage, dp int) ZeROConfig {
	return ZeROConfig{Params: n, Stage: stage, DP: dp, K: DefaultOptimizerBytesPerParam}
}

// Validate reports the first input the model cannot use.
func (c ZeROConfig) Validate() error {
	if c.Params <= 0 {
		return fmt.Errorf("%w: params %d must be positive", ErrInvalidConfig, c.Params)
	}
	if c.Stage < 0 || c.Stage > 3 {
		return fmt.Errorf("%w: ZeRO stage %d: want 0, 1, 2 or 3", ErrInvalidConfig, c.Stage)
	}
	if c.DP <= 0 {
		return fmt.Errorf("%w: data-parallel degree %d must be positive", ErrInvalidConfig, c.DP)
	}
	if !(c.K >= 0) || math.IsInf(c.K, 0) {
		return fmt.Errorf("%w: optimizer bytes per parameter K %v must be finite and not negative", ErrInvalidConfig, c.K)
	}
	if !(c.WeightBytes >= 0) || !(c.GradBytes >= 0) || math.IsInf(c.WeightBytes+c.GradBytes, 0) {
		return fmt.Errorf("%w: weight and gradient bytes %v, %v must be finite and not negative", ErrInvalidConfig, c.WeightBytes, c.GradBytes)
	}
	if c.DeviceMem < 0 {
		return fmt.Errorf("%w: device memory %d must not be negative", ErrInvalidConfig, c.DeviceMem)
	}
	return nil
}

// ZeROResult is one device's share of the model states. Sharded states are
// counted for the largest shard, ceil(N/D) parameters, because that is the
// one that must fit; when D divides N this is exactly the paper's N/D.
type ZeROResult struct {
	Params int64   `json:"params"`
	Stage  int     `json:"zero_stage"`
	DP     int     `json:"dp"`
	K      float64 `json:"k"`
	// BytesPerParam is 2 + 2 + K and TotalBytes (2 + 2 + K)·N, the states
	// of the whole model counted once.
	BytesPerParam float64 `json:"bytes_per_param"`
	TotalBytes    float64 `json:"total_bytes"`
	// WeightBytes, GradientBytes and OptimizerBytes are one device's share
	// of each kind of state; PerDeviceBytes is their sum.
	WeightBytes    float64 `json:"weight_bytes"`
	GradientBytes  float64 `json:"gradient_bytes"`
	OptimizerBytes float64 `json:"optimizer_bytes"`
	PerDeviceBytes float64 `json:"per_device_bytes"`
	// DeviceMemBytes and Fits (PerDeviceBytes ≤ M) are present only when a
	// device size was given.
	DeviceMemBytes int64 `json:"device_mem_bytes,omitempty"`
	Fits           *bool `json:"fits,omitempty"`
}

// ZeRO computes one device's model states under ZeRO stage cfg.Stage:
//
//	stage 0: (2 + 2 + K)·N
//	stage 1: (2 + 2 + K/D)·N   optimizer states sharded
//	stage 2: (2 + (2 + K)/D)·N also gradients
//	stage 3: (2 + 2 + K)·N/D   also weights
func ZeRO(cfg ZeROConfig) (ZeROResult, error) {
	if err := cfg.Validate(); err != nil {
		return ZeROResult{}, err
	}
	n := float64(cfg.Params)
	shard := float64((cfg.Params + int64(cfg.DP) - 1) / int64(cfg.DP))
	weightParams, gradParams, optParams := n, n, n
	if cfg.Stage >= 1 {
		optParams = shard
	}
	if cfg.Stage >= 2 {
		gradParams = shard
	}
	if cfg.Stage >= 3 {
		weightParams = shard
	}
	wb, gb := cfg.WeightBytes, cfg.GradBytes
	if wb == 0 {
		wb = weightBytesPerParam
	}
	if gb == 0 {
		gb = gradientBytesPerParam
	}
	r := ZeROResult{
		Params:         cfg.Params,
		Stage:          cfg.Stage,
		DP:             cfg.DP,
		K:              cfg.K,
		BytesPerParam:  wb + gb + cfg.K,
		WeightBytes:    wb * weightParams,
		GradientBytes:  gb * gradParams,
		OptimizerBytes: math.Ceil(cfg.K * optParams),
	}
	r.TotalBytes = math.Ceil(r.BytesPerParam * n)
	if math.IsInf(r.TotalBytes, 0) || math.IsInf(r.OptimizerBytes, 0) {
		return ZeROResult{}, fmt.Errorf("%w: %d params × K %v overflows", ErrInvalidConfig, cfg.Params, cfg.K)
	}
	r.PerDeviceBytes = r.WeightBytes + r.GradientBytes + r.OptimizerBytes
	if cfg.DeviceMem > 0 {
		r.DeviceMemBytes = cfg.DeviceMem
		fits := r.PerDeviceBytes <= float64(cfg.DeviceMem)
		r.Fits = &fits
	}
	return r, nil
}

// ceilDiv returns ceil(a/b) for whole, positive a and b. Both are exact
// integers in float64 here, and when they fit in uint64 the division is done
// in integers so that an exact multiple never rounds up to one device more.
func ceilDiv(a, b float64) int64 {
	if a < 1<<63 && b < 1<<63 {
		x, y := uint64(a), uint64(b)
		q := x / y
		if x%y != 0 {
			q++
		}
		return int64(q)
	}
	q := math.Ceil(a / b)
	if q >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

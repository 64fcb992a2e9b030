package plan

import "fmt"

// PrecisionRow is the training state one device holds per parameter in
// troupe, for one precision and ZeRO stage over DP replicas: fp32 weights
// (the masters, under mixed precision), their bf16/fp16 compute copies,
// fp32 gradients and the optimizer's state, as troupe lays them out, and
// the ZeRO paper's figure for the same stage (mixed-precision Adam: fp16
// weight 2 + fp16 gradient 2 + K = 12, Rajbhandari et al., 2020).
type PrecisionRow struct {
	Precision string `json:"precision"`
	Stage     int    `json:"zero_stage"`
	DP        int    `json:"dp"`
	// Bytes per parameter on one device, by kind, and in all.
	Weight    float64 `json:"weight_bytes_per_param"`
	Compute   float64 `json:"compute_copy_bytes_per_param"`
	Gradient  float64 `json:"gradient_bytes_per_param"`
	Optimizer float64 `json:"optimizer_bytes_per_param"`
	Total     float64 `json:"bytes_per_param"`
	// Paper is the ZeRO paper's bytes per parameter for the stage (0
	// for fp32, which the paper does not tabulate).
	Paper float64 `json:"zero_paper_bytes_per_param"`
	// DeviceBytes is Total·Params when Params was given.
	DeviceBytes float64 `json:"device_bytes,omitempty"`
}

// PrecisionTable is troupe's per-device training state for each precision
// in precisions ("fp32", "bf16", "fp16") and each ZeRO stage in stages,
// over dp replicas, with optBytes bytes of optimizer state per parameter
// (8 for AdamW's two moments, 4 for SGD's momentum) and, when params > 0,
// the bytes for that many parameters.
//
// ZeRO-1 shards the optimizer state, ZeRO-2 the gradients too, ZeRO-3 the
// weights too; under ZeRO-1 and 2 every replica holds the whole fp32
// weights (it updates its shard and all-gathers the rest). The compute
// copies are whole below stage 3; at stage 3 only the layer being
// computed is present (a transient, not counted, like the gathered fp32
// layer).
func PrecisionTable(precisions []string, stages []int, dp int, optBytes float64, params int64) ([]PrecisionRow, error) {
	if dp < 1 {
		return nil, fmt.Errorf("%w: dp %d must be positive", ErrInvalidConfig, dp)
	}
	if !(optBytes >= 0) {
		return nil, fmt.Errorf("%w: optimizer bytes %v must not be negative", ErrInvalidConfig, optBytes)
	}
	d := float64(dp)
	var rows []PrecisionRow
	for _, p := range precisions {
		compute := 0.0
		switch p {
		case "fp32":
		case "bf16", "fp16":
			compute = 2
		default:
			return nil, fmt.Errorf("%w: precision %q: want fp32, bf16 or fp16", ErrInvalidConfig, p)
		}
		for _, s := range stages {
			if s < 0 || s > 3 {
				return nil, fmt.Errorf("%w: ZeRO stage %d: want 0 to 3", ErrInvalidConfig, s)
			}
			r := PrecisionRow{Precision: p, Stage: s, DP: dp, Weight: 4, Compute: compute, Gradient: 4, Optimizer: optBytes}
			if s >= 1 {
				r.Optimizer /= d
			}
			if s >= 2 {
				r.Gradient /= d
			}
			if s >= 3 {
				r.Weight /= d
				r.Compute = 0
			}
			r.Total = r.Weight + r.Compute + r.Gradient + r.Optimizer
			if compute > 0 {
				const k = DefaultOptimizerBytesPerParam
				r.Paper = [...]float64{2 + 2 + k, 2 + 2 + k/d, 2 + (2+k)/d, (2 + 2 + k) / d}[s]
			}
			if params > 0 {
				r.DeviceBytes = r.Total * float64(params)
			}
			rows = append(rows, r)
		}
	}
	return rows, nil
}

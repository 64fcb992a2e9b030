package plan

import (
	"fmt"
	"math"
)

// TPBlockCommBytes is what one tensor-parallel rank sends over a ring of t
// for one transformer block and one micro-batch, forward and backward,
// whose activation has sbh elements of bytes bytes each. Without sequence
// parallelism that is four all-reduces (Megatron-LM's f and g for
// attention and for the MLP), 8(t − 1)/t · sbh · bytes. With it the
// all-reduces become a reduce-scatter and an all-gather each, the same
// 8(t − 1)/t, plus 2(t − 1)/t for the column-parallel layers' inputs that
// the backward pass gathers again (Korthikanti et al. 2022 overlap that
// gather with the input gradient; troupe runs it before).
func TPBlockCommBytes(sbh float64, t int, sp bool, bytes float64) float64 {
	if t <= 1 {
		return 0
	}
	f := float64(t-1) / float64(t)
	n := 8 * f * sbh * bytes
	if sp {
		n += 2 * f * sbh * bytes
	}
	return n
}

// ActivationBytesPerLayer is Korthikanti et al. 2022's activation memory of
// one transformer layer (Table 2), in bytes, for 16-bit activations with
// dropout: s·b·h·(34 + 5·a·s/h) without parallelism; with t
// tensor-parallel shards s·b·h·(10 + 24/t + 5·a·s/(h·t)) (the LayerNorm
// and dropout inputs, 10·s·b·h, stay whole on every shard); with sequence
// parallelism as well s·b·h/t·(34 + 5·a·s/h). a is the head count.
func ActivationBytesPerLayer(s, b, h, a, t int, sp bool) float64 {
	sbh := float64(s) * float64(b) * float64(h)
	attn := 5 * float64(a) * float64(s) / float64(h)
	switch {
	case t <= 1:
		return sbh * (34 + attn)
	case sp:
		return sbh / float64(t) * (34 + attn)
	}
	return sbh * (10 + 24/float64(t) + attn/float64(t))
}

// TPConfig is a GPT and a 3D layout: what troupe plan tp models.
type TPConfig struct {
	// Seq, MicroBatch, Hidden, Heads, Layers and Vocab shape the GPT (s,
	// b, h, a, L, V).
	Seq, MicroBatch, Hidden, Heads, Layers, Vocab int
	// TP, PP and DP are the mesh; SP adds sequence parallelism.
	TP, PP, DP int
	SP         bool
	// ActBytes is the bytes of an activation element on the wire (4 for
	// fp32, 2 for bf16).
	ActBytes float64
	// StateBytesPerParam is the training state per parameter (16 for
	// fp32 AdamW: weight, gradient, two moments).
	StateBytesPerParam float64
}

// Validate reports the first input the model cannot use.
func (c TPConfig) Validate() error {
	for _, v := range []struct {
		name string
		n    int
	}{{"seq", c.Seq}, {"micro-batch", c.MicroBatch}, {"hidden", c.Hidden}, {"heads", c.Heads}, {"layers", c.Layers},
		{"vocab", c.Vocab}, {"tp", c.TP}, {"pp", c.PP}, {"dp", c.DP}} {
		if v.n <= 0 {
			return fmt.Errorf("%w: %s %d must be positive", ErrInvalidConfig, v.name, v.n)
		}
	}
	switch {
	case c.Hidden%c.Heads != 0:
		return fmt.Errorf("%w: hidden %d is not divisible by %d heads", ErrInvalidConfig, c.Hidden, c.Heads)
	case c.Heads%c.TP != 0:
		return fmt.Errorf("%w: %d heads cannot be split among %d tensor-parallel shards", ErrInvalidConfig, c.Heads, c.TP)
	case c.SP && c.TP == 1:
		return fmt.Errorf("%w: sequence parallelism needs tp > 1", ErrInvalidConfig)
	case c.SP && c.Seq%c.TP != 0:
		return fmt.Errorf("%w: sequence parallelism splits the sequence %d among %d shards, which must divide it", ErrInvalidConfig, c.Seq, c.TP)
	case c.PP > c.Layers:
		return fmt.Errorf("%w: %d pipeline stages for %d layers", ErrInvalidConfig, c.PP, c.Layers)
	case !(c.ActBytes > 0) || !(c.StateBytesPerParam > 0) || math.IsInf(c.ActBytes+c.StateBytesPerParam, 0):
		return fmt.Errorf("%w: bytes per activation %v and per parameter %v must be positive and finite", ErrInvalidConfig, c.ActBytes, c.StateBytesPerParam)
	}
	return nil
}

// TPResult is the tensor-parallel terms of one layout.
type TPResult struct {
	TPConfig
	// CommBytesPerLayer is what one rank sends for one layer and one
	// micro-batch (TPBlockCommBytes), without and with sequence
	// parallelism, and CommBytesPerStep that of the layout for a whole
	// step of the rank's layers (per micro-batch).
	CommBytesPerLayer   float64 `json:"comm_bytes_per_layer"`
	CommBytesPerLayerSP float64 `json:"comm_bytes_per_layer_sp"`
	// ActivationBytesPerLayer is Korthikanti et al.'s per-layer
	// activation memory without tensor parallelism, with t shards, and
	// with t shards and sequence parallelism (16-bit activations with
	// dropout, as in the paper).
	ActivationBytesPerLayer   float64 `json:"activation_bytes_per_layer"`
	ActivationBytesPerLayerTP float64 `json:"activation_bytes_per_layer_tp"`
	ActivationBytesPerLayerSP float64 `json:"activation_bytes_per_layer_sp"`
	// Params is the whole model's parameter count; ParamsPerDevice the
	// most any rank of the layout holds (the first or the last stage's
	// shard: the embeddings, or the tied head's copy, ride on them).
	Params          int64 `json:"params"`
	ParamsPerDevice int64 `json:"params_per_device"`
	// StateBytesPerDevice is ParamsPerDevice · StateBytesPerParam.
	StateBytesPerDevice float64 `json:"state_bytes_per_device"`
	// Devices is DP·PP·TP.
	Devices int `json:"devices"`
}

// TensorParallel computes the TP terms of cfg. Parameters follow troupe's
// GPT (tied head, learned positions, biases, pre-LayerNorm blocks): a
// block has 12h² + 13h, of which a shard holds (12h² + 7h)/t (qkv and fc
// with their biases, proj and out without) and 6h whole (two LayerNorms,
// the proj and out biases); the token table is vocabulary-parallel
// (padded to a multiple of t), the positions and the final LayerNorm
// whole; a last stage that is not the first keeps a copy of its shard of
// the token table for the tied head.
func TensorParallel(cfg TPConfig) (TPResult, error) {
	if err := cfg.Validate(); err != nil {
		return TPResult{}, err
	}
	s, b, h, a, t := cfg.Seq, cfg.MicroBatch, cfg.Hidden, cfg.Heads, cfg.TP
	sbh := float64(s) * float64(b) * float64(h)
	r := TPResult{TPConfig: cfg, Devices: cfg.DP * cfg.PP * cfg.TP}
	r.CommBytesPerLayer = TPBlockCommBytes(sbh, t, false, cfg.ActBytes)
	r.CommBytesPerLayerSP = TPBlockCommBytes(sbh, t, true, cfg.ActBytes)
	r.ActivationBytesPerLayer = ActivationBytesPerLayer(s, b, h, a, 1, false)
	r.ActivationBytesPerLayerTP = ActivationBytesPerLayer(s, b, h, a, t, false)
	if t > 1 && s%t == 0 {
		r.ActivationBytesPerLayerSP = ActivationBytesPerLayer(s, b, h, a, t, true)
	}
	H, V, T := int64(h), int64(cfg.Vocab), int64(t)
	block := 12*H*H + 13*H
	blockShard := (12*H*H+7*H)/T + 6*H
	vocabShard := (V + T - 1) / T * H
	r.Params = int64(cfg.Layers)*block + V*H + int64(s)*H + 2*H
	// Layers per stage: the first L mod P stages take one more.
	perStage := func(st int) int64 {
		n := int64(cfg.Layers / cfg.PP)
		if st < cfg.Layers%cfg.PP {
			n++
		}
		return n
	}
	first := perStage(0)*blockShard + vocabShard + int64(s)*H
	last := perStage(cfg.PP-1)*blockShard + 2*H
	if cfg.PP == 1 {
		r.ParamsPerDevice = first + 2*H
	} else {
		r.ParamsPerDevice = max(first, last+vocabShard)
	}
	r.StateBytesPerDevice = float64(r.ParamsPerDevice) * cfg.StateBytesPerParam
	return r, nil
}

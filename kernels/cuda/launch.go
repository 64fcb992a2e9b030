//go:build cuda

package cuda

import (
	"math"
)

// kernel names an extern "C" function of kernels.cu.
type kernel int

const (
	kAxpy kernel = iota
	kScale
	kAdd
	kAddBias
	kReLU
	kReLUBackward
	kGELU
	kGELUBackward
	kReducePartial
	kReduceFinal
	kSumRows
	kLayerNorm
	kLayerNormDx
	kLayerNormParams
	kCheckIds
	kEmbedding
	kEmbeddingBackward
	kSoftmaxXent
	kArgmaxCorrect
	kCausalSoftmax
	kSoftmaxBackward
	kTranspose
	kSGD
	kAdamW
	kGemmF32
	kGemmF32Big
	kGemmTF32
	kConvert
	kFill16
	kGemmLow
	kRowMax
	kShardLogitStats
	kShardXent
	numKernels
)

// kernelSpecs are the functions' names in kernels.cu and their parameter
// counts (the emulator checks every launch against the count).
var kernelSpecs = [numKernels]struct {
	name  string
	nargs int
}{
	kAxpy:              {"k_axpy", 4},
	kScale:             {"k_scale", 3},
	kAdd:               {"k_add", 4},
	kAddBias:           {"k_add_bias", 4},
	kReLU:              {"k_relu", 5},
	kReLUBackward:      {"k_relu_backward", 7},
	kGELU:              {"k_gelu", 5},
	kGELUBackward:      {"k_gelu_backward", 7},
	kReducePartial:     {"k_reduce_partial", 4},
	kReduceFinal:       {"k_reduce_final", 3},
	kSumRows:           {"k_sum_rows", 5},
	kLayerNorm:         {"k_layernorm", 9},
	kLayerNormDx:       {"k_layernorm_dx", 9},
	kLayerNormParams:   {"k_layernorm_params", 9},
	kCheckIds:          {"k_check_ids", 5},
	kEmbedding:         {"k_embedding", 7},
	kEmbeddingBackward: {"k_embedding_backward", 7},
	kSoftmaxXent:       {"k_softmax_xent", 8},
	kArgmaxCorrect:     {"k_argmax_correct", 6},
	kCausalSoftmax:     {"k_causal_softmax", 5},
	kSoftmaxBackward:   {"k_softmax_backward", 7},
	kTranspose:         {"k_transpose", 16},
	kSGD:               {"k_sgd", 10},
	kAdamW:             {"k_adamw", 13},
	kGemmF32:           {"k_gemm_f32", 17},
	kGemmF32Big:        {"k_gemm_f32_128", 17},
	kGemmTF32:          {"k_gemm_tf32", 17},
	kConvert:           {"k_convert", 5},
	kFill16:            {"k_fill16", 3},
	kGemmLow:           {"k_gemm_low", 19},
	kRowMax:            {"k_row_max", 5},
	kShardLogitStats:   {"k_shard_logit_stats", 9},
	kShardXent:         {"k_shard_xent", 12},
}

func (k kernel) String() string { return kernelSpecs[k].name }

// Block sizes the kernels are written for (kernels.cu's RB, EB_COLS and the
// GEMM thread counts).
const (
	blockThreads   = 256
	embBwdThreads  = 128
	embBwdCols     = 128
	gemmTile       = 64
	gemmTileBig    = 128
	tcTile         = 128
	errCodeEmb     = 1
	errCodeEmbBwd  = 2
	errCodeXent    = 3
	errCodeArgmax  = 4
	errFlagWords   = 3
	countWords     = 1
	reduceOutBytes = 8
)

// Kernel arguments: one 8-byte word each. A float or int parameter reads
// the low half of its word (little-endian), a pointer or long long all of it.

func (b *Buf) arg() uint64 {
	if b == nil {
		return 0
	}
	return uint64(b.ptr)
}

func (x *Ids) arg() uint64 { return uint64(x.ptr) }

func argInt(n int) uint64 { return uint64(int64(n)) }

func argF32(v float32) uint64 { return uint64(math.Float32bits(v)) }

func argBool(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// grid1 is the block count for a grid-stride loop over n items, blockThreads
// a block: enough blocks to fill the GPU several times over and no more
// (every kernel loops, so fewer blocks than items is always correct).
func (be *Backend) grid1(n int) int {
	return max(1, min((n+blockThreads-1)/blockThreads, be.maxBlocks))
}

// gridRows is the block count for kernels that run one block per row.
func (be *Backend) gridRows(rows int) int {
	return max(1, min(rows, be.maxRowBlocks))
}

// launch queues kernel k; a launch failure is kept for the next Sync.
func (be *Backend) launch(k kernel, grid, block [3]int, args ...uint64) {
	be.check()
	be.loop.post(func() {
		if be.devErr != nil {
			return
		}
		if err := be.drv.launch(k, grid, block, args); err != nil {
			be.devErr = driverErr("launching "+k.String(), err)
		}
	})
}

// launch1 launches k over n items with the default block.
func (be *Backend) launch1(k kernel, n int, args ...uint64) {
	if n == 0 {
		return
	}
	be.launch(k, [3]int{be.grid1(n), 1, 1}, [3]int{blockThreads, 1, 1}, args...)
}

// launchRows launches row kernel k over rows rows.
func (be *Backend) launchRows(k kernel, rows int, args ...uint64) {
	if rows == 0 {
		return
	}
	be.launch(k, [3]int{be.gridRows(rows), 1, 1}, [3]int{blockThreads, 1, 1}, args...)
}

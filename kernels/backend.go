package kernels

// Buffer is a flat array of float32 values in a backend's memory. A Buffer is
// only valid with the backend that allocated it (or a View of such a buffer).
type Buffer interface {
	// Len is the number of float32 elements.
	Len() int
}

// Index is a flat array of int32 values in a backend's memory: token ids,
// class labels, targets. A negative target is ignored by the loss kernels
// (PyTorch's ignore_index).
type Index interface {
	// Len is the number of int32 elements.
	Len() int
}

// Capabilities says what a backend is and what it can do.
type Capabilities struct {
	// Device names the device, e.g. "cpu" or "cuda:0".
	Device string
	// SIMD names the vector path the hot kernels take, e.g. "avx2+fma" or "generic".
	SIMD string
	// Threads is the number of OS threads the backend uses for one kernel.
	Threads int
	// TensorCores is true when GEMM runs on matrix units (TF32/BF16).
	TensorCores bool
	// LowGemm names the path a bf16 GEMM takes (kernels.LowPrecision),
	// e.g. "avx512bf16" or "widen+avx2+fma"; empty without one.
	LowGemm string
	// MemoryBytes is the device memory, 0 when it is host memory.
	MemoryBytes int64
}

// GemmArgs describe C = Alpha·op(A)·op(B) + Beta·C over row-major matrices,
// optionally batched with constant strides (cuBLAS's strided-batched form).
//
// op(A) is M×K: A is stored M×K, or K×M when TransA. op(B) is K×N: B is stored
// K×N, or N×K when TransB. A zero leading dimension means "packed": the row
// length of the stored matrix (K or M for A, N or K for B, N for C).
type GemmArgs struct {
	TransA, TransB bool
	M, N, K        int
	Alpha, Beta    float32
	LDA, LDB, LDC  int
	// Batch is the number of independent products; 0 means 1.
	Batch int
	// StrideA, StrideB, StrideC are the element distances between consecutive
	// batch members; 0 with Batch > 1 means packed (the matrix size).
	StrideA, StrideB, StrideC int
}

// Normalize fills the derived leading dimensions and strides and returns the
// result; it does not check sizes (see Check).
func (g GemmArgs) Normalize() GemmArgs {
	if g.Batch <= 0 {
		g.Batch = 1
	}
	if g.LDA == 0 {
		if g.TransA {
			g.LDA = g.M
		} else {
			g.LDA = g.K
		}
	}
	if g.LDB == 0 {
		if g.TransB {
			g.LDB = g.K
		} else {
			g.LDB = g.N
		}
	}
	if g.LDC == 0 {
		g.LDC = g.N
	}
	if g.StrideA == 0 {
		if g.TransA {
			g.StrideA = g.K * g.LDA
		} else {
			g.StrideA = g.M * g.LDA
		}
	}
	if g.StrideB == 0 {
		if g.TransB {
			g.StrideB = g.N * g.LDB
		} else {
			g.StrideB = g.K * g.LDB
		}
	}
	if g.StrideC == 0 {
		g.StrideC = g.M * g.LDC
	}
	return g
}

// Backend is a device's kernels. Every model computation in troupe goes
// through one, so that a model runs unchanged on the CPU or a GPU.
//
// Threading: a Backend is owned by one goroutine (a Worker's device loop);
// its methods are never called concurrently on the same backend.
//
// Errors: kernels may run asynchronously (a GPU stream). Misuse that the
// caller can prevent (mismatched lengths) panics, as an index out of range
// does; device failures are reported by the next Sync.
//
// Semantics: unless a comment says "accumulates", an output is overwritten.
// All matrices are row-major. Outputs never alias inputs, except in the
// element-wise kernels (Axpy, Scale, Add, ReLU, ReLUBackward, GELU,
// GELUBackward), where an output may be any of the inputs.
type Backend interface {
	// Caps describes the backend.
	Caps() Capabilities

	// Alloc returns a zeroed buffer of n float32 values.
	Alloc(n int) Buffer
	// AllocIndex returns a zeroed buffer of n int32 values.
	AllocIndex(n int) Index
	// Free releases a buffer allocated by Alloc (not a View). Using it
	// afterwards is an error. The CPU backend leaves it to the GC.
	Free(b Buffer)
	// FreeIndex releases an index buffer.
	FreeIndex(x Index)
	// View is the n values of b starting at off; it shares b's memory.
	View(b Buffer, off, n int) Buffer

	// Upload copies host values into dst (len(src) == dst.Len()).
	Upload(dst Buffer, src []float32)
	// Download copies src into host memory (len(dst) == src.Len()).
	Download(dst []float32, src Buffer)
	// UploadIndex copies host ids into dst.
	UploadIndex(dst Index, src []int32)
	// Copy copies src into dst (same length).
	Copy(dst, src Buffer)
	// Fill sets every element of x to v.
	Fill(x Buffer, v float32)
	// Sync waits for queued kernels and reports a device failure.
	Sync() error

	// Gemm computes C = Alpha·op(A)·op(B) + Beta·C (see GemmArgs).
	Gemm(g GemmArgs, a, b, c Buffer)

	// Axpy computes y += alpha·x.
	Axpy(alpha float32, x, y Buffer)
	// Scale computes x *= alpha.
	Scale(x Buffer, alpha float32)
	// Add computes dst = a + b; dst may alias a or b.
	Add(dst, a, b Buffer)
	// AddBias adds bias[c] to every row of y ([rows, len(bias)]), in place.
	AddBias(y, bias Buffer)
	// SumRows accumulates the column sums of x ([rows, len(dst)]):
	// dst[c] += Σ_r x[r, c]. It is the gradient of AddBias. x may be
	// 16-bit (LowPrecision), widened as it is read: the sums of its fp32
	// widening, bit for bit.
	SumRows(dst, x Buffer)
	// Sum returns Σ x in float64 (a sync point).
	Sum(x Buffer) float64
	// SumSquares returns Σ x² in float64 (a sync point).
	SumSquares(x Buffer) float64

	// ReLU computes y = max(x, 0). x and y may be of the backend's 16-bit
	// types (LowPrecision): x is widened as it is read, y computed in fp32
	// and rounded once, bit for bit the fp32 result rounded.
	ReLU(y, x Buffer)
	// ReLUBackward computes dx = dy where x > 0, else 0. x, the activation
	// the forward pass saved, may be of the backend's 16-bit types
	// (LowPrecision): it is widened as it is read, bit for bit the result
	// of its fp32 widening. So may dy (a gradient kept in the compute
	// type), and dx, computed in fp32 and rounded once; dx may be dy.
	ReLUBackward(dx, dy, x Buffer)
	// GELU computes the exact (erf) GELU, PyTorch's nn.GELU() default; x
	// and y may be 16-bit, as ReLU's.
	GELU(y, x Buffer)
	// GELUBackward computes dx = dy·GELU'(x); x, dy and dx may be 16-bit,
	// as for ReLUBackward.
	GELUBackward(dx, dy, x Buffer)

	// LayerNorm normalises each row of x ([rows, cols], cols = len(gamma)):
	// y = (x − mean)·rstd·gamma + beta, and saves mean and rstd ([rows]) for
	// the backward pass. Variance is biased, as in PyTorch.
	LayerNorm(y, mean, rstd, x, gamma, beta Buffer, eps float32)
	// LayerNormBackward computes dx (overwritten) and accumulates dgamma and
	// dbeta; x may be 16-bit, as for ReLUBackward.
	LayerNormBackward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma Buffer)

	// Embedding gathers rows: y[i, :] = table[ids[i], :] with y [len(ids), d].
	Embedding(y, table Buffer, ids Index)
	// EmbeddingBackward accumulates dtable[ids[i], :] += dy[i, :].
	EmbeddingBackward(dtable, dy Buffer, ids Index)

	// SoftmaxCrossEntropy computes, for each row r of logits ([rows, cols],
	// rows = len(targets)), losses[r] = −log softmax(logits[r])[targets[r]],
	// or 0 when targets[r] < 0. When dlogits is non-nil it also writes the
	// gradient of gradScale·Σ losses: (softmax − onehot)·gradScale (zero rows
	// for ignored targets).
	SoftmaxCrossEntropy(losses, dlogits, logits Buffer, targets Index, gradScale float32)
	// ShardEmbedding gathers rows of a shard of an embedding table that
	// holds ids [lo, lo+rows): y[i, :] = table[ids[i]−lo, :], and zeros for
	// an id outside the shard (a vocabulary-parallel embedding's part, summed
	// over the shards afterwards).
	ShardEmbedding(y, table Buffer, ids Index, lo int)
	// ShardEmbeddingBackward accumulates dtable[ids[i]−lo, :] += dy[i, :]
	// for the ids inside the shard and skips the others.
	ShardEmbeddingBackward(dtable, dy Buffer, ids Index, lo int)
	// RowMax writes dst[r] = the largest of the first valid values of row r
	// of x ([rows, cols], rows = dst.Len(), 0 ≤ valid ≤ cols), or −Inf when
	// valid is 0: the shard's part of a vocabulary-parallel softmax's row
	// maximum (the columns past valid are the padding of a vocabulary the
	// shard count does not divide).
	RowMax(dst, x Buffer, valid int)
	// ShardLogitStats is a shard's part of a vocabulary-parallel
	// cross-entropy. x ([rows, cols], rows = len(targets)) holds logit
	// columns [lo, lo+cols) of which the first valid are real, and mx[r] is
	// row r's maximum over every shard. For a row with targets[r] ≥ 0 it
	// writes sumExp[r] = Σ_{c<valid} e^(x[r, c] − mx[r]) and picked[r] =
	// x[r, t−lo] − mx[r] when lo ≤ t < lo+valid, else 0; rows with a
	// negative target get 0 in both. Summed over the shards they are the
	// softmax's normaliser and the target's shifted logit.
	ShardLogitStats(sumExp, picked, x, mx Buffer, targets Index, lo, valid int)
	// ShardCrossEntropy finishes a vocabulary-parallel cross-entropy once
	// sumExp and picked are summed over the shards: losses[r] = log
	// sumExp[r] − picked[r] (0 for a negative target). When dlogits is
	// non-nil it also writes the shard's gradient of gradScale·Σ losses:
	// (e^(x−mx)/sumExp − onehot)·gradScale on the valid columns, 0 on the
	// padding and on ignored rows.
	ShardCrossEntropy(losses, dlogits, x, mx, sumExp, picked Buffer, targets Index, lo, valid int, gradScale float32)
	// ArgmaxCorrect returns how many rows of logits ([rows, cols]) have their
	// largest value at targets[r] (a sync point).
	ArgmaxCorrect(logits Buffer, targets Index) int

	// CausalSoftmax computes, for each of the batch·t rows of x ([batch, t, t]),
	// y[b, i, j] = softmax over j ≤ i of scale·x[b, i, j], and 0 for j > i.
	CausalSoftmax(y, x Buffer, t int, scale float32)
	// SoftmaxBackward computes dx = scale·y⊙(dy − Σ_j dy⊙y) row-wise over
	// rows of length cols. It is the gradient of CausalSoftmax (masked entries
	// have y = 0 and get dx = 0). y may be 16-bit, as ReLUBackward's x.
	SoftmaxBackward(dx, dy, y Buffer, cols int, scale float32)
	// CausalSoftmaxFrom is CausalSoftmax for queries that start at
	// position pos0 of their sequence: x is [batch, rows, cols] (keys at
	// positions 0…cols−1), and y[b, i, j] = softmax over j ≤ pos0+i of
	// scale·x[b, i, j], 0 for j > pos0+i (a decode step against a KV
	// cache). CausalSoftmax(y, x, t, s) is CausalSoftmaxFrom(y, x, t, t, 0, s).
	// x and y are fp32.
	CausalSoftmaxFrom(y, x Buffer, rows, cols, pos0 int, scale float32)

	// RMSNorm normalises each row of x ([rows, cols], cols = len(w)) by its
	// root mean square, Llama's RMSNorm: y = w·x·rstd with rstd =
	// 1/sqrt(mean(x²) + eps), saved ([rows]) for the backward pass. The
	// sum of squares runs in float64. All buffers are fp32.
	RMSNorm(y, rstd, x, w Buffer, eps float32)
	// RMSNormBackward computes dx (overwritten) = rstd·(dy·w) −
	// x·rstd³·mean(dy·w·x) and accumulates dw += Σ_rows dy·x·rstd. All
	// buffers are fp32.
	RMSNormBackward(dx, dw, dy, x, rstd, w Buffer)
	// SwiGLU computes y = silu(gate)·up element-wise, silu(g) = g·σ(g)
	// (the gated unit of Llama's MLP). All buffers are fp32 and y may
	// alias gate or up.
	SwiGLU(y, gate, up Buffer)
	// Mul computes dst = a·b element-wise (all fp32; dst may alias a or
	// b): the product a user's layer (a gate, a mask) needs.
	Mul(dst, a, b Buffer)
	// CopyCols copies, in every row, cols columns of src (rows of srcCols
	// values) starting at column srcOff into dst (rows of dstCols values)
	// starting at column dstOff; both hold the same number of rows. It
	// concatenates activations side by side and splits them again (fp32).
	CopyCols(dst Buffer, dstCols, dstOff int, src Buffer, srcCols, srcOff, cols int)
	// SwiGLUBackward computes dgate = dy·up·silu'(gate) and dup =
	// dy·silu(gate). All buffers are fp32; dgate may alias gate and dup
	// may alias up.
	SwiGLUBackward(dgate, dup, dy, gate, up Buffer)
	// Rotary applies rotary position embeddings with Hugging Face's
	// rotate_half convention to x ([rows, cols], heads of headDim
	// contiguous in each row): for each head and i < headDim/2, with
	// c = cos[r, i] and s = sin[r, i], y[i] = x[i]·c − x[i+half]·s and
	// y[i+half] = x[i+half]·c + x[i]·s. cos and sin are [rows, headDim/2].
	// Its gradient is Rotary with −sin. All buffers are fp32; y may be x.
	Rotary(y, x, cos, sin Buffer, headDim int)

	// Transpose permutes the axes of a dense row-major tensor: src has the
	// given shape, dst has shape[perm[i]] on axis i, and
	// dst[i0, …] = src[j…] where j[perm[k]] = i_k. At most 6 axes.
	Transpose(dst, src Buffer, shape []int, perm []int)

	// SGDStep is torch.optim.SGD for one parameter tensor: d = g + wd·p;
	// with momentum, buf = d on the first step and momentum·buf + (1 −
	// dampening)·d afterwards, and d = buf (or d + momentum·buf with
	// nesterov); p −= lr·d. buf may be nil when momentum is 0.
	SGDStep(p, g, buf Buffer, h SGDHyper, first bool)
	// AdamWStep is torch.optim.AdamW: p *= 1 − lr·wd; m = β1·m + (1 − β1)·g;
	// v = β2·v + (1 − β2)·g²; p −= lr·(m/(1 − β1^t)) / (sqrt(v/(1 − β2^t)) + eps),
	// with t the 1-based step.
	AdamWStep(p, g, m, v Buffer, h AdamWHyper, t int)
}

// SGDHyper are torch.optim.SGD's hyper-parameters.
type SGDHyper struct {
	LR, Momentum, Dampening, WeightDecay float32
	Nesterov                             bool
}

// AdamWHyper are torch.optim.AdamW's hyper-parameters.
type AdamWHyper struct {
	LR, Beta1, Beta2, Eps, WeightDecay float32
}

// RegisteredAllocator is implemented by host-memory backends that can
// place a buffer in registered memory (internal/shmem): memory other
// processes on the host map, which a collective's same-host peers read in
// place (collective.ReadsRegisteredMemory). Free releases it.
type RegisteredAllocator interface {
	AllocRegistered(n int) (Buffer, error)
}

// HostMemory is implemented by backends whose buffers are host memory (the
// CPU backend): collectives then read and write gradients in place instead
// of staging them through host copies.
type HostMemory interface {
	// HostSlice returns the float32 values behind b, sharing its memory.
	HostSlice(b Buffer) []float32
}

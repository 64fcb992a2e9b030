// kernels.cu: troupe's CUDA kernels. nvcc compiles this file to kernels.ptx
// (go generate, see generate.go), which the Go backend embeds and the driver
// JIT-compiles for the GPU it runs on. The same source also compiles as
// plain C++ against emu.h, the CPU emulator that the cudaemu tests run it on,
// so everything here keeps to a small common dialect: no warp shuffles, no
// dynamic shared memory, block-uniform barriers only.
//
// Conventions shared with launch.go:
//   - Every parameter is 8 bytes in the launch (Go packs each into a uint64):
//     pointers, long long sizes; a float or int parameter reads the low half.
//   - All kernels are grid-stride loops over their work, so any grid size is
//     correct; the Go side chooses the grid for speed only.
//   - Row kernels run one block of RB threads per row and reduce in shared
//     memory in a fixed tree order, so results depend on the input alone.
//   - Sums that the CPU reference takes in float64 are taken in double here
//     too (row statistics, softmax normalisers, column sums), which keeps the
//     GPU within the conformance suite's float32-level tolerances.

#ifdef __CUDACC__
#include <stdint.h>
#define EMU_SHARED __shared__
#define UNROLL _Pragma("unroll")
#else
#include "emu.h"
#define UNROLL
#define __launch_bounds__(n)
#endif

#define RB 256

typedef long long i64;

// ---------------------------------------------------------------------------
// Helpers

__device__ static i64 gtid() { return (i64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ static i64 gstride() { return (i64)gridDim.x * blockDim.x; }

// bf16 and fp16 values. A type code is kernels.DType's: 0 fp32, 1 bf16,
// 2 fp16. The conversions are the CPU reference's, bit for bit
// (kernels.BF16FromF32, F16FromF32, F32FromF16): round to nearest even, a
// NaN stays a quiet NaN, fp16 overflows to ±Inf and keeps subnormals.

__device__ static float bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
	return __uint_as_float(u);
#else
	return emu_uint_as_float(u);
#endif
}

__device__ static unsigned short f32_to_bf16(float x) {
	uint32_t u = __float_as_uint(x);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);
	return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ static float bf16_to_f32(unsigned short h) { return bits_f32((uint32_t)h << 16); }

__device__ static unsigned short f32_to_f16(float x) {
	uint32_t u = __float_as_uint(x);
	unsigned short sign = (unsigned short)((u >> 16) & 0x8000u);
	uint32_t a = u & 0x7fffffffu;
	if (a > 0x7f800000u) return sign | 0x7e00 | (unsigned short)((a >> 13) & 0x1ffu);
	if (a >= 0x477ff000u) return sign | 0x7c00;
	if (a >= 0x38800000u) {
		uint32_t v = a - 0x38000000u;
		return sign | (unsigned short)((v + 0xfffu + ((v >> 13) & 1u)) >> 13);
	}
	if (a < 0x33000000u) return sign;
	uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
	uint32_t shift = 126 - e, half = 1u << (shift - 1);
	uint32_t r = m >> shift, rem = m & ((1u << shift) - 1);
	if (rem > half || (rem == half && (r & 1u))) r++;
	return sign | (unsigned short)r;
}

__device__ static float f16_to_f32(unsigned short h) {
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	if (e == 0x1f) return bits_f32(sign | (m ? 0x7fc00000u | (m << 13) : 0x7f800000u));
	if (e != 0) return bits_f32(sign | ((e + 112) << 23) | (m << 13));
	if (m == 0) return bits_f32(sign);
	return bits_f32(sign | __float_as_uint((float)m * (1.0f / 16777216.0f)));
}

__device__ static float low_to_f32(int t, unsigned short h) { return t == 1 ? bf16_to_f32(h) : f16_to_f32(h); }
__device__ static unsigned short f32_to_low(int t, float x) { return t == 1 ? f32_to_bf16(x) : f32_to_f16(x); }

// ldw is value i of an activation saved for a backward kernel, of type t
// (fp32, or bf16/fp16 under mixed precision), widened exactly.
__device__ static float ldw(const void* x, int t, i64 i) {
	return t == 0 ? ((const float*)x)[i] : low_to_f32(t, ((const unsigned short*)x)[i]);
}

// stw stores v as value i of an activation of type t, rounding it once for
// bf16 and fp16.
__device__ static void stw(void* y, int t, i64 i, float v) {
	if (t == 0)
		((float*)y)[i] = v;
	else
		((unsigned short*)y)[i] = f32_to_low(t, v);
}

// block_sum_d returns the sum of v over the RB threads of the block, in a
// fixed order (each of the first 32 threads adds a strided eighth, then
// thread 0 adds those 32 in order); every thread gets the result. sh holds
// RB doubles.
__device__ static double block_sum_d(double v, double* sh) {
	int t = threadIdx.x;
	sh[t] = v;
	__syncthreads();
	if (t < 32) {
		// Thread t alone reads sh[t], so it may overwrite it.
		double s = sh[t];
		for (int i = 1; i < RB / 32; i++) s += sh[t + 32 * i];
		sh[t] = s;
	}
	__syncthreads();
	if (t == 0) {
		double s = sh[0];
		for (int i = 1; i < 32; i++) s += sh[i];
		sh[0] = s;
	}
	__syncthreads();
	double r = sh[0];
	__syncthreads();
	return r;
}

// block_max_f returns the largest v over the block (NaN is skipped, as in
// the CPU's `if v > mx`), reduced as block_sum_d; every thread gets it.
__device__ static float block_max_f(float v, float* sh) {
	int t = threadIdx.x;
	sh[t] = v;
	__syncthreads();
	if (t < 32) {
		float m = sh[t];
		for (int i = 1; i < RB / 32; i++)
			if (sh[t + 32 * i] > m) m = sh[t + 32 * i];
		sh[t] = m;
	}
	__syncthreads();
	if (t == 0) {
		float m = sh[0];
		for (int i = 1; i < 32; i++)
			if (sh[i] > m) m = sh[i];
		sh[0] = m;
	}
	__syncthreads();
	float r = sh[0];
	__syncthreads();
	return r;
}

// set_err records the first bad index a kernel met: err[0] = code (only the
// first writer wins), err[1] = position, err[2] = value. The host reads it
// at Sync.
__device__ static void set_err(int* err, int code, i64 pos, int val) {
	if (atomicCAS(&err[0], 0, code) == 0) {
		err[1] = (int)pos;
		err[2] = val;
	}
}

// ---------------------------------------------------------------------------
// Element-wise

extern "C" __global__ void k_axpy(i64 n, float alpha, const float* x, float* y) {
	for (i64 i = gtid(); i < n; i += gstride()) y[i] += alpha * x[i];
}

extern "C" __global__ void k_scale(i64 n, float alpha, float* x) {
	for (i64 i = gtid(); i < n; i += gstride()) x[i] *= alpha;
}

// k_add: dst may alias a or b; each element is read before it is written.
extern "C" __global__ void k_add(i64 n, float* dst, const float* a, const float* b) {
	for (i64 i = gtid(); i < n; i += gstride()) dst[i] = a[i] + b[i];
}

extern "C" __global__ void k_add_bias(i64 n, i64 cols, float* y, const float* bias) {
	for (i64 i = gtid(); i < n; i += gstride()) y[i] += bias[i % cols];
}

// k_relu: x of type xt (see ldw), y of type yt (see stw).
extern "C" __global__ void k_relu(i64 n, void* y, const void* x, int xt, int yt) {
	for (i64 i = gtid(); i < n; i += gstride()) {
		float v = ldw(x, xt, i);
		// v > 0 rather than max(v, 0): NaN stays NaN, as in PyTorch.
		stw(y, yt, i, (v > 0.0f || v != v) ? v : 0.0f);
	}
}

// k_relu_backward: x of type xt (a saved activation, see ldw), dy of type
// dyt (see ldw), dx of type dxt (see stw); dx may be dy.
extern "C" __global__ void k_relu_backward(i64 n, void* dx, const void* dy, const void* x, int xt, int dyt, int dxt) {
	for (i64 i = gtid(); i < n; i += gstride()) stw(dx, dxt, i, ldw(x, xt, i) > 0.0f ? ldw(dy, dyt, i) : 0.0f);
}

// Φ(x) = erfc(−x/√2)/2, which keeps full relative precision in the left
// tail where 1 + erf(x/√2) would cancel.
__device__ static float norm_cdf(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }

// k_gelu: x of type xt (see ldw), y of type yt (see stw).
extern "C" __global__ void k_gelu(i64 n, void* y, const void* x, int xt, int yt) {
	for (i64 i = gtid(); i < n; i += gstride()) {
		float v = ldw(x, xt, i);
		stw(y, yt, i, v * norm_cdf(v));
	}
}

// k_gelu_backward: x of type xt and dy of type dyt (see ldw), dx of type
// dxt (see stw); dx may be dy.
extern "C" __global__ void k_gelu_backward(i64 n, void* dx, const void* dy, const void* x, int xt, int dyt, int dxt) {
	for (i64 i = gtid(); i < n; i += gstride()) {
		float v = ldw(x, xt, i);
		float pdf = 0.39894228040143268f * expf(-0.5f * v * v);
		stw(dx, dxt, i, ldw(dy, dyt, i) * (norm_cdf(v) + v * pdf));
	}
}

// ---------------------------------------------------------------------------
// Reductions

// k_reduce_partial writes one double per block: the sum of x (squares when
// sq != 0) over the elements the block's grid-stride loop visits. The grid
// is fixed by n on the host, so the order of additions is too.
extern "C" __global__ void k_reduce_partial(i64 n, const float* x, int sq, double* partial) {
	EMU_SHARED double sh[RB];
	double s = 0;
	for (i64 i = gtid(); i < n; i += gstride()) {
		double v = (double)x[i];
		s += sq ? v * v : v;
	}
	s = block_sum_d(s, sh);
	if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// k_reduce_final sums nparts partials (one block) into out[0].
extern "C" __global__ void k_reduce_final(i64 nparts, const double* partial, double* out) {
	EMU_SHARED double sh[RB];
	double s = 0;
	for (i64 i = threadIdx.x; i < nparts; i += RB) s += partial[i];
	s = block_sum_d(s, sh);
	if (threadIdx.x == 0) out[0] = s;
}

// Column reductions run blocks of 32 columns × 8 row lanes: lane ty sums rows
// ty, ty+8, … of its column in double, and lane 0 adds the 8 partial sums in
// order. Each column's order is fixed by rows alone.
#define CW 32
#define CL 8

// k_sum_rows: dst[c] += Σ_r x[r, c].
extern "C" __global__ void k_sum_rows(i64 rows, i64 cols, float* dst, const void* x, int xt) {
	EMU_SHARED double sh[CL][CW];
	int tx = threadIdx.x % CW, ty = threadIdx.x / CW;
	i64 tiles = (cols + CW - 1) / CW;
	for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
		i64 c = tile * CW + tx;
		double s = 0;
		if (c < cols)
			for (i64 r = ty; r < rows; r += CL) s += (double)ldw(x, xt, r * cols + c);
		sh[ty][tx] = s;
		__syncthreads();
		if (ty == 0 && c < cols) {
			double t = 0;
			for (int l = 0; l < CL; l++) t += sh[l][tx];
			dst[c] = (float)((double)dst[c] + t);
		}
		__syncthreads();
	}
}

// ---------------------------------------------------------------------------
// LayerNorm

// k_layernorm: one block per row; two passes (mean, then the mean of squared
// deviations) in double, as the CPU backend does.
extern "C" __global__ void k_layernorm(i64 rows, i64 cols, float* y, float* mean, float* rstd,
                                       const float* x, const float* gamma, const float* beta, float eps) {
	EMU_SHARED double sh[RB];
	for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
		const float* xr = x + r * cols;
		float* yr = y + r * cols;
		double s = 0;
		for (i64 c = threadIdx.x; c < cols; c += RB) s += (double)xr[c];
		double m = block_sum_d(s, sh) / (double)cols;
		double v = 0;
		for (i64 c = threadIdx.x; c < cols; c += RB) {
			double d = (double)xr[c] - m;
			v += d * d;
		}
		v = block_sum_d(v, sh) / (double)cols;
		float rs = (float)(1.0 / sqrt(v + (double)eps));
		float mf = (float)m;
		if (threadIdx.x == 0) {
			mean[r] = mf;
			rstd[r] = rs;
		}
		for (i64 c = threadIdx.x; c < cols; c += RB) yr[c] = (xr[c] - mf) * rs * gamma[c] + beta[c];
	}
}

// k_layernorm_dx: dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) with g = dy·γ;
// x of type xt (see ldw).
extern "C" __global__ void k_layernorm_dx(i64 rows, i64 cols, float* dx, const float* dy, const void* x,
                                          const float* mean, const float* rstd, const float* gamma, int xt) {
	EMU_SHARED double sh[RB];
	for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
		const float* dyr = dy + r * cols;
		float* dxr = dx + r * cols;
		float m = mean[r], rs = rstd[r];
		double sg = 0, sgx = 0;
		for (i64 c = threadIdx.x; c < cols; c += RB) {
			double g = (double)(dyr[c] * gamma[c]);
			sg += g;
			sgx += g * (double)((ldw(x, xt, r * cols + c) - m) * rs);
		}
		sg = block_sum_d(sg, sh);
		sgx = block_sum_d(sgx, sh);
		float mg = (float)(sg / (double)cols), mgx = (float)(sgx / (double)cols);
		for (i64 c = threadIdx.x; c < cols; c += RB) {
			float xh = (ldw(x, xt, r * cols + c) - m) * rs;
			dxr[c] = rs * (dyr[c] * gamma[c] - mg - xh * mgx);
		}
	}
}

// k_layernorm_params: dgamma[c] += Σ_r dy·x̂, dbeta[c] += Σ_r dy, as
// k_sum_rows; x of type xt (see ldw).
extern "C" __global__ void k_layernorm_params(i64 rows, i64 cols, float* dgamma, float* dbeta, const float* dy,
                                              const void* x, const float* mean, const float* rstd, int xt) {
	EMU_SHARED double shg[CL][CW];
	EMU_SHARED double shb[CL][CW];
	int tx = threadIdx.x % CW, ty = threadIdx.x / CW;
	i64 tiles = (cols + CW - 1) / CW;
	for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
		i64 c = tile * CW + tx;
		double g = 0, b = 0;
		if (c < cols)
			for (i64 r = ty; r < rows; r += CL) {
				double d = (double)dy[r * cols + c];
				g += d * (double)((ldw(x, xt, r * cols + c) - mean[r]) * rstd[r]);
				b += d;
			}
		shg[ty][tx] = g;
		shb[ty][tx] = b;
		__syncthreads();
		if (ty == 0 && c < cols) {
			double tg = 0, tb = 0;
			for (int l = 0; l < CL; l++) {
				tg += shg[l][tx];
				tb += shb[l][tx];
			}
			dgamma[c] = (float)((double)dgamma[c] + tg);
			dbeta[c] = (float)((double)dbeta[c] + tb);
		}
		__syncthreads();
	}
}

// ---------------------------------------------------------------------------
// Embedding

// k_check_ids flags the first id outside [0, vocab) with code.
extern "C" __global__ void k_check_ids(i64 n, i64 vocab, const int* ids, int* err, int code) {
	for (i64 i = gtid(); i < n; i += gstride()) {
		int id = ids[i];
		if (id < 0 || (i64)id >= vocab) set_err(err, code, i, id);
	}
}

// k_embedding: y[i, :] = table[ids[i] − lo, :] for the ids a table of rows
// rows starting at id lo holds, zeros for the others: the whole table (lo
// 0, where an id outside it is a bad id that k_check_ids flags), or a
// vocabulary-parallel shard's part of one.
extern "C" __global__ void k_embedding(i64 n, i64 d, i64 rows, i64 lo, float* y, const float* table, const int* ids) {
	for (i64 k = gtid(); k < n * d; k += gstride()) {
		i64 i = k / d, j = k % d;
		i64 r = (i64)ids[i] - lo;
		y[k] = (r >= 0 && r < rows) ? table[r * d + j] : 0.0f;
	}
}

// k_embedding_backward: dtable[v, j] += dy[i, j] for every i with
// ids[i] − lo = v (ids outside the table's rows add nowhere). Each thread
// owns one (row, column) of the table and walks all ids in order, staged
// through shared memory, so no two threads add into the same value and the
// order of additions is that of the ids, as on the CPU: no atomics,
// deterministic results. Grid: x over table rows, y over 128-column tiles.
#define EB_COLS 128
#define EB_CHUNK 1024
extern "C" __global__ void k_embedding_backward(i64 n, i64 d, i64 rows, i64 lo, float* dtable, const float* dy,
                                                const int* ids) {
	EMU_SHARED int sid[EB_CHUNK];
	i64 tilesC = (d + EB_COLS - 1) / EB_COLS;
	for (i64 tc = blockIdx.y; tc < tilesC; tc += gridDim.y) {
		i64 j = tc * EB_COLS + threadIdx.x;
		for (i64 v = blockIdx.x; v < rows; v += gridDim.x) {
			float acc = 0.0f;
			if (j < d) acc = dtable[v * d + j];
			for (i64 i0 = 0; i0 < n; i0 += EB_CHUNK) {
				i64 cnt = n - i0 < EB_CHUNK ? n - i0 : EB_CHUNK;
				for (i64 q = threadIdx.x; q < cnt; q += EB_COLS) sid[q] = ids[i0 + q];
				__syncthreads();
				if (j < d)
					for (i64 q = 0; q < cnt; q++)
						if ((i64)sid[q] - lo == v) acc += dy[(i0 + q) * d + j];
				__syncthreads();
			}
			if (j < d) dtable[v * d + j] = acc;
		}
	}
}

// ---------------------------------------------------------------------------
// Softmax family

// k_softmax_xent: one block per row. losses[r] = log Σ e^(x−max) − (x_t − max);
// with dl != 0, dl = (softmax − onehot)·gs, the target's entry formed in
// double (p_t − 1 loses its bits in float32 when p_t ≈ 1).
extern "C" __global__ void k_softmax_xent(i64 rows, i64 cols, float* losses, float* dl, const float* logits,
                                          const int* targets, float gs, int* err) {
	EMU_SHARED double shd[RB];
	EMU_SHARED float shf[RB];
	for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
		const float* x = logits + r * cols;
		int t = targets[r];
		if (t < 0 || (i64)t >= cols) {
			if ((i64)t >= cols && threadIdx.x == 0) set_err(err, 3, r, t);
			if (threadIdx.x == 0) losses[r] = 0.0f;
			if (dl)
				for (i64 c = threadIdx.x; c < cols; c += RB) dl[r * cols + c] = 0.0f;
			continue;  // t is the same for the whole block: no barrier is skipped by some threads only
		}
		float mx = -INFINITY;
		for (i64 c = threadIdx.x; c < cols; c += RB)
			if (x[c] > mx) mx = x[c];
		mx = block_max_f(mx, shf);
		double s = 0;
		for (i64 c = threadIdx.x; c < cols; c += RB) s += (double)expf(x[c] - mx);
		s = block_sum_d(s, shd);
		if (dl) {
			float inv = (float)((double)gs / s);
			for (i64 c = threadIdx.x; c < cols; c += RB) {
				float e = expf(x[c] - mx);
				dl[r * cols + c] = (c == t) ? (float)(((double)e / s - 1.0) * (double)gs) : e * inv;
			}
		}
		if (threadIdx.x == 0) losses[r] = (float)(log(s) - (double)(x[t] - mx));
	}
}

// k_argmax_correct adds to count[0] the rows whose first largest value is at
// the target.
extern "C" __global__ void k_argmax_correct(i64 rows, i64 cols, const float* logits, const int* targets, int* count,
                                            int* err) {
	EMU_SHARED float shv[RB];
	EMU_SHARED i64 shi[RB];
	for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
		int t = targets[r];
		if (t < 0 || (i64)t >= cols) {
			if ((i64)t >= cols && threadIdx.x == 0) set_err(err, 4, r, t);
			continue;  // block-uniform, as in k_softmax_xent
		}
		const float* x = logits + r * cols;
		float bv = 0.0f;
		i64 bi = -1;
		for (i64 c = threadIdx.x; c < cols; c += RB)
			if (bi < 0 || x[c] > bv) {
				bv = x[c];
				bi = c;
			}
		int tid = threadIdx.x;
		shv[tid] = bv;
		shi[tid] = bi;
		__syncthreads();
		for (int s = RB / 2; s > 0; s >>= 1) {
			if (tid < s) {
				float ov = shv[tid + s];
				i64 oi = shi[tid + s];
				if (oi >= 0 && (shi[tid] < 0 || ov > shv[tid] || (ov == shv[tid] && oi < shi[tid]))) {
					shv[tid] = ov;
					shi[tid] = oi;
				}
			}
			__syncthreads();
		}
		if (tid == 0 && shi[0] == (i64)t) atomicAdd(count, 1);
		__syncthreads();
	}
}

// k_causal_softmax: rows of length t; row r has r%t+1 live entries.
extern "C" __global__ void k_causal_softmax(i64 rows, i64 t, float* y, const float* x, float scale) {
	EMU_SHARED double shd[RB];
	EMU_SHARED float shf[RB];
	for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
		i64 live = r % t + 1;
		const float* xr = x + r * t;
		float* yr = y + r * t;
		float mx = -INFINITY;
		for (i64 j = threadIdx.x; j < live; j += RB) {
			float s = scale * xr[j];
			if (s > mx) mx = s;
		}
		mx = block_max_f(mx, shf);
		double s = 0;
		for (i64 j = threadIdx.x; j < live; j += RB) s += (double)expf(scale * xr[j] - mx);
		s = block_sum_d(s, shd);
		float inv = (float)(1.0 / s);
		for (i64 j = threadIdx.x; j < t; j += RB) yr[j] = j < live ? expf(scale * xr[j] - mx) * inv : 0.0f;
	}
}

// k_softmax_backward: dx = scale·y·(dy − Σ dy·y), row by row; y of type
// yt (see ldw).
extern "C" __global__ void k_softmax_backward(i64 rows, i64 cols, float* dx, const float* dy, const void* y,
                                              float scale, int yt) {
	EMU_SHARED double sh[RB];
	for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
		const float* dyr = dy + r * cols;
		float* dxr = dx + r * cols;
		double dot = 0;
		for (i64 j = threadIdx.x; j < cols; j += RB) dot += (double)dyr[j] * (double)ldw(y, yt, r * cols + j);
		float d = (float)block_sum_d(dot, sh);
		for (i64 j = threadIdx.x; j < cols; j += RB) dxr[j] = scale * ldw(y, yt, r * cols + j) * (dyr[j] - d);
	}
}

// ---------------------------------------------------------------------------
// Vocabulary-parallel cross-entropy: a shard holds logit columns
// [lo, lo+cols) of which the first valid are real (the rest pad a vocabulary
// the shard count does not divide). One block per row, as k_softmax_xent.

// k_row_max: mx[r] = the largest of the first valid values of row r, −Inf
// for none.
extern "C" __global__ void k_row_max(i64 rows, i64 cols, i64 valid, float* mx, const float* x) {
	EMU_SHARED float shf[RB];
	for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
		const float* xr = x + r * cols;
		float m = -INFINITY;
		for (i64 c = threadIdx.x; c < valid; c += RB)
			if (xr[c] > m) m = xr[c];
		m = block_max_f(m, shf);
		if (threadIdx.x == 0) mx[r] = m;
	}
}

// k_shard_logit_stats: se[r] = Σ_{c<valid} e^(x − mx[r]) (in double);
// pk[r] = x[t − lo] − mx[r] when the target is in the shard, else 0; both 0
// for an ignored row.
extern "C" __global__ void k_shard_logit_stats(i64 rows, i64 cols, i64 valid, i64 lo, float* se, float* pk,
                                               const float* x, const float* mx, const int* targets) {
	EMU_SHARED double shd[RB];
	for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
		int t = targets[r];
		if (t < 0) {
			if (threadIdx.x == 0) se[r] = pk[r] = 0.0f;
			continue;  // block-uniform
		}
		const float* xr = x + r * cols;
		float m = mx[r];
		double s = 0;
		for (i64 c = threadIdx.x; c < valid; c += RB) s += (double)expf(xr[c] - m);
		s = block_sum_d(s, shd);
		if (threadIdx.x == 0) {
			se[r] = (float)s;
			i64 j = (i64)t - lo;
			pk[r] = (j >= 0 && j < valid) ? xr[j] - m : 0.0f;
		}
	}
}

// k_shard_xent: losses[r] = log se[r] − pk[r]; with dl != 0, dl = (e^(x−mx)/se
// − onehot)·gs on the valid columns (the target's entry in double), 0 on the
// padding and on ignored rows.
extern "C" __global__ void k_shard_xent(i64 rows, i64 cols, i64 valid, i64 lo, float* losses, float* dl,
                                        const float* x, const float* mx, const float* se, const float* pk,
                                        const int* targets, float gs) {
	for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
		int t = targets[r];
		if (t < 0) {
			if (threadIdx.x == 0) losses[r] = 0.0f;
			if (dl)
				for (i64 c = threadIdx.x; c < cols; c += RB) dl[r * cols + c] = 0.0f;
			continue;
		}
		double s = (double)se[r];
		if (threadIdx.x == 0) losses[r] = (float)(log(s) - (double)pk[r]);
		if (!dl) continue;
		const float* xr = x + r * cols;
		float m = mx[r];
		float inv = (float)((double)gs / s);
		i64 tj = (i64)t - lo;
		for (i64 c = threadIdx.x; c < cols; c += RB) {
			float v = 0.0f;
			if (c < valid) {
				float e = expf(xr[c] - m);
				v = (c == tj) ? (float)(((double)e / s - 1.0) * (double)gs) : e * inv;
			}
			dl[r * cols + c] = v;
		}
	}
}

// ---------------------------------------------------------------------------
// Transpose: dst element i, decomposed over the (merged) destination axes
// d0…d{nd−1}, reads src at Σ index·stride.

extern "C" __global__ void k_transpose(i64 n, i64 nd, float* dst, const float* src, i64 d0, i64 d1, i64 d2, i64 d3,
                                       i64 d4, i64 d5, i64 s0, i64 s1, i64 s2, i64 s3, i64 s4, i64 s5) {
	i64 dims[6] = {d0, d1, d2, d3, d4, d5};
	i64 str[6] = {s0, s1, s2, s3, s4, s5};
	for (i64 i = gtid(); i < n; i += gstride()) {
		i64 rem = i, off = 0;
		for (i64 a = nd - 1; a >= 0; a--) {
			off += (rem % dims[a]) * str[a];
			rem /= dims[a];
		}
		dst[i] = src[off];
	}
}

// ---------------------------------------------------------------------------
// Optimizers (torch.optim's single-tensor loops, as the CPU backend).

extern "C" __global__ void k_sgd(i64 n, float* p, const float* g, float* buf, float lr, float wd, float mom,
                                 float damp, int nesterov, int first) {
	for (i64 i = gtid(); i < n; i += gstride()) {
		float w = p[i];
		float d = g[i] + wd * w;
		if (buf) {
			float b = first ? d : mom * buf[i] + damp * d;
			buf[i] = b;
			d = nesterov ? d + mom * b : b;
		}
		p[i] = w - lr * d;
	}
}

extern "C" __global__ void k_adamw(i64 n, float* p, const float* g, float* m, float* v, float decay, float b1,
                                   float nb1, float b2, float nb2, float step, float bc2sqrt, float eps) {
	for (i64 i = gtid(); i < n; i += gstride()) {
		float gi = g[i];
		float mi = b1 * m[i] + nb1 * gi;
		float vi = b2 * v[i] + nb2 * gi * gi;
		m[i] = mi;
		v[i] = vi;
		float denom = sqrtf(vi) / bc2sqrt + eps;
		p[i] = p[i] * decay - step * mi / denom;
	}
}

// ---------------------------------------------------------------------------
// GEMM, FP32: C = α·op(A)·op(B) + β·C, row-major, strided batch.
//
// A block of 256 threads computes a T×T tile of C, R×R values a thread
// (R = T/16) at rows ty+16i and columns tx+16j, walking K in steps of KT
// through shared memory: 64×64 tiles with KT = 16 (k_gemm_f32, any shape),
// and 128×128 with KT = 8 (k_gemm_f32_128, for M, N ≥ 128: twice the
// multiply-adds per shared-memory read). Loads outside the matrices read as
// 0, so every size works; β = 0 never reads C (BLAS semantics: NaN in C must
// not leak). Grid: x over column tiles, y over row tiles, z over the batch,
// each grid-strided.

// ld_opa returns op(A)[i, k] of an M×K op(A), 0 outside.
__device__ static float ld_opa(const float* a, int ta, i64 lda, i64 M, i64 K, i64 i, i64 k) {
	if (i >= M || k >= K) return 0.0f;
	return ta ? a[k * lda + i] : a[i * lda + k];
}

// ld_opb returns op(B)[k, j] of a K×N op(B), 0 outside.
__device__ static float ld_opb(const float* b, int tb, i64 ldb, i64 K, i64 N, i64 k, i64 j) {
	if (k >= K || j >= N) return 0.0f;
	return tb ? b[j * ldb + k] : b[k * ldb + j];
}

template <int T, int KT>
__device__ static void gemm_f32(int ta, int tb, i64 M, i64 N, i64 K, float alpha, float beta, const float* a, i64 lda,
                                i64 sa, const float* b, i64 ldb, i64 sb, float* c, i64 ldc, i64 sc, i64 batch) {
	const int R = T / 16, L = T * KT / 256;  // values a thread computes per axis, loads per tile
	EMU_SHARED float As[KT][T + 4];
	EMU_SHARED float Bs[KT][T + 4];
	int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
	i64 tilesM = (M + T - 1) / T, tilesN = (N + T - 1) / T;
	for (i64 bt = blockIdx.z; bt < batch; bt += gridDim.z)
		for (i64 tm = blockIdx.y; tm < tilesM; tm += gridDim.y)
			for (i64 tn = blockIdx.x; tn < tilesN; tn += gridDim.x) {
				const float* A = a + bt * sa;
				const float* B = b + bt * sb;
				float* C = c + bt * sc;
				i64 m0 = tm * T, n0 = tn * T;
				float acc[R][R];
				UNROLL for (int i = 0; i < R; i++)
					UNROLL for (int j = 0; j < R; j++) acc[i][j] = 0.0f;
				for (i64 k0 = 0; k0 < K; k0 += KT) {
					// T·KT values of each tile, L a thread, in the order
					// that reads consecutive addresses of the stored matrix.
					UNROLL for (int q = 0; q < L; q++) {
						int e = tid + 256 * q;
						int ai = ta ? e % T : e / KT, ak = ta ? e / T : e % KT;
						As[ak][ai] = ld_opa(A, ta, lda, M, K, m0 + ai, k0 + ak);
						int bj = tb ? e / KT : e % T, bk = tb ? e % KT : e / T;
						Bs[bk][bj] = ld_opb(B, tb, ldb, K, N, k0 + bk, n0 + bj);
					}
					__syncthreads();
					UNROLL for (int kk = 0; kk < KT; kk++) {
						float av[R], bv[R];
						UNROLL for (int i = 0; i < R; i++) av[i] = As[kk][ty + 16 * i];
						UNROLL for (int j = 0; j < R; j++) bv[j] = Bs[kk][tx + 16 * j];
						UNROLL for (int i = 0; i < R; i++)
							UNROLL for (int j = 0; j < R; j++) acc[i][j] += av[i] * bv[j];
					}
					__syncthreads();
				}
				UNROLL for (int i = 0; i < R; i++) {
					i64 row = m0 + ty + 16 * i;
					if (row >= M) continue;
					UNROLL for (int j = 0; j < R; j++) {
						i64 col = n0 + tx + 16 * j;
						if (col >= N) continue;
						float v = alpha * acc[i][j];
						if (beta != 0.0f) v += beta * C[row * ldc + col];
						C[row * ldc + col] = v;
					}
				}
			}
}

extern "C" __global__ void __launch_bounds__(256) k_gemm_f32(int ta, int tb, i64 M, i64 N, i64 K, float alpha, float beta, const float* a,
                                      i64 lda, i64 sa, const float* b, i64 ldb, i64 sb, float* c, i64 ldc, i64 sc,
                                      i64 batch) {
	gemm_f32<64, 16>(ta, tb, M, N, K, alpha, beta, a, lda, sa, b, ldb, sb, c, ldc, sc, batch);
}

extern "C" __global__ void __launch_bounds__(256) k_gemm_f32_128(int ta, int tb, i64 M, i64 N, i64 K, float alpha, float beta,
                                          const float* a, i64 lda, i64 sa, const float* b, i64 ldb, i64 sb, float* c,
                                          i64 ldc, i64 sc, i64 batch) {
	gemm_f32<128, 8>(ta, tb, M, N, K, alpha, beta, a, lda, sa, b, ldb, sb, c, ldc, sc, batch);
}

// ---------------------------------------------------------------------------
// Tensor-core GEMMs (sm_80+): mma.sync.m16n8k8 (TF32) and m16n8k16 (BF16,
// FP16: k_gemm_low below).
// __launch_bounds__(256) keeps ptxas within the registers that let a
// 256-thread block launch at all (the accumulators alone are 64 a thread).
//
// A block of 256 threads (8 warps as 2 rows × 4 columns) computes a 128×128
// tile of C; each warp a 64×32 sub-tile as 4×4 mma tiles of 16×8. Fragment
// layouts (PTX ISA, "Matrix Fragments for mma.m16n8k8/k16"), with
// g = lane/4 and q = lane%4:
//   A (16×K tile): reg r holds row g + 8·(r%2), k column(s) q + 4·(r/2)
//                  (tf32; for bf16/fp16 the pair 2q, 2q+1 plus 8·(r/2));
//   B (K×8 tile):  reg r holds column g, k row q + 4·r (16-bit: 2q, 2q+1 + 8·r);
//   C (16×8):      reg r holds row g + 8·(r/2), column 2q + r%2.
// Shared tiles are stored k-contiguous per row of A and per column of B, with
// padding that spreads a warp's fragment reads over all 32 banks.

#define TT 128
#define TK32 16
#define TPAD32 4
#define TK16 32
#define TPAD16 8

// to_tf32 rounds a float to TF32 (10 mantissa bits), to nearest, ties away.
__device__ static uint32_t to_tf32(float x) {
#ifdef __CUDA_ARCH__
	uint32_t r;
	asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
	return r;
#else
	return emu_to_tf32(x);
#endif
}

__device__ static void mma_tf32(float* d, const uint32_t* a, const uint32_t* b) {
#ifdef __CUDA_ARCH__
	asm volatile(
	    "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	    "{%0,%1,%2,%3};"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
	emu_mma_tf32(d, a, b);
#endif
}

__device__ static void mma_bf16(float* d, const uint32_t* a, const uint32_t* b) {
#ifdef __CUDA_ARCH__
	asm volatile(
	    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	    "{%0,%1,%2,%3};"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
	emu_mma_bf16(d, a, b);
#endif
}

// tc_frags loads a warp's fragments for one mma k-step at word column ks of
// the shared tiles (W words a row, k-contiguous: a TF32 value or a pair of
// 16-bit ones a word): 4 row tiles of A at the warp's 64 rows, 4 column
// tiles of B at its 32 columns, in the layouts above.
template <int W>
__device__ static void tc_frags(uint32_t (*As)[W], uint32_t (*Bs)[W], int ks, uint32_t af[4][4], uint32_t bf[4][2]) {
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
	int wr = warp / 4, wc = warp % 4;
	UNROLL for (int mi = 0; mi < 4; mi++) {
		int rb = wr * 64 + mi * 16;
		af[mi][0] = As[rb + g][ks + q];
		af[mi][1] = As[rb + g + 8][ks + q];
		af[mi][2] = As[rb + g][ks + q + 4];
		af[mi][3] = As[rb + g + 8][ks + q + 4];
	}
	UNROLL for (int ni = 0; ni < 4; ni++) {
		int cb = wc * 32 + ni * 8;
		bf[ni][0] = Bs[cb + g][ks + q];
		bf[ni][1] = Bs[cb + g][ks + q + 4];
	}
}

// tc_store writes one warp's 4×4 mma tiles of accumulators to C with α and β.
__device__ static void tc_store(float acc[4][4][4], float* C, i64 ldc, i64 M, i64 N, i64 wm0, i64 wn0, float alpha,
                                float beta) {
	int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
	UNROLL for (int mi = 0; mi < 4; mi++)
		UNROLL for (int ni = 0; ni < 4; ni++)
			UNROLL for (int r = 0; r < 4; r++) {
				i64 row = wm0 + mi * 16 + g + 8 * (r / 2), col = wn0 + ni * 8 + 2 * q + r % 2;
				if (row >= M || col >= N) continue;
				float v = alpha * acc[mi][ni][r];
				if (beta != 0.0f) v += beta * C[row * ldc + col];
				C[row * ldc + col] = v;
			}
}

// k_gemm_tf32: same contract as k_gemm_f32, inputs rounded to TF32.
extern "C" __global__ void __launch_bounds__(256) k_gemm_tf32(int ta, int tb, i64 M, i64 N, i64 K, float alpha, float beta, const float* a,
                                       i64 lda, i64 sa, const float* b, i64 ldb, i64 sb, float* c, i64 ldc, i64 sc,
                                       i64 batch) {
	EMU_SHARED uint32_t As[TT][TK32 + TPAD32];  // [m][k]
	EMU_SHARED uint32_t Bs[TT][TK32 + TPAD32];  // [n][k]
	int tid = threadIdx.x, warp = tid / 32;
	int wr = warp / 4, wc = warp % 4;  // warp's 64-row half and 32-column quarter
	i64 tilesM = (M + TT - 1) / TT, tilesN = (N + TT - 1) / TT;
	for (i64 bt = blockIdx.z; bt < batch; bt += gridDim.z)
		for (i64 tm = blockIdx.y; tm < tilesM; tm += gridDim.y)
			for (i64 tn = blockIdx.x; tn < tilesN; tn += gridDim.x) {
				const float* A = a + bt * sa;
				const float* B = b + bt * sb;
				i64 m0 = tm * TT, n0 = tn * TT;
				float acc[4][4][4];
				UNROLL for (int mi = 0; mi < 4; mi++)
					UNROLL for (int ni = 0; ni < 4; ni++)
						UNROLL for (int r = 0; r < 4; r++) acc[mi][ni][r] = 0.0f;
				for (i64 k0 = 0; k0 < K; k0 += TK32) {
					// 128×16 values of each tile, 8 a thread, read along the
					// stored matrix's rows.
					UNROLL for (int qq = 0; qq < 8; qq++) {
						int e = tid + 256 * qq;
						int ai = ta ? e % TT : e / TK32, ak = ta ? e / TT : e % TK32;
						As[ai][ak] = to_tf32(ld_opa(A, ta, lda, M, K, m0 + ai, k0 + ak));
						int bj = tb ? e / TK32 : e % TT, bk = tb ? e % TK32 : e / TT;
						Bs[bj][bk] = to_tf32(ld_opb(B, tb, ldb, K, N, k0 + bk, n0 + bj));
					}
					__syncthreads();
					UNROLL for (int ks = 0; ks < TK32; ks += 8) {
						uint32_t af[4][4], bf[4][2];
						tc_frags<TK32 + TPAD32>(As, Bs, ks, af, bf);
						UNROLL for (int mi = 0; mi < 4; mi++)
							UNROLL for (int ni = 0; ni < 4; ni++) mma_tf32(acc[mi][ni], af[mi], bf[ni]);
					}
					__syncthreads();
				}
				tc_store(acc, c + bt * sc, ldc, M, N, m0 + wr * 64, n0 + wc * 32, alpha, beta);
			}
}

// ---------------------------------------------------------------------------
// bf16 and fp16 (kernels.LowPrecision; the conversions are in Helpers).

// k_convert copies n values of type st at src into type dt at dst, through
// fp32 (exact for the widening, one rounding for the narrowing).
extern "C" __global__ void k_convert(i64 n, void* dst, int dt, const void* src, int st) {
	for (i64 i = gtid(); i < n; i += gstride()) {
		float v = st == 0 ? ((const float*)src)[i] : low_to_f32(st, ((const unsigned short*)src)[i]);
		if (dt == 0)
			((float*)dst)[i] = v;
		else
			((unsigned short*)dst)[i] = f32_to_low(dt, v);
	}
}

// k_fill16 sets n 16-bit values to h.
extern "C" __global__ void k_fill16(i64 n, unsigned short* p, unsigned int h) {
	for (i64 i = gtid(); i < n; i += gstride()) p[i] = (unsigned short)h;
}

__device__ static void mma_f16(float* d, const uint32_t* a, const uint32_t* b) {
#ifdef __CUDA_ARCH__
	asm volatile(
	    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	    "{%0,%1,%2,%3};"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
	emu_mma_f16(d, a, b);
#endif
}

// ld16a and ld16b are ld_opa and ld_opb for 16-bit operands (0 outside).
__device__ static uint32_t ld16a(const unsigned short* a, int ta, i64 lda, i64 M, i64 K, i64 i, i64 k) {
	if (i >= M || k >= K) return 0;
	return ta ? a[k * lda + i] : a[i * lda + k];
}

__device__ static uint32_t ld16b(const unsigned short* b, int tb, i64 ldb, i64 K, i64 N, i64 k, i64 j) {
	if (k >= K || j >= N) return 0;
	return tb ? b[j * ldb + k] : b[k * ldb + j];
}

// k_gemm_low: the contract of k_gemm_f32 with A and B in bf16 (ab = 1) or
// fp16 (ab = 2) and C in fp32 (ct = 0) or the operands' type: mma.sync
// m16n8k16 with fp32 accumulation, α·AB + β·C in fp32, a 16-bit C rounded
// once at the end (cuBLAS's cublasGemmEx with CUBLAS_COMPUTE_32F). Tiles
// as k_gemm_tf32's, 32 values of K a step, stored as pairs along K (the
// word each mma register holds); any transpose, stride and alignment.
extern "C" __global__ void __launch_bounds__(256) k_gemm_low(int ta, int tb, i64 M, i64 N, i64 K, float alpha, float beta,
                                      const unsigned short* a, i64 lda, i64 sa, const unsigned short* b, i64 ldb,
                                      i64 sb, void* c, i64 ldc, i64 sc, i64 batch, int ab, int ct) {
	EMU_SHARED uint32_t As[TT][(TK16 + TPAD16) / 2];  // [m][k pair]
	EMU_SHARED uint32_t Bs[TT][(TK16 + TPAD16) / 2];  // [n][k pair]
	const int KW = TK16 / 2;                          // words of a tile row
	int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
	int wr = warp / 4, wc = warp % 4;
	i64 tilesM = (M + TT - 1) / TT, tilesN = (N + TT - 1) / TT;
	for (i64 bt = blockIdx.z; bt < batch; bt += gridDim.z)
		for (i64 tm = blockIdx.y; tm < tilesM; tm += gridDim.y)
			for (i64 tn = blockIdx.x; tn < tilesN; tn += gridDim.x) {
				const unsigned short* A = a + bt * sa;
				const unsigned short* B = b + bt * sb;
				i64 m0 = tm * TT, n0 = tn * TT;
				float acc[4][4][4];
				UNROLL for (int mi = 0; mi < 4; mi++)
					UNROLL for (int ni = 0; ni < 4; ni++)
						UNROLL for (int r = 0; r < 4; r++) acc[mi][ni][r] = 0.0f;
				for (i64 k0 = 0; k0 < K; k0 += TK16) {
					// 128 rows × 16 words of each tile, 8 words a thread,
					// read along the stored matrix's rows.
					UNROLL for (int qq = 0; qq < 8; qq++) {
						int e = tid + 256 * qq;
						int ai = ta ? e % TT : e / KW, aw = ta ? e / TT : e % KW;
						i64 ak = k0 + 2 * aw;
						As[ai][aw] = ld16a(A, ta, lda, M, K, m0 + ai, ak) | ld16a(A, ta, lda, M, K, m0 + ai, ak + 1) << 16;
						int bj = tb ? e / KW : e % TT, bw = tb ? e % KW : e / TT;
						i64 bk = k0 + 2 * bw;
						Bs[bj][bw] = ld16b(B, tb, ldb, K, N, bk, n0 + bj) | ld16b(B, tb, ldb, K, N, bk + 1, n0 + bj) << 16;
					}
					__syncthreads();
					UNROLL for (int ks = 0; ks < KW; ks += 8) {  // k16 = 8 words
						uint32_t af[4][4], bf[4][2];
						tc_frags<(TK16 + TPAD16) / 2>(As, Bs, ks, af, bf);
						if (ab == 1) {
							UNROLL for (int mi = 0; mi < 4; mi++)
								UNROLL for (int ni = 0; ni < 4; ni++) mma_bf16(acc[mi][ni], af[mi], bf[ni]);
						} else {
							UNROLL for (int mi = 0; mi < 4; mi++)
								UNROLL for (int ni = 0; ni < 4; ni++) mma_f16(acc[mi][ni], af[mi], bf[ni]);
						}
					}
					__syncthreads();
				}
				i64 wm0 = m0 + wr * 64, wn0 = n0 + wc * 32;
				if (ct == 0) {
					tc_store(acc, (float*)c + bt * sc, ldc, M, N, wm0, wn0, alpha, beta);
					continue;
				}
				unsigned short* C = (unsigned short*)c + bt * sc;
				UNROLL for (int mi = 0; mi < 4; mi++)
					UNROLL for (int ni = 0; ni < 4; ni++)
						UNROLL for (int r = 0; r < 4; r++) {
							i64 row = wm0 + mi * 16 + g + 8 * (r / 2), col = wn0 + ni * 8 + 2 * q + r % 2;
							if (row >= M || col >= N) continue;
							float v = alpha * acc[mi][ni][r];
							if (beta != 0.0f) v += beta * low_to_f32(ct, C[row * ldc + col]);
							C[row * ldc + col] = f32_to_low(ct, v);
						}
			}
}

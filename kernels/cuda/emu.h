// emu.h: just enough of CUDA C++ for kernels.cu to compile as host C++ and
// run on the CPU emulator in emu.cc (build tag cudaemu). Each CUDA thread is a
// fiber (ucontext); the threads of one block run in turn on one OS thread,
// switching only at __syncthreads, and blocks run one after another. That
// keeps the semantics a kernel may rely on (shared memory per block,
// barriers) and nothing more, so kernel indexing and barrier placement are
// tested exactly, without a GPU.
#ifndef TROUPE_EMU_H
#define TROUPE_EMU_H

#include <cmath>
#include <cstdint>
#include <cstring>

struct emu_dim3 {
	unsigned x, y, z;
};

extern thread_local emu_dim3 emu_thread_idx, emu_block_idx, emu_block_dim, emu_grid_dim;

#define threadIdx emu_thread_idx
#define blockIdx emu_block_idx
#define blockDim emu_block_dim
#define gridDim emu_grid_dim

#define __global__
#define __device__
// Shared memory: a function-local static is one array for the whole launch,
// which is shared memory's meaning when blocks run one at a time.
#define EMU_SHARED static

void emu_syncthreads();
#define __syncthreads() emu_syncthreads()

// Only one fiber runs at a time, so plain read-modify-write is atomic.
static inline int atomicCAS(int* p, int cmp, int val) {
	int old = *p;
	if (old == cmp) *p = val;
	return old;
}
static inline int atomicAdd(int* p, int v) {
	int old = *p;
	*p = old + v;
	return old;
}

static inline uint32_t __float_as_uint(float f) {
	uint32_t u;
	std::memcpy(&u, &f, 4);
	return u;
}
static inline float emu_uint_as_float(uint32_t u) {
	float f;
	std::memcpy(&f, &u, 4);
	return f;
}

// emu_to_tf32 is cvt.rna.tf32.f32: keep 10 mantissa bits, rounding to
// nearest with ties away from zero (adding half an ulp to the magnitude).
static inline uint32_t emu_to_tf32(float x) {
	uint32_t u = __float_as_uint(x);
	if ((u & 0x7f800000u) == 0x7f800000u) return u;  // Inf, NaN
	return (u + 0x1000u) & 0xffffe000u;
}

// The warp-wide mma instructions, emulated from the PTX ISA's fragment
// layouts. Every thread of the block must call them together (kernels.cu's
// GEMMs do), since they exchange fragments through block barriers.
void emu_mma_tf32(float* d, const uint32_t* a, const uint32_t* b);
void emu_mma_bf16(float* d, const uint32_t* a, const uint32_t* b);
void emu_mma_f16(float* d, const uint32_t* a, const uint32_t* b);

#endif

//go:build cuda && cudaemu

// emu.cc: the CPU emulator that runs kernels.cu for the cudaemu tests (see
// emu.h for the model). It is test equipment: slow, single-threaded, exact.

#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "emu.h"
#include "emu_api.h"

thread_local emu_dim3 emu_thread_idx, emu_block_idx, emu_block_dim, emu_grid_dim;

#include "kernels.cu"

// Context switches. swapcontext saves and restores the signal mask, a system
// call each way, which made it most of the emulator's time; on x86-64 a
// switch is instead the callee-saved registers, the SSE and x87 control
// words and the stack pointer (the System V ABI's preserved state).
#if defined(__x86_64__)
extern "C" void emu_switch(void** save_sp, void* load_sp);
asm(R"(
	.text
	.globl emu_switch
	.type emu_switch, @function
emu_switch:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	subq $8, %rsp
	stmxcsr (%rsp)
	fnstcw 4(%rsp)
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	ldmxcsr (%rsp)
	fldcw 4(%rsp)
	addq $8, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
	.size emu_switch, .-emu_switch
	.section .note.GNU-stack,"",@progbits
	.text
)");
struct emu_ctx {
	void* sp;
};
#else
#include <ucontext.h>
struct emu_ctx {
	ucontext_t uc;
};
#endif

namespace {

enum state { RUNNABLE, WAITING, DONE };

// A fiber's stack: kernels keep little on the stack, but libm and the
// emulated mma may go a few KiB deep.
constexpr size_t kStack = 64 << 10;

struct fiber {
	emu_ctx ctx;
	emu_dim3 tid;
	state st;
	std::vector<char> stack;
};

thread_local std::vector<fiber>* fibers;
thread_local fiber* self;
thread_local emu_ctx sched;
thread_local void (*cur_invoke)(const uint64_t*);
thread_local const uint64_t* cur_args;

void switch_to(emu_ctx* save, emu_ctx* load) {
#if defined(__x86_64__)
	emu_switch(&save->sp, load->sp);
#else
	swapcontext(&save->uc, &load->uc);
#endif
}

// fiber_main runs the kernel once per block the scheduler starts it for.
void fiber_main() {
	for (;;) {
		cur_invoke(cur_args);
		self->st = DONE;
		switch_to(&self->ctx, &sched);
	}
}

// start makes f's first switch enter fiber_main on f's stack.
void start(fiber& f) {
#if defined(__x86_64__)
	// The frame emu_switch pops: control words, r15…rbp, then the return
	// address fiber_main, above which a zero return address leaves the
	// stack pointer ≡ 8 (mod 16) at fiber_main's entry, as after a call.
	uintptr_t top = ((uintptr_t)f.stack.data() + f.stack.size()) & ~(uintptr_t)15;
	uint64_t* sp = (uint64_t*)top;
	*--sp = 0;
	*--sp = (uint64_t)(uintptr_t)fiber_main;
	for (int i = 0; i < 6; i++) *--sp = 0;
	*--sp = 0x037F00001F80ull;  // fnstcw at +4: 0x037F; stmxcsr at +0: 0x1F80
	f.ctx.sp = sp;
#else
	getcontext(&f.ctx.uc);
	f.ctx.uc.uc_stack.ss_sp = f.stack.data();
	f.ctx.uc.uc_stack.ss_size = f.stack.size();
	f.ctx.uc.uc_link = nullptr;
	makecontext(&f.ctx.uc, fiber_main, 0);
#endif
}

// Arguments arrive as 8-byte words (launch.go packs them); each parameter
// type reads its own part, as the CUDA driver does.
template <typename T>
struct arg {
	static T get(uint64_t v) { return (T)(uintptr_t)v; }  // pointers
};
template <>
struct arg<long long> {
	static long long get(uint64_t v) { return (long long)v; }
};
template <>
struct arg<int> {
	static int get(uint64_t v) { return (int)(uint32_t)v; }
};
template <>
struct arg<float> {
	static float get(uint64_t v) { return emu_uint_as_float((uint32_t)v); }
};

template <typename... A, size_t... I>
void invoke_impl(void (*f)(A...), const uint64_t* a, std::index_sequence<I...>) {
	f(arg<A>::get(a[I])...);
}

template <typename... A>
constexpr int arity(void (*)(A...)) {
	return sizeof...(A);
}

struct entry {
	const char* name;
	void (*invoke)(const uint64_t*);
	int nargs;
};

#define K(f) {#f, [](const uint64_t* a) { invoke_impl(f, a, std::make_index_sequence<arity(f)>{}); }, arity(f)}

const entry table[] = {
    K(k_axpy),
    K(k_scale),
    K(k_add),
    K(k_add_bias),
    K(k_relu),
    K(k_relu_backward),
    K(k_gelu),
    K(k_gelu_backward),
    K(k_reduce_partial),
    K(k_reduce_final),
    K(k_sum_rows),
    K(k_layernorm),
    K(k_layernorm_dx),
    K(k_layernorm_params),
    K(k_check_ids),
    K(k_embedding),
    K(k_embedding_backward),
    K(k_softmax_xent),
    K(k_argmax_correct),
    K(k_causal_softmax),
    K(k_softmax_backward),
    K(k_transpose),
    K(k_sgd),
    K(k_adamw),
    K(k_gemm_f32),
    K(k_gemm_f32_128),
    K(k_gemm_tf32),
    K(k_convert),
    K(k_fill16),
    K(k_gemm_low),
    K(k_row_max),
    K(k_shard_logit_stats),
    K(k_shard_xent),
};

// Fragment exchange for the emulated mma: each thread deposits its
// registers, a barrier, each thread computes its outputs from its warp's
// deposits, a barrier (so the slots can be reused).
thread_local uint32_t xa[1024][4], xb[1024][2];

int linear_tid() { return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)); }


}  // namespace

void emu_syncthreads() {
	self->st = WAITING;
	switch_to(&self->ctx, &sched);
}

void emu_mma_tf32(float* d, const uint32_t* a, const uint32_t* b) {
	int t = linear_tid(), base = t & ~31, lane = t & 31;
	for (int r = 0; r < 4; r++) xa[t][r] = a[r];
	for (int r = 0; r < 2; r++) xb[t][r] = b[r];
	emu_syncthreads();
	float A[16][8], B[8][8];
	for (int l = 0; l < 32; l++) {
		int g = l / 4, q = l % 4;
		for (int r = 0; r < 4; r++) A[g + 8 * (r % 2)][q + 4 * (r / 2)] = emu_uint_as_float(xa[base + l][r]);
		for (int r = 0; r < 2; r++) B[q + 4 * r][g] = emu_uint_as_float(xb[base + l][r]);
	}
	int g = lane / 4, q = lane % 4;
	for (int r = 0; r < 4; r++) {
		int row = g + 8 * (r / 2), col = 2 * q + r % 2;
		double s = 0;
		for (int k = 0; k < 8; k++) s += (double)A[row][k] * (double)B[k][col];
		d[r] = (float)((double)d[r] + s);
	}
	emu_syncthreads();
}

// mma_16 is m16n8k16 for 16-bit operands that widen (exactly) to float.
static void mma_16(float* d, const uint32_t* a, const uint32_t* b, float (*widen)(unsigned short));

void emu_mma_bf16(float* d, const uint32_t* a, const uint32_t* b) { mma_16(d, a, b, bf16_to_f32); }

void emu_mma_f16(float* d, const uint32_t* a, const uint32_t* b) { mma_16(d, a, b, f16_to_f32); }

static void mma_16(float* d, const uint32_t* a, const uint32_t* b, float (*widen)(unsigned short)) {
	int t = linear_tid(), base = t & ~31, lane = t & 31;
	for (int r = 0; r < 4; r++) xa[t][r] = a[r];
	for (int r = 0; r < 2; r++) xb[t][r] = b[r];
	emu_syncthreads();
	float A[16][16], B[16][8];
	for (int l = 0; l < 32; l++) {
		int g = l / 4, q = l % 4;
		for (int r = 0; r < 4; r++) {
			int row = g + 8 * (r % 2), k = 2 * q + 8 * (r / 2);
			A[row][k] = widen((unsigned short)xa[base + l][r]);
			A[row][k + 1] = widen((unsigned short)(xa[base + l][r] >> 16));
		}
		for (int r = 0; r < 2; r++) {
			int k = 2 * q + 8 * r;
			B[k][g] = widen((unsigned short)xb[base + l][r]);
			B[k + 1][g] = widen((unsigned short)(xb[base + l][r] >> 16));
		}
	}
	int g = lane / 4, q = lane % 4;
	for (int r = 0; r < 4; r++) {
		int row = g + 8 * (r / 2), col = 2 * q + r % 2;
		double s = 0;
		for (int k = 0; k < 16; k++) s += (double)A[row][k] * (double)B[k][col];
		d[r] = (float)((double)d[r] + s);
	}
	emu_syncthreads();
}

extern "C" int emu_kernel_id(const char* name, int nargs) {
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (std::strcmp(table[i].name, name) == 0) return table[i].nargs == nargs ? (int)i : -2;
	return -1;
}

extern "C" int emu_launch(int id, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          const uint64_t* args, char* msg, int msglen) {
	unsigned nt = bx * by * bz;
	if (nt == 0 || nt > 1024 || gx == 0 || gy == 0 || gz == 0) {
		snprintf(msg, msglen, "%s: bad launch grid %ux%ux%u block %ux%ux%u", table[id].name, gx, gy, gz, bx, by, bz);
		return 1;
	}
	if (!fibers) fibers = new std::vector<fiber>();
	if (fibers->size() < nt) fibers->resize(nt);
	emu_grid_dim = {gx, gy, gz};
	emu_block_dim = {bx, by, bz};
	cur_invoke = table[id].invoke;
	cur_args = args;
	for (unsigned i = 0; i < nt; i++) {
		fiber& f = (*fibers)[i];
		if (f.stack.empty()) f.stack.resize(kStack);
		f.tid = {i % bx, (i / bx) % by, i / (bx * by)};
		start(f);
	}
	for (unsigned z = 0; z < gz; z++)
		for (unsigned y = 0; y < gy; y++)
			for (unsigned x = 0; x < gx; x++) {
				emu_block_idx = {x, y, z};
				for (unsigned i = 0; i < nt; i++) (*fibers)[i].st = RUNNABLE;
				for (;;) {
					for (unsigned i = 0; i < nt; i++) {
						fiber& f = (*fibers)[i];
						if (f.st != RUNNABLE) continue;
						self = &f;
						emu_thread_idx = f.tid;
						switch_to(&sched, &f.ctx);
					}
					unsigned waiting = 0, done = 0;
					for (unsigned i = 0; i < nt; i++) {
						waiting += (*fibers)[i].st == WAITING;
						done += (*fibers)[i].st == DONE;
					}
					if (waiting == 0) break;
					if (done > 0) {
						// CUDA leaves this undefined; on a GPU it hangs or
						// corrupts shared memory.
						snprintf(msg, msglen, "%s: block (%u,%u,%u): %u threads wait at __syncthreads while %u have returned",
						         table[id].name, x, y, z, waiting, done);
						return 1;
					}
					for (unsigned i = 0; i < nt; i++) (*fibers)[i].st = RUNNABLE;
				}
			}
	return 0;
}

extern "C" uintptr_t emu_alloc(size_t bytes) { return (uintptr_t)std::aligned_alloc(256, (bytes + 255) / 256 * 256); }

extern "C" void emu_free(uintptr_t p) { std::free((void*)p); }

extern "C" void emu_memset32(uintptr_t p, uint32_t v, size_t n) {
	uint32_t* q = (uint32_t*)p;
	for (size_t i = 0; i < n; i++) q[i] = v;
}

extern "C" void emu_htod(uintptr_t dst, const void* src, size_t bytes) { std::memmove((void*)dst, src, bytes); }
extern "C" void emu_dtoh(void* dst, uintptr_t src, size_t bytes) { std::memmove(dst, (const void*)src, bytes); }
extern "C" void emu_dtod(uintptr_t dst, uintptr_t src, size_t bytes) { std::memmove((void*)dst, (const void*)src, bytes); }

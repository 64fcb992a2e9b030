//go:build cuda

// Package cuda is troupe's GPU kernels backend on NVIDIA GPUs, built on the
// CUDA driver API through gorgonia.org/cu. It registers itself as "cuda" with
// the kernels registry, so `troupe train --device cuda` and
// kernels.Open("cuda", …) reach it.
//
// It is compiled only with `-tags cuda`: gorgonia.org/cu calls cuInit in its
// init function and exits the process when that fails, so a binary built
// with the tag needs an NVIDIA driver (libcuda.so.1) and a GPU to start at
// all, and the default build never imports it.
//
// Shape of the backend:
//   - One CUDA context per device (the primary context), made current on one
//     OS-thread-locked goroutine (loop.go) that performs every driver call;
//     the kernels.Backend methods run on the caller's goroutine and hand the
//     driver work to it: launches are queued and not waited for, copies to
//     and from host memory wait.
//   - One stream per backend: every kernel, copy and memset runs on it in
//     order, which is what makes the caching allocator (alloc.go) safe: a
//     freed block reused by the next Alloc is only touched by work queued
//     after the work that used it before.
//   - Kernels are the extern "C" functions of kernels.cu, compiled by nvcc to
//     PTX for sm_80 (go generate) and embedded; the driver JIT-compiles the
//     PTX for the GPU at hand when the backend opens (sm_90 on an H200).
//   - Results follow the CPU reference: row statistics, normalisers and
//     column sums in double, fixed reduction orders, no atomics in the
//     floating-point paths, so a run repeats bit for bit on one GPU.
//   - GEMM runs in FP32 by default. TF32 tensor cores (mma.sync) are opt-in
//     (Config.TF32, or TROUPE_CUDA_TF32=1): they round inputs to 10 mantissa
//     bits, about 1e-3 relative, beyond the FP32 tolerance the conformance
//     suite holds the default path to.
//
// With the extra tag cudaemu the package runs the same kernels.cu on a CPU
// emulator (emu.cc) instead of the driver: `go test -tags cuda,cudaemu
// ./kernels/cuda` checks every kernel and all of the host code against the
// conformance suite on a machine without a GPU.
//
// cuda imports nothing from troupe but kernels.
package cuda

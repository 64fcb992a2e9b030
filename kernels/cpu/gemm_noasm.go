//go:build !amd64 || noasm

package cpu

// simdKernels: no assembly micro-kernel on this architecture (or with the
// noasm build tag); GEMM runs the pure Go one.
func simdKernels() []*gemmKernel { return nil }

// bf16PairKernel: no native bf16 kernel; bf16 GEMMs widen to fp32.
func bf16PairKernel() *gemmKernel { return nil }

//go:build !amd64 || noasm

package cpu

// simdKernel: no assembly micro-kernel on this architecture (or with the
// noasm build tag); GEMM runs the pure Go one.
func simdKernel() *gemmKernel { return nil }

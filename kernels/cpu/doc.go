// Package cpu is troupe's reference and default kernels backend: pure Go,
// with an AVX2/FMA GEMM micro-kernel in Go assembly on amd64, parallel over
// cores. It registers itself as "cpu" with the kernels registry.
//
// cpu must not use cgo and imports nothing from troupe but kernels.
package cpu

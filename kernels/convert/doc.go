// Package convert converts between float32 and the 16-bit types (bf16,
// fp16) over slices, with vector loops where the CPU has them (AVX2 for
// bf16's integer rounding, F16C for fp16) and the reference conversions of
// package kernels elsewhere, bit for bit the same. The CPU backend's
// buffers and the collectives' 16-bit wire share it.
package convert

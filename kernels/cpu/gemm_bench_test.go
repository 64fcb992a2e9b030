package cpu

import (
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
)

// BenchmarkGemm measures square products and the shapes troupe's models
// run, on one thread and on GOMAXPROCS threads, reporting GFLOP/s.
func BenchmarkGemm(b *testing.B) {
	cases := []struct {
		name string
		g    kernels.GemmArgs
	}{
		{"512x512x512", kernels.GemmArgs{M: 512, N: 512, K: 512}},
		{"1024x1024x1024", kernels.GemmArgs{M: 1024, N: 1024, K: 1024}},
		{"2048x2048x2048", kernels.GemmArgs{M: 2048, N: 2048, K: 2048}},
		// GPT-tiny QKV projection: [32·64, 128]·[128, 384].
		{"gpt_qkv_2048x384x128", kernels.GemmArgs{M: 2048, N: 384, K: 128}},
		// MLP forward: x[256, 784]·W[1024, 784]ᵀ.
		{"mlp_fwd_NT_256x1024x784", kernels.GemmArgs{M: 256, N: 1024, K: 784, TransB: true}},
		// MLP weight gradient: dYᵀ[1024, 256]·x[256, 784].
		{"mlp_dW_TN_1024x784x256", kernels.GemmArgs{M: 1024, N: 784, K: 256, TransA: true}},
		// Attention scores, 32 sequences × 4 heads: q[64, 32]·k[64, 32]ᵀ.
		{"attn_qk_NT_b128_64x64x32", kernels.GemmArgs{M: 64, N: 64, K: 32, TransB: true, Batch: 128}},
		// Attention output: p[64, 64]·v[64, 32].
		{"attn_pv_b128_64x32x64", kernels.GemmArgs{M: 64, N: 32, K: 64, Batch: 128}},
	}
	threadCounts := []int{1}
	if n := runtime.GOMAXPROCS(0); n > 1 {
		threadCounts = append(threadCounts, n)
	}
	for _, tc := range cases {
		g := tc.g
		g.Alpha = 1
		n := g.Normalize()
		rowsA, rowsB := storedRows(n)
		a := make(Buf, (n.Batch-1)*n.StrideA+rowsA*n.LDA)
		bb := make(Buf, (n.Batch-1)*n.StrideB+rowsB*n.LDB)
		c := make(Buf, (n.Batch-1)*n.StrideC+n.M*n.LDC)
		for i := range a {
			a[i] = float32(i%13) * 0.1
		}
		for i := range bb {
			bb[i] = float32(i%7) * 0.1
		}
		flops := 2 * float64(n.M) * float64(n.N) * float64(n.K) * float64(n.Batch)
		for _, threads := range threadCounts {
			b.Run(fmt.Sprintf("%s/t%d", tc.name, threads), func(b *testing.B) {
				be := New(threads)
				be.Gemm(g, a, bb, c)
				for b.Loop() {
					be.Gemm(g, a, bb, c)
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// storedRows is how many rows of their leading dimension A and B occupy in
// storage (one batch member of a normalized product).
func storedRows(n kernels.GemmArgs) (rowsA, rowsB int) {
	rowsA, rowsB = n.M, n.K
	if n.TransA {
		rowsA = n.K
	}
	if n.TransB {
		rowsB = n.N
	}
	return rowsA, rowsB
}

// BenchmarkGemmBF16 measures square bf16 products (C bf16, as torch.matmul
// on bf16 tensors) on the path the CPU takes, reporting GFLOP/s.
func BenchmarkGemmBF16(b *testing.B) {
	threadCounts := []int{1}
	if n := runtime.GOMAXPROCS(0); n > 1 {
		threadCounts = append(threadCounts, n)
	}
	for _, n := range []int{512, 1024, 2048} {
		g := kernels.GemmArgs{M: n, N: n, K: n, Alpha: 1}
		mk := func(seed int) Half {
			h := Half{V: make([]uint16, n*n), T: kernels.BF16}
			for i := range h.V {
				h.V[i] = uint16(math.Float32bits(float32((i+seed)%13)*0.1) >> 16)
			}
			return h
		}
		a, bb, c := mk(0), mk(5), mk(0)
		flops := 2 * float64(n) * float64(n) * float64(n)
		for _, threads := range threadCounts {
			b.Run(fmt.Sprintf("%dx%dx%d/t%d", n, n, n, threads), func(b *testing.B) {
				be := New(threads)
				be.Gemm(g, a, bb, c)
				for b.Loop() {
					be.Gemm(g, a, bb, c)
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

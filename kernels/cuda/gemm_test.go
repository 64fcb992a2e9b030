//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/kernels/kerneltest"
)

// paddedBatch is the GEMM of size sz (M, N, K) and transposes tr that the
// large-shape tests run: α 0.75, β 0.5, a batch of 2 with padded leading
// dimensions and strides; n is it normalised, rowsA and rowsB the stored
// rows of one batch member's A and B.
func paddedBatch(sz [3]int, tr [2]bool) (g, n kernels.GemmArgs, rowsA, rowsB int) {
	g = kernels.GemmArgs{TransA: tr[0], TransB: tr[1], M: sz[0], N: sz[1], K: sz[2], Alpha: 0.75, Beta: 0.5, Batch: 2}
	n = g.Normalize()
	g.LDA, g.LDB, g.LDC = n.LDA+3, n.LDB+1, n.LDC+2
	n = g.Normalize()
	g.StrideA, g.StrideB, g.StrideC = n.StrideA+5, n.StrideB+7, n.StrideC+11
	n = g.Normalize()
	rowsA, rowsB = n.M, n.K
	if n.TransA {
		rowsA = n.K
	}
	if n.TransB {
		rowsB = n.N
	}
	return g, n, rowsA, rowsB
}

// TestGemmLowLargeShapes covers k_gemm_low beyond the conformance suite's
// single 128×128 tile: bf16 and fp16 operands, C in fp32 and in the
// operands' type, every transpose, padded leading dimensions and a
// strided batch of 2, at sizes that leave partial tiles in M, N and K.
// Reference: the CPU backend's fp32 product of the same (rounded)
// operands, exact products and fp32 sums on both sides, so they differ by
// the two summation orders, 2(K+4)·2⁻²⁴·Σ|a·b|; a 16-bit C adds one
// rounding of the result (2⁻⁸ or 2⁻¹¹ of it, half the smallest value).
func TestGemmLowLargeShapes(t *testing.T) {
	be := open(t, false)
	ref := cpu.New(1)
	rng := rand.New(rand.NewPCG(11, 12))
	for _, dt := range []kernels.DType{kernels.BF16, kernels.F16} {
		unit, smallest := 0x1p-8, 0x1p-133
		if dt == kernels.F16 {
			unit, smallest = 0x1p-11, 0x1p-24
		}
		round := func(v []float32) []float32 {
			h := make([]uint16, len(v))
			kernels.ToLow(dt, h, v)
			kernels.FromLow(dt, v, h)
			return v
		}
		randn := func(n int) []float32 {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
			return round(v)
		}
		for _, cLow := range []bool{false, true} {
			for _, sz := range [][3]int{{129, 257, 40}, {130, 200, 67}} {
				for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
					g, n, rowsA, rowsB := paddedBatch(sz, tr)
					av := randn((n.Batch-1)*n.StrideA + rowsA*n.LDA)
					bv := randn((n.Batch-1)*n.StrideB + rowsB*n.LDB)
					cv := randn((n.Batch-1)*n.StrideC + n.M*n.LDC)
					A, B := be.AllocAs(len(av), dt), be.AllocAs(len(bv), dt)
					be.Upload(A, av)
					be.Upload(B, bv)
					C := be.Alloc(len(cv))
					if cLow {
						C = be.AllocAs(len(cv), dt)
					}
					be.Upload(C, cv)
					be.Gemm(g, A, B, C)
					got := make([]float32, len(cv))
					be.Download(got, C)
					if err := be.Sync(); err != nil {
						t.Fatal(err)
					}
					want := append([]float32(nil), cv...)
					ref.Gemm(g, cpu.Buf(av), cpu.Buf(bv), cpu.Buf(want))
					abs := func(v []float32) []float32 {
						out := make([]float32, len(v))
						for i, x := range v {
							out[i] = float32(math.Abs(float64(x)))
						}
						return out
					}
					mag := abs(cv)
					ref.Gemm(g, cpu.Buf(abs(av)), cpu.Buf(abs(bv)), cpu.Buf(mag))
					for i := range got {
						tol := 2 * float64(n.K+4) * 0x1p-24 * float64(mag[i])
						if cLow {
							tol += unit*math.Abs(float64(want[i])) + smallest/2
						}
						if d := math.Abs(float64(got[i] - want[i])); !(d <= tol) {
							t.Fatalf("%v C=%v %v trans=%v: C[%d] = %g, want %g (±%g)", dt, map[bool]string{false: "fp32", true: "low"}[cLow], sz, tr, i, got[i], want[i], tol)
						}
					}
					be.Free(A)
					be.Free(B)
					be.Free(C)
				}
			}
		}
	}
}

// BenchmarkGemm4096 measures C = A·B at 4096³ on each GEMM path and
// reports TFLOP/s (2·M·N·K per product): fp32 (the default kernel), tf32
// (mma.sync, TROUPE_CUDA_TF32=1), and bf16 and fp16 (k_gemm_low, mma.sync
// on 16-bit operands, C fp32: what --precision bf16|fp16 runs). The H200's dense
// peaks on NVIDIA's spec sheet: about 67 TFLOP/s FP32, 495 TF32, 989 BF16.
func BenchmarkGemm4096(b *testing.B) {
	const n = 4096
	for _, path := range []string{"fp32", "tf32", "bf16", "fp16"} {
		b.Run(path, func(b *testing.B) {
			if emulated {
				b.Skip("the emulator's speed means nothing")
			}
			be := open(b, path == "tf32")
			if path != "fp32" && !be.info.tensorCores() {
				b.Skipf("%s has no tensor cores", be.info.name)
			}
			rng := rand.New(rand.NewPCG(7, 8))
			v := make([]float32, n*n)
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
			A, B, C := be.Alloc(n*n).(*Buf), be.Alloc(n*n).(*Buf), be.Alloc(n*n).(*Buf)
			be.Upload(A, v)
			be.Upload(B, v)
			run := func() { be.Gemm(kernels.GemmArgs{M: n, N: n, K: n, Alpha: 1}, A, B, C) }
			if dt, err := kernels.ParseDType(path); err == nil && dt.Low() {
				A16, B16 := be.AllocAs(n*n, dt), be.AllocAs(n*n, dt)
				be.Convert(A16, A)
				be.Convert(B16, B)
				run = func() { be.Gemm(kernels.GemmArgs{M: n, N: n, K: n, Alpha: 1}, A16, B16, C) }
			}
			run()
			if err := be.Sync(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				run()
			}
			if err := be.Sync(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(2*n*n*n*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
		})
	}
}

// BenchmarkKernels times the kernels of one small-GPT training step (the
// shared kerneltest.Bench, each call followed by Sync) on the GPU.
func BenchmarkKernels(b *testing.B) {
	if emulated {
		b.Skip("the emulator's speed means nothing")
	}
	kerneltest.Bench(b, open(b, false))
}

// TestGemmLargeShapes covers the 128×128-tile FP32 kernel and the TF32
// kernel (the conformance suite's largest M·N stays below 128×128) at
// sizes that leave partial tiles in M, N and K, with every transpose,
// padded leading dimensions and a strided batch, against the CPU backend
// with the dot-product bound of gemmClose.
func TestGemmLargeShapes(t *testing.T) {
	for _, tf32 := range []bool{false, true} {
		t.Run(fmt.Sprintf("tf32=%v", tf32), func(t *testing.T) {
			be := open(t, tf32)
			if tf32 && !be.tf32() {
				t.Skip("no tensor cores")
			}
			p := &pair{t: t, gpu: be, ref: cpu.New(1), rng: rand.New(rand.NewPCG(9, 10))}
			for _, sz := range [][3]int{{129, 257, 13}, {130, 200, 67}, {256, 128, 1}} {
				for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
					g, n, rowsA, rowsB := paddedBatch(sz, tr)
					a := p.randn((n.Batch-1)*n.StrideA+rowsA*n.LDA, 1)
					b := p.randn((n.Batch-1)*n.StrideB+rowsB*n.LDB, 1)
					c := p.randn((n.Batch-1)*n.StrideC+n.M*n.LDC, 1)
					_, before := p.get(c)
					p.gpu.Gemm(g, a.g, b.g, c.g)
					p.ref.Gemm(g, a.c, b.c, c.c)
					// gemmClose's magnitude product runs over the whole
					// buffers as one unbatched product would not fit the
					// strides; compare per batch member through views.
					for bt := 0; bt < n.Batch; bt++ {
						sub := func(x both, off, ln int) both {
							return both{g: p.gpu.View(x.g, off, ln), c: p.ref.View(x.c, off, ln), n: ln}
						}
						one := g
						one.Batch, one.StrideA, one.StrideB, one.StrideC = 1, 0, 0, 0
						ca := sub(c, bt*n.StrideC, n.M*n.LDC)
						p.gemmClose(fmt.Sprintf("%dx%dx%d trans=%v batch %d", sz[0], sz[1], sz[2], tr, bt), one,
							sub(a, bt*n.StrideA, rowsA*n.LDA), sub(b, bt*n.StrideB, rowsB*n.LDB), ca,
							before[bt*n.StrideC:bt*n.StrideC+n.M*n.LDC], tf32 && sz[2] >= 64)
					}
				}
			}
		})
	}
}

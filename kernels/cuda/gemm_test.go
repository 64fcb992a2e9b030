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

// toBF16 converts the n float32 values of src into bfloat16 in dst (two a
// float32 slot) on the GPU.
func (be *Backend) toBF16(dst, src *Buf) {
	if 2*dst.n < src.n {
		panic(fmt.Sprintf("toBF16: %d slots for %d values", dst.n, src.n))
	}
	be.launch1(kF32ToBF16, src.n, argInt(src.n), src.arg(), dst.arg())
}

// gemmBF16 runs the BF16 tensor-core kernel: C = A·Bᵀ with A [m, k] and
// B [n, k] in bfloat16 (as made by toBF16), C [m, n] float32.
func (be *Backend) gemmBF16(m, n, k int, a, b, c *Buf) {
	if k%bf16KMultiple != 0 {
		panic(fmt.Sprintf("gemmBF16: K = %d is odd", k))
	}
	grid := [3]int{min((n+tcTile-1)/tcTile, be.maxRowBlocks), min((m+tcTile-1)/tcTile, be.info.maxGridY), 1}
	be.launch(kGemmBF16, grid, [3]int{blockThreads, 1, 1}, argInt(m), argInt(n), argInt(k), argF32(1), argF32(0),
		a.arg(), argInt(k), b.arg(), argInt(k), c.arg(), argInt(n))
}

// bf16Round is k_f32_to_bf16 on the host: round to nearest even, keep the
// result as a float32.
func bf16Round(x float32) float32 {
	u := math.Float32bits(x)
	u += 0x7fff + (u>>16)&1
	return math.Float32frombits(u &^ 0xffff)
}

// TestGemmBF16 checks the benchmark's BF16 kernel, the tensor-core ceiling
// probe: against the CPU's FP32 product of the bf16-rounded inputs (exact
// in float32), it may differ only by the float32 accumulation,
// (K+4)·u·Σ|a·b| on either side. Sizes leave partial tiles in M, N and K.
func TestGemmBF16(t *testing.T) {
	be := open(t, false)
	if !be.info.tensorCores() {
		t.Skip("no tensor cores")
	}
	const m, n, k = 130, 72, 96
	rng := rand.New(rand.NewPCG(5, 6))
	av, bv := make([]float32, m*k), make([]float32, n*k)
	for i := range av {
		av[i] = float32(rng.NormFloat64())
	}
	for i := range bv {
		bv[i] = float32(rng.NormFloat64())
	}
	a32, b32 := be.Alloc(m*k).(*Buf), be.Alloc(n*k).(*Buf)
	be.Upload(a32, av)
	be.Upload(b32, bv)
	a16, b16 := be.Alloc((m*k+1)/2).(*Buf), be.Alloc((n*k+1)/2).(*Buf)
	be.toBF16(a16, a32)
	be.toBF16(b16, b32)
	c := be.Alloc(m * n).(*Buf)
	be.gemmBF16(m, n, k, a16, b16, c)
	got := make([]float32, m*n)
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
	be.Download(got, c)

	ref := cpu.New(1)
	ar, br, mag := make([]float32, len(av)), make([]float32, len(bv)), make([]float32, m*n)
	for i, v := range av {
		ar[i] = bf16Round(v)
	}
	for i, v := range bv {
		br[i] = bf16Round(v)
	}
	want := make([]float32, m*n)
	g := kernels.GemmArgs{TransB: true, M: m, N: n, K: k, Alpha: 1}
	ref.Gemm(g, cpu.Buf(ar), cpu.Buf(br), cpu.Buf(want))
	for i := range ar {
		ar[i] = float32(math.Abs(float64(ar[i])))
	}
	for i := range br {
		br[i] = float32(math.Abs(float64(br[i])))
	}
	ref.Gemm(g, cpu.Buf(ar), cpu.Buf(br), cpu.Buf(mag))
	const u = 1.0 / (1 << 24)
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); !(d <= 2*(k+4)*u*float64(mag[i])) {
			t.Fatalf("C[%d, %d] = %g, want %g (|diff| %g, magnitude %g)", i/n, i%n, got[i], want[i], d, mag[i])
		}
	}
}

// BenchmarkGemm4096 measures C = A·B at 4096³ on each GEMM path and
// reports TFLOP/s (2·M·N·K per product): fp32 (the default kernel), tf32
// (mma.sync, TROUPE_CUDA_TF32=1) and bf16 (mma.sync on bfloat16 operands,
// the tensor-core ceiling probe, not used in training). The H200's dense
// peaks on NVIDIA's spec sheet: about 67 TFLOP/s FP32, 495 TF32, 989 BF16.
func BenchmarkGemm4096(b *testing.B) {
	const n = 4096
	for _, path := range []string{"fp32", "tf32", "bf16"} {
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
			if path == "bf16" {
				A16, B16 := be.Alloc(n*n/2).(*Buf), be.Alloc(n*n/2).(*Buf)
				be.toBF16(A16, A)
				be.toBF16(B16, B)
				run = func() { be.gemmBF16(n, n, n, A16, B16, C) }
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
					g := kernels.GemmArgs{TransA: tr[0], TransB: tr[1], M: sz[0], N: sz[1], K: sz[2], Alpha: 0.75, Beta: 0.5, Batch: 2}
					n := g.Normalize()
					g.LDA, g.LDB, g.LDC = n.LDA+3, n.LDB+1, n.LDC+2
					n = g.Normalize()
					g.StrideA, g.StrideB, g.StrideC = n.StrideA+5, n.StrideB+7, n.StrideC+11
					n = g.Normalize()
					rowsA, rowsB := n.M, n.K
					if n.TransA {
						rowsA = n.K
					}
					if n.TransB {
						rowsB = n.N
					}
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

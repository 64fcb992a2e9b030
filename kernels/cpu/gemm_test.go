package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/troupe-ml/troupe/kernels"
)

// Gemm and the other parallel kernels run on the team's helpers, which
// outlive a call by at most teamSpin + teamIdle; nothing may be left after
// that (goleak waits that long).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// kernelsToTest is every micro-kernel this machine can run: the portable one
// always, each assembly one where the CPU has it.
func kernelsToTest() []*gemmKernel {
	return append([]*gemmKernel{goKernel}, simdKernels()...)
}

// refGemm is the naive triple loop in float64 over the same storage
// conventions. It also returns, per element of C, the magnitude
// |alpha|·Σ|a||b| + |beta·c| that bounds the float32 rounding error.
func refGemm(g kernels.GemmArgs, A, B, C []float32) (want, mag []float64) {
	g = g.Normalize()
	want = make([]float64, len(C))
	mag = make([]float64, len(C))
	for i, v := range C {
		want[i] = float64(v)
	}
	for bt := range g.Batch {
		oa, ob, oc := bt*g.StrideA, bt*g.StrideB, bt*g.StrideC
		for i := range g.M {
			for j := range g.N {
				var s, sa float64
				for p := range g.K {
					var av, bv float64
					if g.TransA {
						av = float64(A[oa+p*g.LDA+i])
					} else {
						av = float64(A[oa+i*g.LDA+p])
					}
					if g.TransB {
						bv = float64(B[ob+j*g.LDB+p])
					} else {
						bv = float64(B[ob+p*g.LDB+j])
					}
					s += av * bv
					sa += math.Abs(av * bv)
				}
				ci := oc + i*g.LDC + j
				alpha, beta := float64(g.Alpha), float64(g.Beta)
				if g.Beta == 0 {
					want[ci] = alpha * s
					mag[ci] = math.Abs(alpha) * sa
				} else {
					want[ci] = alpha*s + beta*float64(C[ci])
					mag[ci] = math.Abs(alpha)*sa + math.Abs(beta*float64(C[ci]))
				}
			}
		}
	}
	return want, mag
}

func randSlice(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.Float64()*2 - 1)
	}
	return x
}

// gemmCase is one product to check, with room around every operand: leading
// dimensions and batch strides larger than packed, so that reads and writes
// outside the matrices would show.
type gemmCase struct {
	g      kernels.GemmArgs
	padLD  int
	padStr int
	nanC   bool
	// shared, when set, bounds the operand cooperating threads share, so
	// that a small product spans several shared ranges.
	shared int
	// coop: threads cooperate on each member instead of splitting it.
	coop bool
}

func (tc gemmCase) String() string {
	g := tc.g
	t := func(b bool) string {
		if b {
			return "T"
		}
		return "N"
	}
	return fmt.Sprintf("%s%s_m%d_n%d_k%d_b%d_a%g_beta%g_pad%d_%d_nan%v",
		t(g.TransA), t(g.TransB), g.M, g.N, g.K, g.Batch, g.Alpha, g.Beta, tc.padLD, tc.padStr, tc.nanC)
}

// check runs the case with kernel kern on the given number of threads and
// compares every element of C's buffer with the reference.
//
// Tolerance: a float32 dot product of length K, summed in any order, with or
// without FMA, is within γ(K+2)·(|alpha|·Σ|a||b| + |beta·c|) of the exact
// value, where γ(n) ≈ n·u and u = 2⁻²⁴ is float32's unit roundoff (Higham,
// Accuracy and Stability, §3.1; the +2 covers the alpha and beta updates).
// The test allows twice that, per element; the float64 reference's own
// error is negligible next to it. Elements outside C must be untouched.
func (tc gemmCase) check(t *testing.T, kern *gemmKernel, threads int, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	g := tc.g
	rowsA, colsA := g.M, g.K
	if g.TransA {
		rowsA, colsA = g.K, g.M
	}
	rowsB, colsB := g.K, g.N
	if g.TransB {
		rowsB, colsB = g.N, g.K
	}
	batch := max(1, g.Batch)
	g.LDA, g.LDB, g.LDC = colsA+tc.padLD, colsB+tc.padLD, g.N+tc.padLD
	if batch > 1 {
		g.StrideA = rowsA*g.LDA + tc.padStr
		g.StrideB = rowsB*g.LDB + tc.padStr
		g.StrideC = g.M*g.LDC + tc.padStr
	}
	n := g.Normalize()
	A := randSlice(r, (batch-1)*n.StrideA+rowsA*n.LDA)
	B := randSlice(r, (batch-1)*n.StrideB+rowsB*n.LDB)
	C := randSlice(r, (batch-1)*n.StrideC+g.M*n.LDC)
	inside := make([]bool, len(C))
	for bt := range batch {
		for i := range g.M {
			for j := range g.N {
				ci := bt*n.StrideC + i*n.LDC + j
				inside[ci] = true
				if tc.nanC {
					C[ci] = float32(math.NaN())
				}
			}
		}
	}
	orig := append([]float32(nil), C...)
	want, mag := refGemm(g, A, B, C)

	// Below its work threshold Gemm would run small products on one
	// thread; force the requested count to exercise the parallel paths.
	if p, ok := prepareGemm(kern, g, Buf(A), Buf(B), Buf(C)); ok {
		p.sharedFloats, p.coopOnly = tc.shared, tc.coop
		p.execute(threads)
	}

	u := math.Ldexp(1, -24)
	bad := 0
	for i, got := range C {
		if !inside[i] {
			if math.Float32bits(got) != math.Float32bits(orig[i]) {
				t.Errorf("%v: element %d outside C changed: %v → %v", tc, i, orig[i], got)
				bad++
			}
		} else {
			tol := 2*float64(g.K+2)*u*mag[i] + 1e-30
			if d := math.Abs(float64(got) - want[i]); !(d <= tol) {
				t.Errorf("%v: C[%d] = %v, want %v (|diff| %.3g > tol %.3g)", tc, i, got, want[i], d, tol)
				bad++
			}
		}
		if bad > 5 {
			t.Fatalf("%v: too many mismatches", tc)
		}
	}
}

// TestGemmShapes covers all four transpose combinations over shapes that
// hit every edge: sizes 1, 7, 33, 100 and 1000 in each position, partial
// register tiles, K spanning several kc blocks, M spanning several mc
// blocks, N spanning several nc blocks.
func TestGemmShapes(t *testing.T) {
	shapes := [][3]int{
		{1, 1, 1}, {1, 7, 33}, {7, 1, 100}, {33, 100, 1}, {7, 33, 7},
		{6, 16, 4}, {12, 32, 8}, {33, 33, 33}, {100, 100, 100},
		{1000, 7, 33}, {7, 1000, 33}, {33, 7, 1000}, {1, 1000, 100}, {100, 1, 1000},
		{200, 50, 600}, {385, 40, 17}, {5, 4200, 3},
	}
	for _, kern := range kernelsToTest() {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for si, s := range shapes {
					tc := gemmCase{g: kernels.GemmArgs{TransA: ta, TransB: tb, M: s[0], N: s[1], K: s[2], Alpha: 1, Beta: 0}}
					t.Run(kern.name+"/"+tc.String(), func(t *testing.T) {
						t.Parallel()
						tc.check(t, kern, 1, uint64(si))
					})
				}
			}
		}
	}
}

// TestGemmRandom draws random shapes, leading-dimension and stride padding,
// alpha, beta (including 0 over a NaN-filled C, and 1), batch and thread
// counts, for every transpose combination and kernel.
func TestGemmRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sizes := []int{1, 2, 5, 6, 7, 15, 16, 17, 33, 64, 100}
	pick := func() int {
		if r.IntN(3) == 0 {
			return 1 + r.IntN(150)
		}
		return sizes[r.IntN(len(sizes))]
	}
	alphas := []float32{1, -1, 0.5, 2.25}
	betas := []float32{0, 1, -0.75, 0.3}
	for _, kern := range kernelsToTest() {
		for i := range 120 {
			g := kernels.GemmArgs{
				TransA: i&1 != 0, TransB: i&2 != 0,
				M: pick(), N: pick(), K: pick(),
				Alpha: alphas[r.IntN(len(alphas))], Beta: betas[r.IntN(len(betas))],
				Batch: []int{0, 1, 2, 3, 5}[r.IntN(5)],
			}
			tc := gemmCase{g: g, padLD: r.IntN(3) * 3, padStr: r.IntN(2) * 11, nanC: g.Beta == 0 && r.IntN(2) == 0}
			threads := 1 + r.IntN(3)
			seed := r.Uint64()
			t.Run(fmt.Sprintf("%s/t%d/%v", kern.name, threads, tc), func(t *testing.T) {
				t.Parallel()
				tc.check(t, kern, threads, seed)
			})
		}
	}
}

// TestGemmThreads checks the parallel paths: whole batch members per
// goroutine; a member split into a block of C per goroutine (by columns
// or by rows); and threads cooperating on one member by row blocks
// (shared packed B) or by column ranges (shared packed A), over several k
// blocks and shared blocks, with thread counts that do and do not divide
// the work.
func TestGemmThreads(t *testing.T) {
	cases := []gemmCase{
		{g: kernels.GemmArgs{M: 500, N: 100, K: 600, Alpha: 1}},                                                       // rows
		{g: kernels.GemmArgs{M: 400, N: 600, K: 300, Alpha: -1, Beta: 0.5, TransB: true}, padLD: 3},                   // columns, 2 shared A blocks
		{g: kernels.GemmArgs{M: 7, N: 1000, K: 33, Alpha: 1, TransA: true}},                                           // columns, one A panel
		{g: kernels.GemmArgs{M: 64, N: 64, K: 32, Alpha: 0.125, Batch: 7, TransB: true}},                              // batch
		{g: kernels.GemmArgs{M: 210, N: 210, K: 210, Alpha: 1, Beta: 1, Batch: 3, TransA: true}, padLD: 5, padStr: 9}, // cooperative per member
		{g: kernels.GemmArgs{M: 130, N: 130, K: 300, Beta: 0, Alpha: 2, TransA: true, TransB: true}, nanC: true},
	}
	for _, kern := range kernelsToTest() {
		for _, tc := range cases {
			for _, threads := range []int{2, 3, 8} {
				for _, coop := range []bool{false, true} {
					tc.coop = coop
					t.Run(fmt.Sprintf("%s/t%d/coop=%v/%v", kern.name, threads, coop, tc), func(t *testing.T) {
						t.Parallel()
						tc.check(t, kern, threads, 3)
					})
				}
			}
		}
	}
}

// TestGemmDegenerate: K = 0 or alpha = 0 leaves beta·C (zero when beta is
// 0, even over NaNs); M = 0 or N = 0 touches nothing.
func TestGemmDegenerate(t *testing.T) {
	be := New(2)
	nan := float32(math.NaN())
	for _, tc := range []struct {
		name string
		g    kernels.GemmArgs
		c    []float32
		want []float32
	}{
		{"k0_beta0", kernels.GemmArgs{M: 2, N: 2, K: 0, Alpha: 1}, []float32{nan, 1, 2, 3}, []float32{0, 0, 0, 0}},
		{"k0_beta2", kernels.GemmArgs{M: 2, N: 2, K: 0, Alpha: 1, Beta: 2}, []float32{0, 1, 2, 3}, []float32{0, 2, 4, 6}},
		{"alpha0_beta1", kernels.GemmArgs{M: 2, N: 2, K: 3, Alpha: 0, Beta: 1}, []float32{0, 1, 2, 3}, []float32{0, 1, 2, 3}},
		{"alpha0_beta0_ldc3", kernels.GemmArgs{M: 2, N: 2, K: 3, Alpha: 0, LDC: 3}, []float32{nan, nan, 9, nan, nan}, []float32{0, 0, 9, 0, 0}},
		{"m0", kernels.GemmArgs{M: 0, N: 2, K: 3, Alpha: 1}, []float32{}, []float32{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := make(Buf, 6)
			b := make(Buf, 6)
			c := Buf(append([]float32(nil), tc.c...))
			be.Gemm(tc.g, a, b, c)
			for i := range c {
				if c[i] != tc.want[i] {
					t.Fatalf("C = %v, want %v", c, tc.want)
				}
			}
		})
	}
}

// TestGemmHandWorked is a product small enough to check by hand:
// [1 2; 3 4]·[5 6; 7 8] = [19 22; 43 50], with alpha 2 and beta 1 over C = 1.
func TestGemmHandWorked(t *testing.T) {
	for _, kern := range kernelsToTest() {
		c := Buf{1, 1, 1, 1}
		gemmWith(kern, 1, kernels.GemmArgs{M: 2, N: 2, K: 2, Alpha: 2, Beta: 1}, Buf{1, 2, 3, 4}, Buf{5, 6, 7, 8}, c)
		want := []float32{39, 45, 87, 101}
		for i := range want {
			if c[i] != want[i] {
				t.Fatalf("%s: C = %v, want %v", kern.name, c, want)
			}
		}
	}
}

// TestGemmBadArgs: misuse panics with a message naming the argument.
func TestGemmBadArgs(t *testing.T) {
	be := New(1)
	for _, tc := range []struct {
		name, want string
		g          kernels.GemmArgs
		na, nb, nc int
	}{
		{"short_A", "A needs 6", kernels.GemmArgs{M: 2, N: 2, K: 3, Alpha: 1}, 5, 6, 4},
		{"short_B", "B needs 6", kernels.GemmArgs{M: 2, N: 2, K: 3, Alpha: 1, TransB: true}, 6, 5, 4},
		{"short_C_batch", "C needs 8", kernels.GemmArgs{M: 2, N: 2, K: 3, Alpha: 1, Batch: 2, StrideA: 0, StrideB: 0}, 12, 12, 7},
		{"small_LDA", "LDA=2", kernels.GemmArgs{M: 2, N: 2, K: 3, Alpha: 1, LDA: 2}, 6, 6, 4},
		{"negative", "negative size", kernels.GemmArgs{M: -1, N: 2, K: 3}, 6, 6, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				msg := fmt.Sprint(recover())
				if !strings.Contains(msg, tc.want) {
					t.Fatalf("panic %q, want it to mention %q", msg, tc.want)
				}
			}()
			be.Gemm(tc.g, make(Buf, tc.na), make(Buf, tc.nb), make(Buf, tc.nc))
		})
	}
}

// TestGemmNoAllocs: with one thread, a steady-state call allocates nothing
// (pack buffers come from the pool).
func TestGemmNoAllocs(t *testing.T) {
	be := New(1)
	g := kernels.GemmArgs{M: 70, N: 90, K: 300, Alpha: 1, TransB: true}
	a, b, c := make(Buf, 70*300), make(Buf, 90*300), make(Buf, 70*90)
	be.Gemm(g, a, b, c)
	if raceDetector {
		t.Skip("under the race detector sync.Pool drops a random quarter of the buffers put back, so the pack buffers are reallocated; the README's test command checks this without it")
	}
	if n := testing.AllocsPerRun(20, func() { be.Gemm(g, a, b, c) }); n != 0 {
		t.Fatalf("Gemm allocates %v times per call", n)
	}
}

// TestSimdName: Caps reports the kernel Gemm takes, the fastest this CPU
// runs.
func TestSimdName(t *testing.T) {
	want := "generic"
	if ks := simdKernels(); len(ks) > 0 {
		want = ks[0].name
	}
	if got := New(1).Caps().SIMD; got != want {
		t.Fatalf("SIMD = %q, want %q", got, want)
	}
}

// TestSimdKernelsHere says which assembly kernels this machine leaves
// untested (the other tests cover every kernel in kernelsToTest).
func TestSimdKernelsHere(t *testing.T) {
	names := map[string]bool{}
	for _, k := range simdKernels() {
		names[k.name] = true
	}
	for _, name := range []string{"avx512", "avx2+fma"} {
		if !names[name] {
			t.Logf("the %s GEMM kernel is not tested: this CPU (or build) lacks it", name)
		}
	}
}

// TestSimdKernelsSameBits: the assembly kernels keep one FMA chain per
// element over the same k blocks, so they give the AVX2 kernel's bits
// exactly (models' bit-for-bit tests rely on that across machines).
func TestSimdKernelsSameBits(t *testing.T) {
	ks := simdKernels()
	if len(ks) < 2 {
		t.Skipf("needs two assembly GEMM kernels, this CPU runs %d", len(ks))
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, g := range []kernels.GemmArgs{
		{M: 100, N: 70, K: 600, Alpha: 1},
		{M: 64, N: 64, K: 32, Alpha: 0.5, Beta: 1, TransB: true},
		{M: 33, N: 344, K: 300, Alpha: 1, Beta: -2, TransA: true},
		{M: 2048, N: 65, K: 128, Alpha: 1, TransA: true, TransB: true},
	} {
		n := g.Normalize()
		rowsA, rowsB := storedRows(n)
		a, b := randSlice(r, rowsA*n.LDA), randSlice(r, rowsB*n.LDB)
		c0 := randSlice(r, g.M*n.LDC)
		var want []float32
		for i, k := range ks {
			c := append([]float32(nil), c0...)
			gemmWith(k, 1, g, Buf(a), Buf(b), Buf(c))
			if i == 0 {
				want = c
				continue
			}
			for e := range c {
				if math.Float32bits(c[e]) != math.Float32bits(want[e]) {
					t.Fatalf("%+v: %s and %s differ at %d: %v, %v", g, ks[0].name, k.name, e, want[e], c[e])
				}
			}
		}
	}
}

// TestGemmOneProc: with more threads than Ps the goroutines take turns on
// one OS thread; a goroutine waiting for a step must let the others run
// (no deadlock, same result).
func TestGemmOneProc(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	kern := activeKernel
	for _, tc := range []gemmCase{
		{g: kernels.GemmArgs{M: 300, N: 200, K: 600, Alpha: 1}},
		{g: kernels.GemmArgs{M: 100, N: 400, K: 300, Alpha: 1, TransB: true}},
		{g: kernels.GemmArgs{M: 40, N: 40, K: 40, Alpha: 1, Batch: 6}},
	} {
		tc.check(t, kern, 3, 5)
	}
}

// TestPackPanels: every kernel's packing routines (assembly where it has
// them) produce exactly the portable routines' panels, full and partial,
// transposed or not, for k counts around the 8-wide steps.
func TestPackPanels(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, k := range kernelsToTest() {
		for _, kc := range []int{1, 7, 8, 13, 64, 259} {
			for _, trans := range []bool{false, true} {
				for _, n := range []int{k.mr, k.mr - 1, 1} {
					ld := kc + k.nr + 3
					src := randSlice(r, ld*(kc+k.nr+3))
					got, want := make([]float32, k.mr*kc), make([]float32, k.mr*kc)
					k.packA(got, src, ld, trans, n, kc)
					packAPanelGo(want, src, ld, trans, n, kc, k.mr)
					if !slices.Equal(got, want) {
						t.Errorf("%s packA trans=%v rows=%d kc=%d differs", k.name, trans, n, kc)
					}
				}
				for _, n := range []int{k.nr, k.nr - 1, 1} {
					ld := kc + k.nr + 3
					src := randSlice(r, ld*(kc+k.nr+3))
					got, want := make([]float32, k.nr*kc), make([]float32, k.nr*kc)
					k.packB(got, src, ld, trans, n, kc)
					packBPanelGo(want, src, ld, trans, n, kc, k.nr)
					if !slices.Equal(got, want) {
						t.Errorf("%s packB trans=%v cols=%d kc=%d differs", k.name, trans, n, kc)
					}
				}
			}
		}
	}
}

// TestCoopCuts: the chunks of a cooperative product cover the extent in
// order, start on panel boundaries, stay within the chunk size, differ by
// at most one panel, and come in a number the threads divide whenever
// there are enough panels; 1,024 rows of 12-row panels in 144-row chunks
// for two threads is the case that ran unevenly before.
func TestCoopCuts(t *testing.T) {
	for _, tc := range []struct{ n, r, chunk, threads int }{
		{1024, 12, 144, 2}, {1024, 8, 128, 2}, {1000, 32, 512, 2}, {7, 8, 8, 2},
		{100, 12, 144, 3}, {4096, 12, 144, 8}, {33, 32, 32, 4}, {200, 8, 16, 3},
	} {
		cuts := coopCuts(tc.n, tc.r, tc.chunk, tc.threads)
		k, panels := len(cuts)-1, ceilDiv(tc.n, tc.r)
		if cuts[0] != 0 || cuts[k] != tc.n {
			t.Fatalf("%+v: cuts %v do not cover [0, %d)", tc, cuts, tc.n)
		}
		if panels >= tc.threads*ceilDiv(panels, tc.chunk/tc.r) && k%tc.threads != 0 {
			t.Errorf("%+v: %d chunks for %d threads", tc, k, tc.threads)
		}
		lo, hi := tc.n, 0
		for i := range k {
			size := cuts[i+1] - cuts[i]
			if cuts[i]%tc.r != 0 || size <= 0 || size > tc.chunk {
				t.Fatalf("%+v: chunk %d is [%d, %d)", tc, i, cuts[i], cuts[i+1])
			}
			if i < k-1 {
				lo, hi = min(lo, size), max(hi, size)
			}
		}
		if k > 1 && hi-lo > tc.r {
			t.Errorf("%+v: full chunks from %d to %d rows: %v", tc, lo, hi, cuts)
		}
	}
}

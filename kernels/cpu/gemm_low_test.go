package cpu

import (
	"bufio"
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/kerneltest"
)

// TestLowGemmPaths holds both low-precision GEMM paths to the conformance
// suite's reference: the widening one (every CPU) and the native bf16 one
// where this CPU has AVX-512 BF16 (skipped with a message elsewhere). The
// plain conformance run covers whichever path New picks.
func TestLowGemmPaths(t *testing.T) {
	t.Run("widen", func(t *testing.T) {
		kerneltest.Run(t, &Backend{threads: 2})
	})
	t.Run("native-bf16", func(t *testing.T) {
		if bf16Native == nil {
			t.Skip("this CPU (or build) has no AVX-512 BF16: the native bf16 GEMM path is not tested here; bf16 widens to fp32")
		}
		kerneltest.Run(t, &Backend{threads: 1, bf16: bf16Native})
	})
}

// tilePairsGo is the reference of the native kernel's arithmetic: per
// lane, the odd element's product then the even one's added to the fp32
// accumulator, each product exact and each sum rounded once (the order
// VDPBF16PS specifies).
func tilePairsGo(mr, nr, k int, a, b []float32, alpha float32) []float32 {
	c := make([]float32, mr*nr)
	for i := range mr {
		for j := range nr {
			var acc float32
			for p := range k {
				aw, bw := math.Float32bits(a[p*mr+i]), math.Float32bits(b[p*nr+j])
				acc += kernels.F32FromBF16(uint16(aw>>16)) * kernels.F32FromBF16(uint16(bw>>16))
				acc += kernels.F32FromBF16(uint16(aw)) * kernels.F32FromBF16(uint16(bw))
			}
			c[i*nr+j] = alpha * acc
		}
	}
	return c
}

// The native micro-kernel against tilePairsGo on normal-range values (the
// instruction flushes subnormals): the same bits.
func TestBF16KernelMatchesReference(t *testing.T) {
	kern := bf16Native
	if kern == nil {
		t.Skip("this CPU (or build) has no AVX-512 BF16: the native bf16 micro-kernel is not tested here")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	word := func() float32 {
		lo := kernels.BF16FromF32(float32(rng.NormFloat64()))
		hi := kernels.BF16FromF32(float32(rng.NormFloat64()))
		return pair(lo, hi)
	}
	for _, k := range []int{1, 2, 7, 64, 129} {
		a, b := make([]float32, k*kern.mr), make([]float32, k*kern.nr)
		for i := range a {
			a[i] = word()
		}
		for i := range b {
			b[i] = word()
		}
		want := tilePairsGo(kern.mr, kern.nr, k, a, b, 0.5)
		got := make([]float32, kern.mr*kern.nr)
		for i := range got {
			got[i] = float32(math.NaN()) // beta = 0 must not read C
		}
		kern.tile(k, a, 1, kern.mr, b, kern.nr, got, kern.nr, 0.5, 0)
		if i := firstBitDiff(got, want); i >= 0 {
			t.Fatalf("k=%d: C[%d] = %v, reference %v", k, i, got[i], want[i])
		}
		// beta ≠ 0 reads C: C = alpha·AB + beta·C.
		prev := append([]float32(nil), got...)
		kern.tile(k, a, 1, kern.mr, b, kern.nr, got, kern.nr, 0.5, 2)
		for i := range got {
			if w := want[i] + 2*prev[i]; math.Abs(float64(got[i]-w)) > 1e-5*math.Abs(float64(w))+1e-6 {
				t.Fatalf("k=%d beta=2: C[%d] = %v, want %v", k, i, got[i], w)
			}
		}
	}
}

// The hand-encoded VDPBF16PS instructions of gemm_bf16_amd64.s are the
// bytes GNU as writes for the instruction each one's comment names
// (skipped where as is not installed).
func TestDPBF16PSEncoding(t *testing.T) {
	as, err := exec.LookPath("as")
	if err != nil {
		t.Skip("GNU as not installed: the encodings of gemm_bf16_amd64.s are not cross-checked")
	}
	src, err := os.ReadFile("gemm_bf16_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`^\s*((?:BYTE \$0x[0-9a-f]{2}; )*BYTE \$0x[0-9a-f]{2}) // VDPBF16PS Z(\d+), Z(\d+), Z(\d+)$`)
	var want [][]byte
	var text strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		var enc []byte
		for _, h := range regexp.MustCompile(`0x([0-9a-f]{2})`).FindAllStringSubmatch(m[1], -1) {
			var v byte
			for _, c := range h[1] {
				v = v*16 + byte(strings.IndexRune("0123456789abcdef", c))
			}
			enc = append(enc, v)
		}
		want = append(want, enc)
		// Go's operand order (src2, src1, dst) is AT&T's.
		text.WriteString("vdpbf16ps %zmm" + m[2] + ", %zmm" + m[3] + ", %zmm" + m[4] + "\n")
	}
	if len(want) != 24 {
		t.Fatalf("%d VDPBF16PS lines in gemm_bf16_amd64.s, want 24", len(want))
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x.s"), []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	obj := filepath.Join(dir, "x.o")
	if out, err := exec.Command(as, "-o", obj, filepath.Join(dir, "x.s")).CombinedOutput(); err != nil {
		t.Fatalf("as: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "x.bin")
	if out, err := exec.Command("objcopy", "-O", "binary", "-j", ".text", obj, bin).CombinedOutput(); err != nil {
		t.Skipf("objcopy: %v\n%s", err, out)
	}
	got, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var flat []byte
	for _, w := range want {
		flat = append(flat, w...)
	}
	if !bytes.Equal(got, flat) {
		t.Fatalf("encodings differ from as's:\n got % x\nwant % x", flat, got)
	}
}

// TestBF16GemmThreads: the native bf16 products of a model's shapes (the
// activations' rows by a narrow weight, and the weight gradients' long K)
// give with 2 and 3 cooperating threads the bits one thread gives (each
// element's sum runs the same k blocks in the same order), with packed
// and with in-place operand panels.
func TestBF16GemmThreads(t *testing.T) {
	if bf16Native == nil {
		t.Skip("this CPU (or build) has no AVX-512 BF16: the native bf16 GEMM path is not tested here")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, g := range []kernels.GemmArgs{
		{M: 2048, N: 128, K: 128, Alpha: 1},                        // rows, A read in place
		{M: 600, N: 300, K: 200, Alpha: 1, Beta: 0.5},              // rows, A packed
		{M: 1000, N: 120, K: 70, Alpha: 1, TransA: true},           // rows, transposed A in place, edges
		{M: 2048, N: 128, K: 384, Alpha: 1, TransB: true},          // rows, B transposed
		{M: 128, N: 384, K: 2048, Alpha: 1, TransA: true},          // columns (weight gradient)
		{M: 60, N: 700, K: 300, Alpha: 1},                          // columns, B read in place, edges
		{M: 512, N: 128, K: 2048, Alpha: 1, Beta: 1, TransA: true}, // rows, long K
	} {
		n := g.Normalize()
		rowsA, rowsB := storedRows(n)
		a, b, c0 := make([]float32, rowsA*n.LDA), make([]float32, rowsB*n.LDB), make([]float32, n.M*n.LDC)
		for _, v := range [][]float32{a, b, c0} {
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
		}
		var want []float32
		for _, threads := range []int{1, 2, 3} {
			be := &Backend{threads: threads, bf16: bf16Native}
			ab, bb := be.AllocAs(len(a), kernels.BF16), be.AllocAs(len(b), kernels.BF16)
			be.Upload(ab, a)
			be.Upload(bb, b)
			c := Buf(append([]float32(nil), c0...))
			be.Gemm(g, ab, bb, c)
			if threads == 1 {
				want = c
				continue
			}
			if i := firstBitDiff(c, want); i >= 0 {
				t.Fatalf("%+v, %d threads: C[%d] = %v, one thread %v", g, threads, i, c[i], want[i])
			}
		}
	}
}

// A 16-bit C is the fp32 product rounded once: the C the product writes
// into a 16-bit buffer has the same bits as the product into an fp32 copy
// of it rounded afterwards, on every path (native bf16 and widened, split
// and cooperative threads, whole batch members, edges, one and several k
// blocks, Beta on the old C, a C wider than N) and at 1 to 3 threads.
func TestLowCRoundedOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	shapes := []kernels.GemmArgs{
		{M: 300, N: 700, K: 90, Alpha: 1},                            // split by columns, edges
		{M: 700, N: 100, K: 64, Alpha: 1, Beta: 0.5},                 // split by rows
		{M: 90, N: 100, K: 600, Alpha: 1.5, TransA: true},            // too narrow to split: cooperative
		{M: 64, N: 96, K: 1030, Alpha: 1, TransB: true, Beta: -1},    // cooperative, odd pairs
		{M: 40, N: 50, K: 30, Alpha: 1, Batch: 3},                    // whole members
		{M: 200, N: 160, K: 400, Alpha: 1, Batch: 3, Beta: 1},        // members one after another
		{M: 5, N: 7, K: 3, Alpha: 1},                                 // one thread, one edge tile
		{M: 130, N: 260, K: 2, Alpha: 2, TransA: true, TransB: true}, // a single k block
		{M: 333, N: 333, K: 333, Alpha: 1, TransA: true, Beta: 0.25}, // square, odd
		{M: 1, N: 1000, K: 500, Alpha: 1},                            // one row
	}
	type backend struct {
		name string
		dt   kernels.DType
		bf16 *gemmKernel
	}
	backends := []backend{{"bf16-widen", kernels.BF16, nil}, {"fp16-widen", kernels.F16, nil}}
	if bf16Native != nil {
		backends = append(backends, backend{"bf16-native", kernels.BF16, bf16Native})
	} else {
		t.Log("this CPU (or build) has no AVX-512 BF16: the native bf16 path's 16-bit C is not tested here")
	}
	for _, g := range shapes {
		n := g.Normalize()
		rowsA, rowsB := storedRows(n)
		lenC := (n.Batch-1)*n.StrideC + n.M*n.LDC
		a := make([]float32, (n.Batch-1)*n.StrideA+rowsA*n.LDA)
		b := make([]float32, (n.Batch-1)*n.StrideB+rowsB*n.LDB)
		c0 := make([]float32, lenC)
		for _, v := range [][]float32{a, b, c0} {
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
		}
		for _, bk := range backends {
			for _, threads := range []int{1, 2, 3} {
				be := &Backend{threads: threads, bf16: bk.bf16}
				ab, bb := be.AllocAs(len(a), bk.dt), be.AllocAs(len(b), bk.dt)
				be.Upload(ab, a)
				be.Upload(bb, b)
				low := be.AllocAs(lenC, bk.dt).(Half)
				be.Upload(low, c0)
				wide := make(Buf, lenC)
				kernels.FromLow(bk.dt, wide, low.V)
				be.Gemm(g, ab, bb, low)
				be.Gemm(g, ab, bb, wide)
				want := make([]uint16, lenC)
				kernels.ToLow(bk.dt, want, wide)
				for i := range want {
					if low.V[i] != want[i] {
						t.Fatalf("%s %+v, %d threads: C[%d] = %#04x, the fp32 product rounded %#04x", bk.name, g, threads, i, low.V[i], want[i])
					}
				}
			}
		}
	}
}

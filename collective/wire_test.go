package collective

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
)

var lowWires = []kernels.DType{kernels.BF16, kernels.F16}

// round is x rounded to type w by the scalar conversions of package
// kernels (the reference the packing must agree with).
func round(w kernels.DType, x float32) float32 {
	if w == kernels.BF16 {
		return kernels.F32FromBF16(kernels.BF16FromF32(x))
	}
	return kernels.F32FromF16(kernels.F16FromF32(x))
}

// TestPackRoundTrip: packing rounds each value to nearest even in the wire
// type and unpacking gives those values back, for odd and even lengths and
// the special values (a NaN stays a NaN, fp16 overflows to ±Inf).
func TestPackRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 65504, 65520, 1e6, -1e6, 1e-8, 3.0e38,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1.00390625, 1.005859375}
	for _, w := range lowWires {
		for _, n := range []int{0, 1, 2, 3, 15, 16, 101} {
			src := make([]float32, n)
			for i := range src {
				if rng.IntN(4) == 0 {
					src[i] = special[rng.IntN(len(special))]
				} else {
					src[i] = float32(rng.NormFloat64() * math.Exp(4*rng.NormFloat64()))
				}
			}
			words := make([]float32, wireWords(w, n))
			pack(w, words, src)
			got := make([]float32, n)
			unpack(w, got, words)
			for i, v := range src {
				want := round(w, v)
				if math.Float32bits(got[i]) != math.Float32bits(want) && !(math.IsNaN(float64(want)) && math.IsNaN(float64(got[i]))) {
					t.Fatalf("%v n=%d: value %d = %v came back as %v, want %v", w, n, i, v, got[i], want)
				}
			}
			if n%2 == 1 && math.Float32bits(words[n/2])>>16 != 0 {
				t.Fatalf("%v n=%d: the odd value's pad is %#x, want 0", w, n, math.Float32bits(words[n/2]))
			}
		}
	}
}

// ringRef is what the ring computes for chunk c of a reduction in wire type
// w, bit for bit: the chunk starts at rank c, each next rank on the ring
// adds its float32 values to the rounded partial sum it received, and the
// owner (rank c − 1) divides for Avg and rounds.
func ringRef(w kernels.DType, op ReduceOp, bufs [][]float32, P, i, c int) float32 {
	v := bufs[c][i]
	for k := 1; k < P; k++ {
		x := bufs[(c+k)%P][i]
		if op.Base() == Max {
			v = max(round(w, v), x)
		} else {
			v = round(w, v) + x
		}
	}
	if op.Base() == Avg {
		v /= float32(P)
	}
	if P == 1 {
		return v // a group of one sends nothing and rounds nothing
	}
	return round(w, v)
}

// TestLowWireReductionsExact is the property test of the ring in a 16-bit
// wire type, over the cases of TestAllReduceMatchesPlainSum (P = 1…8,
// sizes below and not divisible by P, random sub-chunk sizes, random
// delivery order, duplicated messages) and Sum, Avg and Max: every rank of
// an all-reduce ends with the same bits, and each value — and the owned
// chunk of a reduce-scatter — is exactly the ring's order of float32
// additions of rounded partial sums (ringRef). The error against the exact
// sum is then at most P roundings of a partial sum, each ≤ u·Σ|x| (u = 2⁻⁸
// for bf16, 2⁻¹¹ for fp16), which the test checks too.
func TestLowWireReductionsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, w := range lowWires {
		for _, kind := range []Kind{KindAllReduce, KindReduceScatter} {
			for i, pc := range propCases(rng) {
				op := []ReduceOp{Sum, Avg, Max}[i%3].In(w)
				cfg := DefaultConfig()
				cfg.SubChunkBytes = 4 * pc.subElems
				s := newSimNet(t, pc.P, cfg, uint64(i))
				s.dupProb = pc.dup
				bufs := randBufs(rng, pc.P, pc.n)
				in := cloneBufs(bufs)
				sum, mag := refSum(in)
				for r := range bufs {
					s.start(r, Spec{Kind: kind, Buf: bufs[r], Reduce: op})
				}
				s.run()
				name := fmt.Sprintf("%v %v %v", kind, op, pc)
				for r := range bufs {
					if c := s.last(r); c.Err != nil {
						t.Fatalf("%s rank %d: %v", name, r, c.Err)
					}
				}
				u := math.Ldexp(1, -8)
				if w == kernels.F16 {
					u = math.Ldexp(1, -11)
				}
				for c := range pc.P {
					lo, hi := ChunkRange(pc.n, pc.P, c)
					owner := mod(c-1, pc.P)
					for j := lo; j < hi; j++ {
						want := ringRef(w, op, in, pc.P, j, c)
						for r := range bufs {
							if kind == KindReduceScatter && r != owner {
								continue
							}
							if got := bufs[r][j]; math.Float32bits(got) != math.Float32bits(want) {
								t.Fatalf("%s: rank %d element %d (chunk %d) = %v, want %v", name, r, j, c, got, want)
							}
						}
						if op.Base() == Max {
							continue
						}
						ref, tol := sum[j], float64(pc.P)*u*mag[j]*(1+u)
						if op.Base() == Avg {
							ref, tol = ref/float64(pc.P), tol/float64(pc.P)
						}
						if d := math.Abs(float64(want) - ref); d > tol+1e-30 {
							t.Fatalf("%s element %d: %v is %g from the exact %g, bound %g", name, j, want, d, ref, tol)
						}
					}
				}
			}
		}
	}
}

// TestLowWireHalvesTheBytes: on the in-memory network a bf16 or fp16
// all-reduce carries half the payload bytes of fp32 (plus two bytes per
// frame of an odd number of values), the Meter counts half, and every rank
// ends with the same bits (TestLowWireReductionsExact checks which).
func TestLowWireHalvesTheBytes(t *testing.T) {
	const P, n = 4, 1001
	for _, w := range lowWires {
		t.Run(w.String(), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.SubChunkBytes = 4 * 64
			net, comms := startMem(t, P, cfg)
			var mu sync.Mutex
			var words, frames int64
			net.Inject(Fault{Action: FaultDrop, Match: func(m Message) bool {
				mu.Lock()
				defer mu.Unlock()
				if m.Type == MsgData {
					if m.Wire != w {
						t.Errorf("a message in %v, want %v", m.Wire, w)
					}
					words += int64(len(m.Payload))
					frames++
				}
				return false
			}})
			meter := NewMeter()
			metered := make([]Communicator, P)
			for r, c := range comms {
				metered[r] = meter.Wrap(c)
			}
			bufs := randBufs(rand.New(rand.NewPCG(1, 1)), P, n)
			noErrors(t, allReduceEverywhere(metered, bufs, Sum.In(w)))
			var values int64
			for r := range P {
				values += SentValues(KindAllReduce, AlgoRing, n, r, P, 0)
			}
			if got := meter.Take()[KindAllReduce]; got != 2*values {
				t.Errorf("meter: %d bytes, want %d (2 per value)", got, 2*values)
			}
			if b := 4 * words; b < 2*values || b > 2*values+2*frames {
				t.Errorf("the wire carried %d bytes in %d frames for %d values", b, frames, values)
			}
			for r := 1; r < P; r++ {
				for i := range bufs[r] {
					if math.Float32bits(bufs[r][i]) != math.Float32bits(bufs[0][i]) {
						t.Fatalf("rank %d element %d: %v, rank 0 %v", r, i, bufs[r][i], bufs[0][i])
					}
				}
			}
		})
	}
}

// TestLowWireRejected: a 16-bit wire type is for the ring's reductions;
// an unknown wire type or base is an argument error; ranks that disagree
// on the wire type fail with a mismatch, not with mixed values.
func TestLowWireRejected(t *testing.T) {
	for _, spec := range []Spec{
		{Kind: KindNaiveAllReduce, Reduce: Sum.In(kernels.BF16)},
		{Kind: KindBroadcast, Reduce: Sum.In(kernels.F16)},
		{Kind: KindAllGather, Reduce: Sum.In(kernels.BF16)},
		{Kind: KindAllReduce, Reduce: Sum | 3<<wireShift},
		{Kind: KindAllReduce, Reduce: 7},
	} {
		if err := CheckSpec(spec, 2); !errors.Is(err, ErrBadArgument) {
			t.Errorf("%v %v: %v, want ErrBadArgument", spec.Kind, spec.Reduce, err)
		}
	}
	s := newSimNet(t, 2, DefaultConfig(), 1)
	s.start(0, Spec{Kind: KindAllReduce, Buf: make([]float32, 8), Reduce: Sum.In(kernels.BF16)})
	s.start(1, Spec{Kind: KindAllReduce, Buf: make([]float32, 8), Reduce: Sum})
	s.run()
	for r := range 2 {
		if c := s.last(r); !errors.Is(c.Err, ErrMismatch) {
			t.Errorf("rank %d: %v, want ErrMismatch", r, c.Err)
		}
	}
	for _, in := range []string{"sum/bf16", "avg/fp16", "max/bfloat16", "sum"} {
		op, err := ParseReduceOp(in)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if again, _ := ParseReduceOp(op.String()); again != op {
			t.Errorf("%s: %v does not read back", in, op)
		}
	}
	for _, in := range []string{"sum/fp8", "prod/bf16", "/bf16"} {
		if _, err := ParseReduceOp(in); !errors.Is(err, ErrBadArgument) {
			t.Errorf("%s: %v, want ErrBadArgument", in, err)
		}
	}
}

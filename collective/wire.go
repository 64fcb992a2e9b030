package collective

import (
	"math"

	"github.com/troupe-ml/troupe/kernels"
)

// A reduction in a 16-bit wire type (ReduceOp.In) keeps the buffer in
// float32 but sends 16-bit values: every message payload packs two of them
// into each float32 word (value 2i in the low half of word i, 2i+1 in the
// high half, an odd last value paired with zero), so a frame of n values
// is ⌈n/2⌉ words. A rank adds what it receives to its own float32 values
// and rounds the sum once when it sends it on, as NCCL does for bf16: every
// hop of the ring rounds to the wire type, the arithmetic is fp32. The
// owner of a fully reduced chunk rounds it (after Avg's division) before
// the all-gather, so that every rank ends with the same bits.

// wireWords is the number of float32 words that carry n values of type w.
func wireWords(w kernels.DType, n int) int {
	if w == kernels.F32 {
		return n
	}
	return (n + 1) / 2
}

// toWire rounds x to type w and returns the 16 bits.
func toWire(w kernels.DType, x float32) uint32 {
	if w == kernels.BF16 {
		return uint32(kernels.BF16FromF32(x))
	}
	return uint32(kernels.F16FromF32(x))
}

// fromWire widens 16 bits of type w exactly.
func fromWire(w kernels.DType, h uint32) float32 {
	if w == kernels.BF16 {
		return math.Float32frombits(h << 16)
	}
	return kernels.F32FromF16(uint16(h))
}

// pack rounds src to type w, two values a word, into dst
// (len(dst) = wireWords(w, len(src))).
func pack(w kernels.DType, dst, src []float32) {
	n := len(src)
	dst = dst[:(n+1)/2]
	for i := range dst {
		lo := toWire(w, src[2*i])
		hi := uint32(0)
		if 2*i+1 < n {
			hi = toWire(w, src[2*i+1])
		}
		dst[i] = math.Float32frombits(lo | hi<<16)
	}
}

// unpack widens the packed words src into the len(dst) values of dst.
func unpack(w kernels.DType, dst, src []float32) {
	for i := range dst {
		u := math.Float32bits(src[i/2])
		dst[i] = fromWire(w, u>>(16*(i&1))&0xffff)
	}
}

// combinePacked folds the packed values src into dst with op's base: a
// float32 sum for Sum and Avg, the larger value for Max.
func combinePacked(op ReduceOp, dst, src []float32) {
	w, max_ := op.Wire(), op.Base() == Max
	for i := range dst {
		v := fromWire(w, math.Float32bits(src[i/2])>>(16*(i&1))&0xffff)
		if max_ {
			dst[i] = max(dst[i], v)
		} else {
			dst[i] += v
		}
	}
}

// roundTo rounds every value of x to type w in place.
func roundTo(w kernels.DType, x []float32) {
	for i, v := range x {
		x[i] = fromWire(w, toWire(w, v))
	}
}

package collective

import (
	"encoding/binary"
	"math"
	"math/bits"
	"sync"
	"unsafe"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/convert"
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

// littleEndian: a []uint16 view of packed words then has value 2i in the
// low half of word i, which lets the vector conversions pack and unpack.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// halves views the words of p as their 16-bit halves, in order.
func halves(p []float32) []uint16 {
	if len(p) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&p[0])), 2*len(p))
}

// pack rounds src to type w, two values a word, into dst
// (len(dst) = wireWords(w, len(src))).
func pack(w kernels.DType, dst, src []float32) {
	n := len(src)
	dst = dst[:(n+1)/2]
	if !littleEndian {
		for i := range dst {
			lo, hi := toWire(w, src[2*i]), uint32(0)
			if 2*i+1 < n {
				hi = toWire(w, src[2*i+1])
			}
			dst[i] = math.Float32frombits(lo | hi<<16)
		}
		return
	}
	h := halves(dst)
	convert.ToLow(w, h[:n], src)
	if n%2 == 1 {
		h[n] = 0
	}
}

// unpack widens the packed words src into the len(dst) values of dst.
func unpack(w kernels.DType, dst, src []float32) {
	if !littleEndian {
		for i := range dst {
			dst[i] = fromWire(w, math.Float32bits(src[i/2])>>(16*(i&1))&0xffff)
		}
		return
	}
	convert.FromLow(w, dst, halves(src)[:len(dst)])
}

// block is how many values combinePacked and roundTo convert at a time,
// on the stack.
const block = 512

// combinePacked folds the packed values src into dst with op's base: a
// float32 sum for Sum and Avg, the larger value for Max.
func combinePacked(op ReduceOp, dst, src []float32) {
	var tmp [block]float32
	for lo := 0; lo < len(dst); lo += block {
		hi := min(lo+block, len(dst))
		v := tmp[:hi-lo]
		unpack(op.Wire(), v, src[lo/2:(hi+1)/2])
		if op.Base() == Max {
			for i, x := range v {
				dst[lo+i] = max(dst[lo+i], x)
			}
		} else {
			addTo(dst[lo:hi], v)
		}
	}
}

// roundTo rounds every value of x to type w in place.
func roundTo(w kernels.DType, x []float32) {
	var tmp [block / 2]float32
	for lo := 0; lo < len(x); lo += block {
		hi := min(lo+block, len(x))
		pack(w, tmp[:], x[lo:hi])
		unpack(w, x[lo:hi], tmp[:])
	}
}

// wirePool keeps packed payload areas between operations, by size class
// (powers of two words from 2¹⁰): a bucket's all-reduce would otherwise
// allocate and zero its packed copy every step.
var wirePool [40]sync.Pool

// getWire returns an area of at least n words (not zeroed).
func getWire(n int) []float32 {
	k := max(10, bits.Len(uint(max(n, 1)-1)))
	if k >= len(wirePool) {
		return make([]float32, n)
	}
	if p, ok := wirePool[k].Get().(*[]float32); ok {
		return (*p)[:n]
	}
	return make([]float32, n, 1<<k)
}

// putWire returns an area from getWire.
func putWire(p []float32) {
	k := bits.Len(uint(cap(p) - 1))
	if cap(p) == 1<<k && k < len(wirePool) {
		p = p[:cap(p)]
		wirePool[k].Put(&p)
	}
}

package cpu

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/convert"
)

// Half is the CPU backend's bf16 or fp16 buffer: the 16-bit patterns of
// its values (T says which type).
type Half struct {
	V []uint16
	T kernels.DType
}

// Len implements kernels.Buffer.
func (h Half) Len() int { return len(h.V) }

// DType implements kernels.DTyped.
func (h Half) DType() kernels.DType { return h.T }

var _ kernels.LowPrecision = (*Backend)(nil)

// AllocAs implements kernels.LowPrecision.
func (be *Backend) AllocAs(n int, dt kernels.DType) kernels.Buffer {
	switch dt {
	case kernels.F32:
		return make(Buf, n)
	case kernels.BF16, kernels.F16:
		return Half{V: make([]uint16, n), T: dt}
	}
	panic(fmt.Sprintf("kernels/cpu: AllocAs: %v", dt))
}

// Convert implements kernels.LowPrecision.
func (be *Backend) Convert(dst, src kernels.Buffer) {
	mustLen("Convert", dst.Len(), src.Len())
	if dst.Len() == 0 {
		return
	}
	hd, dLow := dst.(Half)
	hs, sLow := src.(Half)
	switch {
	case !dLow && !sLow:
		copy(F(dst), F(src))
	case dLow && !sLow:
		d, s := hd.V, F(src)
		if be.serial(len(d), grainSimple) {
			convert.ToLow(hd.T, d, s)
			return
		}
		parallelFor(len(d), be.threads, grainSimple, func(lo, hi int) { convert.ToLow(hd.T, d[lo:hi], s[lo:hi]) })
	case !dLow && sLow:
		d, s := F(dst), hs.V
		if be.serial(len(d), grainSimple) {
			convert.FromLow(hs.T, d, s)
			return
		}
		parallelFor(len(d), be.threads, grainSimple, func(lo, hi int) { convert.FromLow(hs.T, d[lo:hi], s[lo:hi]) })
	case hd.T == hs.T:
		copy(hd.V, hs.V)
	default:
		// bf16 ↔ fp16 through fp32 (exact widening, one rounding).
		for i, v := range hs.V {
			hd.V[i] = lowOf(hd.T, widen(hs.T, v))
		}
	}
}

// lowOf rounds v to dt.
func lowOf(dt kernels.DType, v float32) uint16 {
	if dt == kernels.BF16 {
		return kernels.BF16FromF32(v)
	}
	return kernels.F16FromF32(v)
}

// widen is h of type dt as a float32.
func widen(dt kernels.DType, h uint16) float32 {
	if dt == kernels.BF16 {
		return kernels.F32FromBF16(h)
	}
	return kernels.F32FromF16(h)
}

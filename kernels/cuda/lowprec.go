//go:build cuda

package cuda

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
)

// The backend's bf16 and fp16 (kernels.LowPrecision): buffers of 16-bit
// values, converted on the host by Upload and Download and on the device
// by Convert, and GEMMs on them with mma.sync (k_gemm_low) where the GPU
// has tensor cores (sm_80 and newer), else by widening the operands to
// float32 first. Every other kernel takes float32 buffers (buf panics).

var _ kernels.LowPrecision = (*Backend)(nil)

// AllocAs implements kernels.LowPrecision: n zeroed values of type dt.
func (be *Backend) AllocAs(n int, dt kernels.DType) kernels.Buffer {
	switch {
	case dt == kernels.F32:
		return be.Alloc(n)
	case !dt.Low():
		panic(fmt.Sprintf("kernels/cuda: AllocAs: type %v", dt))
	case n < 0:
		panic(fmt.Sprintf("kernels/cuda: AllocAs: negative length %d", n))
	}
	p, blk := be.allocBytes("AllocAs", (n+1)/2)
	return &Buf{be: be, ptr: p, n: n, dt: dt, blk: blk}
}

// Convert implements kernels.LowPrecision: one kernel through fp32 (the
// widening is exact, the narrowing rounds to nearest even).
func (be *Backend) Convert(dst, src kernels.Buffer) {
	d, s := be.anyBuf("Convert", dst), be.anyBuf("Convert", src)
	mustLen("Convert", "src", s.n, d.n)
	if d.dt == s.dt {
		be.Copy(dst, src)
		return
	}
	be.launch1(kConvert, d.n, argInt(d.n), d.arg(), uint64(d.dt), s.arg(), uint64(s.dt))
}

// gemmLow runs Gemm for 16-bit A and B (g normalised and checked).
func (be *Backend) gemmLow(g kernels.GemmArgs, A, B, C *Buf) {
	if A.dt != B.dt || (C.dt != kernels.F32 && C.dt != A.dt) {
		panic(fmt.Sprintf("kernels/cuda: Gemm: A %v, B %v, C %v: A and B of one 16-bit type, C fp32 or theirs", A.dt, B.dt, C.dt))
	}
	k := g.K
	if g.Alpha == 0 {
		k = 0
	}
	if !be.info.tensorCores() {
		be.gemmWidened(g, A, B, C)
		return
	}
	be.launch(kGemmLow, be.gemmGrid(g, tcTile), [3]int{blockThreads, 1, 1},
		argBool(g.TransA), argBool(g.TransB), argInt(g.M), argInt(g.N), argInt(k), argF32(g.Alpha), argF32(g.Beta),
		A.arg(), argInt(g.LDA), argInt(g.StrideA), B.arg(), argInt(g.LDB), argInt(g.StrideB),
		C.arg(), argInt(g.LDC), argInt(g.StrideC), argInt(g.Batch), uint64(A.dt), uint64(C.dt))
}

// gemmWidened is gemmLow on a GPU without bf16/fp16 mma: the operands
// widened to float32 (exactly), the float32 GEMM, a 16-bit C rounded once.
func (be *Backend) gemmWidened(g kernels.GemmArgs, A, B, C *Buf) {
	widen := func(x *Buf) *Buf {
		w := be.Alloc(x.n).(*Buf)
		be.Convert(w, x)
		return w
	}
	a, b, c := widen(A), widen(B), C
	if C.dt != kernels.F32 {
		c = widen(C)
	}
	be.Gemm(g, a, b, c)
	if c != C {
		be.Convert(C, c)
		be.Free(c)
	}
	be.Free(a)
	be.Free(b)
}

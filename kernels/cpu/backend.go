package cpu

import (
	"fmt"
	"runtime"

	"github.com/troupe-ml/troupe/internal/shmem"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/convert"
)

// Buf is the CPU backend's Buffer: a plain float32 slice.
type Buf []float32

// Len implements kernels.Buffer.
func (b Buf) Len() int { return len(b) }

// Ids is the CPU backend's Index: a plain int32 slice.
type Ids []int32

// Len implements kernels.Index.
func (x Ids) Len() int { return len(x) }

// Backend is the CPU kernels backend. The zero value is not usable; use New.
type Backend struct {
	threads int
	// bf16 is the native bf16 GEMM kernel (nil: bf16 widens to fp32).
	bf16 *gemmKernel
}

var _ kernels.Backend = (*Backend)(nil)

// New returns a CPU backend that uses up to threads OS threads per kernel
// (0: GOMAXPROCS).
func New(threads int) *Backend {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	return &Backend{threads: threads, bf16: bf16Native}
}

func init() {
	kernels.Register("cpu", func(o kernels.Options) (kernels.Backend, error) {
		if o.Device != 0 {
			return nil, fmt.Errorf("%w: cpu has only device 0, got %d", kernels.ErrNoDevice, o.Device)
		}
		return New(o.Threads), nil
	}, func() ([]kernels.DeviceInfo, error) {
		return []kernels.DeviceInfo{{Backend: "cpu", Index: 0, Name: cpuName(), Detail: fmt.Sprintf("%d logical cores, %s", runtime.NumCPU(), simdName())}}, nil
	})
}

// Caps implements kernels.Backend.
func (be *Backend) Caps() kernels.Capabilities {
	return kernels.Capabilities{Device: "cpu", SIMD: simdName(), Threads: be.threads, LowGemm: be.lowPath(kernels.BF16)}
}

// F returns the float32 slice behind a CPU buffer. It panics for buffers of
// other backends, and for bf16 and fp16 buffers (which only the kernels
// LowPrecision names take).
func F(b kernels.Buffer) []float32 {
	if f, ok := b.(Buf); ok {
		return f
	}
	panic(notF32(b))
}

// notF32 says why b is not an fp32 CPU buffer. b itself stays out of the
// message, and no method of it is called: either would make every
// caller's buffer escape to the heap.
//
//go:noinline
func notF32(b kernels.Buffer) string {
	if h, ok := b.(Half); ok {
		dt := h.T
		return fmt.Sprintf("kernels/cpu: a %v buffer where an fp32 one is needed (besides the buffer operations, Convert and Gemm, only the kernels that read a kept activation take %v: ReLU, GELU, their backward kernels, LayerNormBackward's x, SoftmaxBackward's y)", dt, dt)
	}
	return "kernels/cpu: not a CPU fp32 buffer (one of another backend?)"
}

// I returns the int32 slice behind a CPU index buffer.
func I(x kernels.Index) []int32 { return x.(Ids) }

// Alloc implements kernels.Backend.
func (be *Backend) Alloc(n int) kernels.Buffer { return make(Buf, n) }

// AllocIndex implements kernels.Backend.
func (be *Backend) AllocIndex(n int) kernels.Index { return make(Ids, n) }

// Free implements kernels.Backend; the GC reclaims CPU buffers.
// Free releases registered memory (AllocRegistered); Go memory is the
// collector's.
func (be *Backend) Free(b kernels.Buffer) {
	if f, ok := b.(Buf); ok && cap(f) > 0 {
		// the whole allocation, not a view of part of it
		if seg, off, reg := shmem.Find(f[:cap(f)]); reg && off == 0 && 4*max(len(f), 1) == seg.Bytes {
			shmem.Free(f)
		}
	}
}

// AllocRegistered is kernels.RegisteredAllocator: n zeros in registered
// memory.
func (be *Backend) AllocRegistered(n int) (kernels.Buffer, error) {
	b, err := shmem.Alloc(n)
	if err != nil {
		return nil, err
	}
	return Buf(b), nil
}

// FreeIndex implements kernels.Backend.
func (be *Backend) FreeIndex(kernels.Index) {}

// View implements kernels.Backend.
func (be *Backend) View(b kernels.Buffer, off, n int) kernels.Buffer {
	if h, ok := b.(Half); ok {
		return Half{V: h.V[off : off+n : off+n], T: h.T}
	}
	return Buf(F(b)[off : off+n : off+n])
}

// Upload implements kernels.Backend (a bf16 or fp16 dst gets the values
// rounded to nearest even).
func (be *Backend) Upload(dst kernels.Buffer, src []float32) {
	if h, ok := dst.(Half); ok {
		mustLen("Upload", len(h.V), len(src))
		if len(src) > 0 {
			convert.ToLow(h.T, h.V, src)
		}
		return
	}
	d := F(dst)
	mustLen("Upload", len(d), len(src))
	copy(d, src)
}

// Download implements kernels.Backend (a bf16 or fp16 src is widened).
func (be *Backend) Download(dst []float32, src kernels.Buffer) {
	if h, ok := src.(Half); ok {
		mustLen("Download", len(dst), len(h.V))
		if len(dst) > 0 {
			convert.FromLow(h.T, dst, h.V)
		}
		return
	}
	s := F(src)
	mustLen("Download", len(dst), len(s))
	copy(dst, s)
}

// UploadIndex implements kernels.Backend.
func (be *Backend) UploadIndex(dst kernels.Index, src []int32) {
	d := I(dst)
	mustLen("UploadIndex", len(d), len(src))
	copy(d, src)
}

// Copy implements kernels.Backend (buffers of one type; Convert converts).
func (be *Backend) Copy(dst, src kernels.Buffer) {
	if hd, ok := dst.(Half); ok {
		hs, ok := src.(Half)
		if !ok || hs.T != hd.T {
			panic(fmt.Sprintf("kernels/cpu: Copy from %v to %v: use Convert", kernels.DTypeOf(src), hd.T))
		}
		mustLen("Copy", len(hd.V), len(hs.V))
		copy(hd.V, hs.V)
		return
	}
	d, s := F(dst), F(src)
	mustLen("Copy", len(d), len(s))
	copy(d, s)
}

// Fill implements kernels.Backend (a bf16 or fp16 x gets v rounded).
func (be *Backend) Fill(x kernels.Buffer, v float32) {
	if h, ok := x.(Half); ok {
		if len(h.V) == 0 {
			return
		}
		h.V[0] = lowOf(h.T, v)
		for n := 1; n < len(h.V); n *= 2 {
			copy(h.V[n:], h.V[:n])
		}
		return
	}
	d := F(x)
	if len(d) == 0 {
		return
	}
	// Doubling copies: memmove's vector loops instead of a scalar store
	// per element.
	d[0] = v
	for n := 1; n < len(d); n *= 2 {
		copy(d[n:], d[:n])
	}
}

// Sync implements kernels.Backend; CPU kernels finish before they return.
func (be *Backend) Sync() error { return nil }

func mustLen(op string, got, want int) {
	if got != want {
		panic(fmt.Sprintf("kernels/cpu: %s: length %d, want %d", op, got, want))
	}
}

var _ kernels.HostMemory = (*Backend)(nil)

// HostSlice implements kernels.HostMemory.
func (be *Backend) HostSlice(b kernels.Buffer) []float32 { return F(b) }

//go:build cuda

package cuda

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
)

// Buf is the backend's Buffer: n values of type dt (float32, or bf16 and
// fp16 from AllocAs) at a device address. A View is a Buf into its
// parent's block.
type Buf struct {
	be   *Backend
	ptr  devPtr
	n    int
	dt   kernels.DType
	blk  *block // the allocation; nil for empty buffers
	view bool
}

// Len implements kernels.Buffer.
func (b *Buf) Len() int { return b.n }

// DType implements kernels.DTyped.
func (b *Buf) DType() kernels.DType { return b.dt }

// Ids is the backend's Index: n int32 values on the device.
type Ids struct {
	be  *Backend
	ptr devPtr
	n   int
	blk *block
}

// Len implements kernels.Index.
func (x *Ids) Len() int { return x.n }

var (
	_ kernels.Buffer = (*Buf)(nil)
	_ kernels.Index  = (*Ids)(nil)
)

// buf returns b as this backend's live float32 buffer; a closed backend, a
// buffer of another backend, one whose memory was freed, or a 16-bit one
// (the kernels other than those of kernels.LowPrecision take float32 only),
// panics.
func (be *Backend) buf(op string, b kernels.Buffer) *Buf {
	d := be.anyBuf(op, b)
	if d.dt != kernels.F32 {
		panic(fmt.Sprintf("kernels/cuda: %s: a %v buffer; %s takes fp32", op, d.dt, op))
	}
	return d
}

// saved is buf for an activation saved for a backward kernel: fp32, or
// bf16 and fp16 under mixed precision (the kernel widens it as it reads).
func (be *Backend) saved(op string, b kernels.Buffer) *Buf { return be.anyBuf(op, b) }

// anyBuf is buf for the operations that take every type (kernels.LowPrecision).
func (be *Backend) anyBuf(op string, b kernels.Buffer) *Buf {
	be.check()
	d, ok := b.(*Buf)
	if !ok || d.be != be {
		panic(fmt.Sprintf("kernels/cuda: %s: buffer %T is not from this backend", op, b))
	}
	if d.blk != nil && d.blk.freed {
		panic(fmt.Sprintf("kernels/cuda: %s: buffer used after Free", op))
	}
	return d
}

// ids is buf for index buffers.
func (be *Backend) ids(op string, x kernels.Index) *Ids {
	be.check()
	d, ok := x.(*Ids)
	if !ok || d.be != be {
		panic(fmt.Sprintf("kernels/cuda: %s: index buffer %T is not from this backend", op, x))
	}
	if d.blk != nil && d.blk.freed {
		panic(fmt.Sprintf("kernels/cuda: %s: index buffer used after FreeIndex", op))
	}
	return d
}

// optBuf is buf for an optional operand: nil stays nil (address 0).
func (be *Backend) optBuf(op string, b kernels.Buffer) *Buf {
	if b == nil {
		return nil
	}
	return be.buf(op, b)
}

// mustLen panics unless got == want, naming the operand.
func mustLen(op, what string, got, want int) {
	if got != want {
		panic(fmt.Sprintf("kernels/cuda: %s: %s has length %d, want %d", op, what, got, want))
	}
}

// rowsOf returns n / cols and panics unless cols divides n.
func rowsOf(op, what string, n, cols int) int {
	if cols <= 0 {
		if n == 0 {
			return 0
		}
		panic(fmt.Sprintf("kernels/cuda: %s: %s has %d values but rows of %d columns", op, what, n, cols))
	}
	if n%cols != 0 {
		panic(fmt.Sprintf("kernels/cuda: %s: %s has %d values, not a multiple of %d columns", op, what, n, cols))
	}
	return n / cols
}

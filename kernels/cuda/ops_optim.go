//go:build cuda

package cuda

import (
	"fmt"
	"math"

	"github.com/troupe-ml/troupe/kernels"
)

// SGDStep implements kernels.Backend, as torch.optim.SGD's single-tensor
// loop: with momentum 0 the buffer is not touched (and may be nil).
func (be *Backend) SGDStep(p, g, buf kernels.Buffer, h kernels.SGDHyper, first bool) {
	const op = "SGDStep"
	ps, gs := be.buf(op, p), be.buf(op, g)
	mustLen(op, "g", gs.n, ps.n)
	var bs *Buf
	if h.Momentum != 0 {
		if buf == nil {
			panic(fmt.Sprintf("kernels/cuda: SGDStep: momentum %g needs a momentum buffer, got nil", h.Momentum))
		}
		bs = be.buf(op, buf)
		mustLen(op, "buf", bs.n, ps.n)
	}
	be.launch1(kSGD, ps.n, argInt(ps.n), ps.arg(), gs.arg(), bs.arg(), argF32(h.LR), argF32(h.WeightDecay),
		argF32(h.Momentum), argF32(1-h.Dampening), argBool(h.Nesterov), argBool(first))
}

// AdamWStep implements kernels.Backend, as torch.optim.AdamW's
// single-tensor loop, with the bias corrections formed in float64 on the
// host as the CPU backend (and PyTorch) do.
func (be *Backend) AdamWStep(p, g, m, v kernels.Buffer, h kernels.AdamWHyper, t int) {
	const op = "AdamWStep"
	ps, gs, ms, vs := be.buf(op, p), be.buf(op, g), be.buf(op, m), be.buf(op, v)
	mustLen(op, "g", gs.n, ps.n)
	mustLen(op, "m", ms.n, ps.n)
	mustLen(op, "v", vs.n, ps.n)
	if t < 1 {
		panic(fmt.Sprintf("kernels/cuda: AdamWStep: step %d, steps count from 1", t))
	}
	decay := float32(1 - float64(h.LR)*float64(h.WeightDecay))
	step := float32(float64(h.LR) / (1 - math.Pow(float64(h.Beta1), float64(t))))
	bc2 := float32(math.Sqrt(1 - math.Pow(float64(h.Beta2), float64(t))))
	be.launch1(kAdamW, ps.n, argInt(ps.n), ps.arg(), gs.arg(), ms.arg(), vs.arg(), argF32(decay),
		argF32(h.Beta1), argF32(1-h.Beta1), argF32(h.Beta2), argF32(1-h.Beta2), argF32(step), argF32(bc2), argF32(h.Eps))
}

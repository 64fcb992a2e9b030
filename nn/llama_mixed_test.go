package nn_test

import (
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
)

// TestLlamaBlockMixedPrecision runs a LlamaBlock in bf16 mixed precision
// and in fp32 on the same weights, input and upstream gradient: the output,
// the input gradient and every weight gradient agree within 8u of the
// relative norm (u = 2⁻⁸), the bound TestMixedPrecisionMatchesFP32 argues
// for a GPT (each GEMM operand rounded once to bf16, some ten roundings on
// a value's way through a block, adding like a random walk). The RMSNorms,
// the rotary embedding and the SwiGLU compute in fp32 from saved
// activations widened back from bf16.
func TestLlamaBlockMixedPrecision(t *testing.T) {
	const u = 1.0 / 256
	be := cpu.New(1)
	cfg := tinyLlama(2)
	s := nn.NewParamSet(be, 41)
	b, err := nn.NewLlamaBlock(s, "layers.0", cfg, nn.NoTP)
	if err != nil {
		t.Fatal(err)
	}
	s.Finalize()
	r := rand.New(rand.NewPCG(5, 6))
	rows := 2 * cfg.Context
	x, dy := randF32(r, rows*cfg.DModel, 1), randF32(r, rows*cfg.DModel, 1)
	run := func(dt kernels.DType) (y, dx []float32, grads map[string][]float32) {
		pool := nn.NewPool(be)
		c := nn.NewCtx(be, pool)
		if err := c.SetPrecision(dt); err != nil {
			t.Fatal(err)
		}
		if dt != kernels.F32 {
			if err := nn.RefreshLow(be, dt, s.Params()); err != nil {
				t.Fatal(err)
			}
		}
		s.ZeroGrads()
		xb, db := pool.Get(len(x)), pool.Get(len(dy))
		be.Upload(xb, x)
		be.Upload(db, dy)
		ya := nn.Forward(c, []nn.Layer{b}, nn.Act{X: xb, Rows: rows, Cols: cfg.DModel})
		y = download(be, ya.X)
		pool.Put(ya.X)
		da := nn.Backward(c, []nn.Layer{b}, nn.Act{X: db, Rows: rows, Cols: cfg.DModel})
		dx = download(be, da.X)
		pool.Put(da.X)
		grads = map[string][]float32{}
		for _, p := range s.Params() {
			grads[p.Name] = download(be, p.G)
		}
		if pool.LiveBytes() != 0 {
			t.Errorf("%v: %d bytes still out of the pool", dt, pool.LiveBytes())
		}
		return y, dx, grads
	}
	y32, dx32, g32 := run(kernels.F32)
	yl, dxl, gl := run(kernels.BF16)
	for what, pair := range map[string][2][]float32{"y": {yl, y32}, "dx": {dxl, dx32}} {
		if e := relErr(pair[0], pair[1]); e > 8*u {
			t.Errorf("%s: relative error %.3g > %.3g", what, e, 8*u)
		}
	}
	for name, g := range g32 {
		if e := relErr(gl[name], g); e > 8*u {
			t.Errorf("d%s: relative error %.3g > %.3g", name, e, 8*u)
		}
	}
}

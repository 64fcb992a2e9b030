package cpu

import (
	"math"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
)

// TestGELUHandWorked checks values of x·Φ(x) from tables of the normal
// CDF (Φ(1) = 0.8413447461, Φ(−1) = 0.1586552539, Φ(−3) = 0.0013498980) and
// the derivative Φ(x) + x·φ(x) (φ(1) = 0.2419707245). Tolerance 4e-7
// relative: a few float32 ulp.
func TestGELUHandWorked(t *testing.T) {
	be := New(1)
	x := Buf{0, 1, -1, -3, 10}
	want := []float64{0, 0.8413447461, -0.1586552539, -3 * 0.0013498980, 10}
	y := make(Buf, len(x))
	be.GELU(y, x)
	for i := range want {
		if math.Abs(float64(y[i])-want[i]) > 4e-7*math.Abs(want[i]) {
			t.Errorf("GELU(%g) = %.9g, want %.9g", x[i], y[i], want[i])
		}
	}
	dx := make(Buf, 3)
	be.GELUBackward(dx, Buf{1, 1, 2}, Buf{0, 1, -1})
	wantD := []float64{0.5, 0.8413447461 + 0.2419707245, 2 * (0.1586552539 - 0.2419707245)}
	for i := range wantD {
		if math.Abs(float64(dx[i])-wantD[i]) > 4e-7*math.Abs(wantD[i]) {
			t.Errorf("GELUBackward[%d] = %.9g, want %.9g", i, dx[i], wantD[i])
		}
	}
}

// TestReLUNaN: PyTorch's relu keeps NaN (it is a clamp), so a diverging
// model shows NaN in its activations instead of silent zeros.
func TestReLUNaN(t *testing.T) {
	y := make(Buf, 3)
	New(1).ReLU(y, Buf{float32(math.NaN()), -1, 2})
	if !math.IsNaN(float64(y[0])) || y[1] != 0 || y[2] != 2 {
		t.Errorf("ReLU(NaN, -1, 2) = %v, want [NaN 0 2]", y)
	}
}

func TestElementwiseNoAllocs(t *testing.T) {
	be := New(4)
	x, y, z := make(Buf, 1000), make(Buf, 1000), make(Buf, 1000)
	bias := make(Buf, 10)
	mustNotAlloc(t, "Axpy", func() { be.Axpy(2, x, y) })
	mustNotAlloc(t, "Scale", func() { be.Scale(x, 2) })
	mustNotAlloc(t, "Add", func() { be.Add(z, x, y) })
	mustNotAlloc(t, "AddBias", func() { be.AddBias(y, bias) })
	mustNotAlloc(t, "ReLU", func() { be.ReLU(y, x) })
	mustNotAlloc(t, "ReLUBackward", func() { be.ReLUBackward(z, y, x) })
	mustNotAlloc(t, "GELU", func() { be.GELU(y, x) })
	mustNotAlloc(t, "GELUBackward", func() { be.GELUBackward(z, y, x) })
	// Under mixed precision the kept activation is bf16, widened as read.
	low := be.AllocAs(1000, kernels.BF16)
	mustNotAlloc(t, "GELU of bf16 into bf16", func() { be.GELU(low, low) })
	mustNotAlloc(t, "GELUBackward of bf16", func() { be.GELUBackward(z, y, low) })
	mean, rstd, gamma := make(Buf, 10), make(Buf, 10), make(Buf, 100)
	lx := be.AllocAs(1000, kernels.BF16)
	mustNotAlloc(t, "LayerNormBackward of bf16", func() { be.LayerNormBackward(z, gamma, gamma, y, lx, mean, rstd, gamma) })
	mustNotAlloc(t, "SoftmaxBackward of bf16", func() { be.SoftmaxBackward(z, y, low, 100, 1) })
}

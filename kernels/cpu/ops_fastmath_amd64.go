//go:build amd64 && !noasm

package cpu

import (
	"golang.org/x/sys/cpu"

	"github.com/troupe-ml/troupe/kernels/hostops"
)

// vecMath says whether the AVX2+FMA kernels in ops_fastmath_amd64.s run;
// without them (or with the noasm tag) the Go loops in ops_fastmath.go do.
var vecMath = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// vecMath512 says whether the GELU and SwiGLU kernels take their AVX-512
// versions (ops_fastmath_avx512_amd64.s: F for the arithmetic, DQ for
// VANDPS and VPMOVD2M on zmm), 16 lanes for the AVX2 kernels' 8 with the
// same bits. GELU and its backward took 14 % of a bf16 GPT step at one
// thread on a Zen 5; there the AVX-512 loops run twice as many elements
// per second (BenchmarkVecMath).
var vecMath512 = vecMath && cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ

// Implemented in ops_fastmath_amd64.s. They read and write exactly n
// elements (the last partial vector through a lane mask); the wrappers
// below check the bounds.

//go:noescape
func expSumAVX2(dst, src *float32, n int, scale, shift float32) float64

//go:noescape
func geluAVX2(y, x *float32, n int)

//go:noescape
func geluBackwardAVX2(dx, dy, x *float32, n int)

//go:noescape
func geluAVX512(y, x *float32, n int)

//go:noescape
func geluBackwardAVX512(dx, dy, x *float32, n int)

//go:noescape
func swigluAVX512(y, gate, up *float32, n int)

//go:noescape
func swigluBackwardAVX512(dgate, dup, dy, gate, up *float32, n int)

//go:noescape
func swigluAVX2(y, gate, up *float32, n int)

//go:noescape
func swigluBackwardAVX2(dgate, dup, dy, gate, up *float32, n int)

//go:noescape
func reluAVX2(y, x *float32, n int)

//go:noescape
func reluBackwardAVX2(dx, dy, x *float32, n int)

//go:noescape
func addAVX2(d, a, b *float32, n int)

//go:noescape
func sumColsAVX2(acc *float64, x *float32, rows, stride, n int)

//go:noescape
func sgdMomentumAVX2(p, grad, buf *float32, n int, lr, wd, mom, damp float32)

// expSum sets dst[i] = e^(scale·src[i] − shift) for i < len(dst) and returns
// Σ dst[i] in float64. dst may be src.
func expSum(dst, src []float32, scale, shift float32) float64 {
	if !vecMath || len(dst) == 0 {
		return expSumGo(dst, src, scale, shift)
	}
	_ = src[len(dst)-1]
	return expSumAVX2(&dst[0], &src[0], len(dst), scale, shift)
}

// gelu sets y = x·Φ(x) over len(y) elements.
func gelu(y, x []float32) {
	if !vecMath || len(y) == 0 {
		geluGo(y, x)
		return
	}
	_ = x[len(y)-1]
	if vecMath512 {
		geluAVX512(&y[0], &x[0], len(y))
		return
	}
	geluAVX2(&y[0], &x[0], len(y))
}

// geluBackward sets dx = dy·(Φ(x) + x·φ(x)) over len(dx) elements.
func geluBackward(dx, dy, x []float32) {
	if !vecMath || len(dx) == 0 {
		geluBackwardGo(dx, dy, x)
		return
	}
	_, _ = dy[len(dx)-1], x[len(dx)-1]
	if vecMath512 {
		geluBackwardAVX512(&dx[0], &dy[0], &x[0], len(dx))
		return
	}
	geluBackwardAVX2(&dx[0], &dy[0], &x[0], len(dx))
}

// swiglu sets y = silu(gate)·up over len(y) elements, in float32 with
// σ from exp32's formula; elsewhere hostops' float64 loop.
func swiglu(y, gate, up []float32) {
	if !vecMath || len(y) == 0 {
		hostops.SwiGLU(y, gate, up, 0, len(y))
		return
	}
	_, _ = gate[len(y)-1], up[len(y)-1]
	if vecMath512 {
		swigluAVX512(&y[0], &gate[0], &up[0], len(y))
		return
	}
	swigluAVX2(&y[0], &gate[0], &up[0], len(y))
}

// swigluBackward sets dgate = dy·up·silu'(gate) and dup = dy·silu(gate)
// over len(dy) elements (dgate and dup may be gate and up).
func swigluBackward(dgate, dup, dy, gate, up []float32) {
	n := len(dy)
	if !vecMath || n == 0 {
		hostops.SwiGLUBackward(dgate, dup, dy, gate, up, 0, n)
		return
	}
	_, _, _, _ = dgate[n-1], dup[n-1], gate[n-1], up[n-1]
	if vecMath512 {
		swigluBackwardAVX512(&dgate[0], &dup[0], &dy[0], &gate[0], &up[0], n)
		return
	}
	swigluBackwardAVX2(&dgate[0], &dup[0], &dy[0], &gate[0], &up[0], n)
}

// relu sets y = max(x, 0) over len(y) elements, NaN kept.
func relu(y, x []float32) {
	if !vecMath || len(y) == 0 {
		reluGo(y, x)
		return
	}
	_ = x[len(y)-1]
	reluAVX2(&y[0], &x[0], len(y))
}

// reluBackward sets dx = dy where x > 0, else 0.
func reluBackward(dx, dy, x []float32) {
	if !vecMath || len(dx) == 0 {
		reluBackwardGo(dx, dy, x)
		return
	}
	_, _ = dy[len(dx)-1], x[len(dx)-1]
	reluBackwardAVX2(&dx[0], &dy[0], &x[0], len(dx))
}

// sgdMomentum is sgdStep's loop with momentum, after the first step and
// without Nesterov (the common case): the same bits as the Go loop.
func sgdMomentum(p, g, buf []float32, lr, wd, mom, damp float32) {
	if !vecMath || len(p) == 0 {
		sgdMomentumGo(p, g, buf, lr, wd, mom, damp)
		return
	}
	_, _ = g[len(p)-1], buf[len(p)-1]
	sgdMomentumAVX2(&p[0], &g[0], &buf[0], len(p), lr, wd, mom, damp)
}

// add sets d = a + b over len(d) elements (d may be a or b).
func add(d, a, b []float32) {
	n := len(d) &^ 7
	if vecMath && n > 0 {
		_, _ = a[len(d)-1], b[len(d)-1]
		addAVX2(&d[0], &a[0], &b[0], n)
	} else {
		n = 0
	}
	addGo(d[n:], a[n:], b[n:])
}

// sumCols adds column j of the rows·stride values of x (rows of stride
// values, the first len(acc) of each) into acc[j] in float64, rows in order.
func sumCols(acc []float64, x []float32, rows, stride int) {
	n := len(acc) &^ 3
	if vecMath && n > 0 && rows > 0 {
		_ = x[(rows-1)*stride+n-1]
		sumColsAVX2(&acc[0], &x[0], rows, stride, n)
	} else {
		n = 0
	}
	if n < len(acc) {
		sumColsGo(acc[n:], x[n:], rows, stride)
	}
}

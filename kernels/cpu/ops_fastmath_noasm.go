//go:build !amd64 || noasm

package cpu

import "github.com/troupe-ml/troupe/kernels/hostops"

// Without the AVX2 kernels the Go loops run everywhere.

const vecMath = false

func expSum(dst, src []float32, scale, shift float32) float64 {
	return expSumGo(dst, src, scale, shift)
}

func gelu(y, x []float32) { geluGo(y, x) }

func geluBackward(dx, dy, x []float32) { geluBackwardGo(dx, dy, x) }

func swiglu(y, gate, up []float32) { hostops.SwiGLU(y, gate, up, 0, len(y)) }

func swigluBackward(dgate, dup, dy, gate, up []float32) {
	hostops.SwiGLUBackward(dgate, dup, dy, gate, up, 0, len(dy))
}

func relu(y, x []float32) { reluGo(y, x) }

func reluBackward(dx, dy, x []float32) { reluBackwardGo(dx, dy, x) }

func sgdMomentum(p, g, buf []float32, lr, wd, mom, damp float32) {
	sgdMomentumGo(p, g, buf, lr, wd, mom, damp)
}

func add(d, a, b []float32) { addGo(d, a, b) }

func sumCols(acc []float64, x []float32, rows, stride int) { sumColsGo(acc, x, rows, stride) }

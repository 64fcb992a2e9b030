//go:build amd64 && !noasm

package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// asmVecImpls are the assembly kernels this CPU runs: AVX2 where it has
// AVX2 and FMA, AVX-512 where it also has AVX-512 F and DQ. A path the CPU
// lacks is left out, and TestVecPathsHere says so.
func asmVecImpls() []vecImpl {
	var impls []vecImpl
	if vecMath {
		impls = append(impls, vecImpl{"avx2", expSum, asmGELU(geluAVX2), asmGELUBack(geluBackwardAVX2)})
	}
	if vecMath512 {
		impls = append(impls, vecImpl{"avx512", expSum, asmGELU(geluAVX512), asmGELUBack(geluBackwardAVX512)})
	}
	return impls
}

func asmGELU(f func(y, x *float32, n int)) func(y, x []float32) {
	return func(y, x []float32) {
		if len(y) > 0 {
			_ = x[len(y)-1]
			f(&y[0], &x[0], len(y))
		}
	}
}

func asmGELUBack(f func(dx, dy, x *float32, n int)) func(dx, dy, x []float32) {
	return func(dx, dy, x []float32) {
		if len(dx) > 0 {
			_, _ = dy[len(dx)-1], x[len(dx)-1]
			f(&dx[0], &dy[0], &x[0], len(dx))
		}
	}
}

// TestVecPathsHere names the vector paths this CPU cannot run, so that a
// run on it says what it did not test.
func TestVecPathsHere(t *testing.T) {
	if !vecMath {
		t.Skip("no AVX2+FMA: the AVX2 and AVX-512 GELU kernels are not tested on this CPU")
	}
	if !vecMath512 {
		t.Skip("no AVX-512 F+DQ: the AVX-512 GELU kernels are not tested on this CPU")
	}
}

// TestGELUAVX512SameBits: the AVX-512 GELU kernels give the AVX2 kernels'
// bits on every input class (a sweep, random values over many scales, the
// exp clamps' edges, ±0, ±Inf, NaN, denormals), so that switching paths
// changes no loss.
func TestGELUAVX512SameBits(t *testing.T) {
	if !vecMath512 {
		t.Skip("no AVX-512 F+DQ on this CPU: nothing to compare")
	}
	var x []float32
	for i := range 100_000 {
		x = append(x, -20+40*float32(i)/100_000)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		x = append(x, float32(r.NormFloat64()*math.Pow(10, 4*r.Float64()-3)))
	}
	inf := float32(math.Inf(1))
	x = append(x, 0, float32(math.Copysign(0, -1)), inf, -inf, float32(math.NaN()), 1e-40, -1e-40,
		13.2, -13.2, 87.3, -87.3, 88, -88, 1e30, -1e30, math.MaxFloat32, -math.MaxFloat32)
	dy := make([]float32, len(x))
	for i := range dy {
		dy[i] = float32(r.NormFloat64())
	}
	y2, y5 := make([]float32, len(x)), make([]float32, len(x))
	asmGELU(geluAVX2)(y2, x)
	asmGELU(geluAVX512)(y5, x)
	for i := range x {
		if math.Float32bits(y2[i]) != math.Float32bits(y5[i]) {
			t.Fatalf("GELU(%g): AVX2 %g (%#x), AVX-512 %g (%#x)", x[i], y2[i], math.Float32bits(y2[i]), y5[i], math.Float32bits(y5[i]))
		}
	}
	asmGELUBack(geluBackwardAVX2)(y2, dy, x)
	asmGELUBack(geluBackwardAVX512)(y5, dy, x)
	for i := range x {
		if math.Float32bits(y2[i]) != math.Float32bits(y5[i]) {
			t.Fatalf("GELU'(%g)·%g: AVX2 %g (%#x), AVX-512 %g (%#x)", x[i], dy[i], y2[i], math.Float32bits(y2[i]), y5[i], math.Float32bits(y5[i]))
		}
	}
}

// TestSwiGLUAVX512SameBits: the AVX-512 SwiGLU kernels give the AVX2
// kernels' bits, on the inputs TestGELUAVX512SameBits uses as gates.
func TestSwiGLUAVX512SameBits(t *testing.T) {
	if !vecMath512 {
		t.Skip("no AVX-512 F+DQ on this CPU: nothing to compare")
	}
	r := rand.New(rand.NewPCG(3, 4))
	var g []float32
	for i := range 50_000 {
		g = append(g, -100+200*float32(i)/50_000)
	}
	for range 50_000 {
		g = append(g, float32(r.NormFloat64()*math.Pow(10, 4*r.Float64()-3)))
	}
	inf := float32(math.Inf(1))
	g = append(g, 0, float32(math.Copysign(0, -1)), inf, -inf, float32(math.NaN()), 1e-40, -1e-40, 87.3, -87.3, 88, -88, 1e30, -1e30)
	u, dy := make([]float32, len(g)), make([]float32, len(g))
	for i := range u {
		u[i], dy[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	n := len(g)
	y2, y5 := make([]float32, n), make([]float32, n)
	swigluAVX2(&y2[0], &g[0], &u[0], n)
	swigluAVX512(&y5[0], &g[0], &u[0], n)
	dg2, du2, dg5, du5 := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	swigluBackwardAVX2(&dg2[0], &du2[0], &dy[0], &g[0], &u[0], n)
	swigluBackwardAVX512(&dg5[0], &du5[0], &dy[0], &g[0], &u[0], n)
	for i := range n {
		for _, p := range [][2]float32{{y2[i], y5[i]}, {dg2[i], dg5[i]}, {du2[i], du5[i]}} {
			if math.Float32bits(p[0]) != math.Float32bits(p[1]) {
				t.Fatalf("gate %g, up %g, dy %g: AVX2 %g, AVX-512 %g (y %g/%g, dgate %g/%g, dup %g/%g)",
					g[i], u[i], dy[i], p[0], p[1], y2[i], y5[i], dg2[i], dg5[i], du2[i], du5[i])
			}
		}
	}
}

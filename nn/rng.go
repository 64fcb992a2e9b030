package nn

import (
	"hash/fnv"
	"math/rand/v2"
)

// Init says how a parameter's initial weights are drawn. Each parameter
// draws from its own generator, seeded from the model seed and its name, so
// a pipeline stage that builds only some layers gets exactly the weights
// those layers have in the whole model. It is not PyTorch's generator: to
// start from bit-identical weights on both sides, pass a safetensors file
// with --init.
type Init struct {
	kind initKind
	a, b float32
}

type initKind uint8

const (
	initConst initKind = iota
	initUniform
	initNormal
)

// Uniform draws from U(lo, hi).
func Uniform(lo, hi float32) Init { return Init{kind: initUniform, a: lo, b: hi} }

// Normal draws from N(mean, std²).
func Normal(mean, std float32) Init { return Init{kind: initNormal, a: mean, b: std} }

// Const sets every weight to v.
func Const(v float32) Init { return Init{kind: initConst, a: v} }

// fill draws w for the parameter name of a model seeded with seed.
func (in Init) fill(w []float32, seed uint64, name string) {
	h := fnv.New64a()
	h.Write([]byte(name))
	r := rand.New(rand.NewPCG(seed, h.Sum64()))
	for i := range w {
		switch in.kind {
		case initConst:
			w[i] = in.a
		case initUniform:
			w[i] = in.a + (in.b-in.a)*r.Float32()
		case initNormal:
			w[i] = in.a + in.b*float32(r.NormFloat64())
		}
	}
}

package checkpoint

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"go.uber.org/goleak"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/safetensors"
)

// AsyncSaver starts a goroutine; every test must leave none behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// model is a random model for property tests: parameter specs in order,
// the optimizer states and the data of every tensor.
type model struct {
	params []TensorSpec
	opt    *OptimizerState
	data   map[string][]byte
}

// randomModel draws 1–8 parameters of rank 0–3 (dims 1–7, now and then a
// zero dimension), mostly F32 but also F16, I64 and U8 to exercise other
// element sizes, and an optimizer with 0, 1 or 2 state buffers.
func randomModel(r *rand.Rand) *model {
	m := &model{data: map[string][]byte{}}
	n := 1 + r.IntN(8)
	dtypes := []safetensors.DType{safetensors.F32, safetensors.F32, safetensors.F32, safetensors.F16, safetensors.I64, safetensors.U8}
	for i := 0; i < n; i++ {
		shape := make([]int, r.IntN(4))
		for d := range shape {
			shape[d] = 1 + r.IntN(7)
			if r.IntN(20) == 0 {
				shape[d] = 0
			}
		}
		m.params = append(m.params, TensorSpec{Name: fmt.Sprintf("layers.%d.w", i), DType: dtypes[r.IntN(len(dtypes))], Shape: shape})
	}
	switch r.IntN(3) {
	case 0:
		m.opt = &OptimizerState{Name: "sgd", States: []string{}}
	case 1:
		m.opt = &OptimizerState{Name: "sgd", Momentum: 0.9, States: []string{"momentum_buffer"}}
	default:
		m.opt = &OptimizerState{Name: "adamw", Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, States: []string{"exp_avg", "exp_avg_sq"}}
	}
	m.opt.Steps = int64(r.IntN(1000))
	for _, p := range m.params {
		for _, name := range append([]string{p.Name}, m.optNames(p.Name)...) {
			b, _ := p.Bytes()
			d := make([]byte, b)
			for i := range d {
				d[i] = byte(r.Uint32())
			}
			m.data[name] = d
		}
	}
	return m
}

func (m *model) optNames(param string) []string {
	var out []string
	for _, s := range m.opt.States {
		out = append(out, OptimName(s, param))
	}
	return out
}

// randomBounds splits n parameters into pp contiguous stages, some
// possibly empty.
func randomBounds(r *rand.Rand, n, pp int) []int {
	b := make([]int, pp+1)
	for s := 1; s < pp; s++ {
		b[s] = r.IntN(n + 1)
	}
	b[pp] = n
	for s := 1; s < pp; s++ { // sort the inner cut points
		for t := s + 1; t < pp; t++ {
			if b[t] < b[s] {
				b[s], b[t] = b[t], b[s]
			}
		}
	}
	return b
}

// snapshot returns the model as a snapshot of world (dp, pp) with the
// stage split bounds, at step.
func (m *model) snapshot(step int64, dp, pp int, bounds []int) *Snapshot {
	s := &Snapshot{Meta: Meta{
		Step: step, Generation: 3, World: World{DP: dp, PP: pp},
		Sampler:   &data.SamplerState{N: 1000, Seed: 7, Shuffle: true, Cursor: data.Cursor(step * 32)},
		RNG:       map[string][]byte{"dropout": {1, 2, 3, byte(step)}},
		Optimizer: m.opt,
		Schedule:  &ScheduleState{Kind: "cosine", BaseLR: 1e-3, Warmup: 10, Total: 100, MinFactor: 0.1, Position: step},
		Config:    []byte(`{"model": "test", "batch": 32}`),
	}}
	for st := 0; st < pp; st++ {
		ps := m.params[bounds[st]:bounds[st+1]]
		for _, p := range ps {
			p.Stage = st
			s.Add(Tensor{TensorSpec: p, Data: m.data[p.Name]})
		}
		for _, state := range m.opt.States {
			for _, p := range ps {
				q := p
				q.Name, q.Stage = OptimName(state, p.Name), st
				s.Add(Tensor{TensorSpec: q, Data: m.data[q.Name]})
			}
		}
	}
	return s
}

// checkAll reads every tensor of ck whole and compares it with m.
func (m *model) checkAll(t *testing.T, ck *Checkpoint) {
	t.Helper()
	for name, want := range m.data {
		got, err := ck.ReadTensor(name)
		if err != nil {
			t.Fatalf("reading %s: %v", name, err)
		}
		if !bytes.Equal(got.Data, want) {
			t.Fatalf("tensor %s differs from what was saved", name)
		}
	}
}

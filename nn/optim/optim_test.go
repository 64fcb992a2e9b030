package optim_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
)

// A sharded optimizer updates its ranges as the whole optimizer does, bit
// for bit, leaves every other element alone, and its states hold exactly
// the whole optimizer's states of its elements: two shards that together
// cover the set reproduce the whole update over several steps.
func TestShardedOptimizerMatchesWhole(t *testing.T) {
	for _, cfg := range []optim.Config{
		{Name: "sgd", Momentum: 0.9, WeightDecay: 0.01},
		{Name: "sgd", Momentum: 0.9, Nesterov: true},
		optim.DefaultConfig("adamw"),
	} {
		t.Run(cfg.Name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			set := func() *nn.ParamSet {
				s := nn.NewParamSet(cpu.New(1), 3)
				s.Add("a", []int{37, 5}, nn.Normal(0, 1))
				s.Add("b", []int{70}, nn.Normal(0, 1))
				s.Finalize()
				return s
			}
			whole, left, right := set(), set(), set()
			n := whole.Len()
			// Uneven, unaligned ranges, one inside a parameter, one across two.
			rl := []optim.Range{{Lo: 0, Hi: 13}, {Lo: 101, Hi: 190}}
			rr := []optim.Range{{Lo: 13, Hi: 101}, {Lo: 190, Hi: n}}
			ow, err := optim.New(whole, cfg)
			if err != nil {
				t.Fatal(err)
			}
			ol, _ := optim.NewShard(left, cfg, rl)
			or, _ := optim.NewShard(right, cfg, rr)
			for step := range 4 {
				g := make([]float32, n)
				for i := range g {
					g[i] = float32(r.NormFloat64())
				}
				for _, s := range []*nn.ParamSet{whole, left, right} {
					s.Backend().Upload(s.Grads(), g)
				}
				ow.Step(0.1)
				ol.Step(0.1)
				or.Step(0.1)
				want, gl, gr := whole.HostWeights(), left.HostWeights(), right.HostWeights()
				owned := func(rs []optim.Range, i int) bool {
					for _, x := range rs {
						if i >= x.Lo && i < x.Hi {
							return true
						}
					}
					return false
				}
				for i := range want {
					got := gr[i]
					if owned(rl, i) {
						got = gl[i]
					}
					if math.Float32bits(got) != math.Float32bits(want[i]) {
						t.Fatalf("step %d element %d: %v sharded, %v whole", step, i, got, want[i])
					}
				}
				// States: the shard's buffer is its ranges' elements in order.
				for k, st := range ol.States() {
					full := make([]float32, n)
					whole.Backend().Download(full, ow.States()[k].Buf)
					got := make([]float32, st.Buf.Len())
					left.Backend().Download(got, st.Buf)
					off := 0
					for _, x := range st.Ranges {
						for i := x.Lo; i < x.Hi; i++ {
							if got[off] != full[i] {
								t.Fatalf("state %s element %d: %v sharded, %v whole", st.Name, i, got[off], full[i])
							}
							off++
						}
					}
					if off != st.Buf.Len() {
						t.Fatalf("state %s holds %d elements, its ranges %d", st.Name, st.Buf.Len(), off)
					}
				}
			}
		})
	}
	if _, err := optim.NewShard(nn.NewParamSet(cpu.New(1), 1), optim.DefaultConfig("adamw"), []optim.Range{{Lo: 0, Hi: 1}}); err == nil {
		t.Error("a range outside the set was accepted")
	}
}

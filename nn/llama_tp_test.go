package nn_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
)

// blockRun is one forward and backward pass of a layer: its output, its
// input gradient and its parameters' gradients by name.
type blockRun struct {
	y, dx []float32
	grads map[string][]float32
	ps    map[string]*nn.Param
}

// runLayer runs l forward on x ([rows, cols]) and backward from dy, in a
// context on group g (nil: no tensor parallelism), from zero gradients.
func runLayer(t *testing.T, be kernels.Backend, g nn.TPGroup, l nn.Layer, x, dy []float32, rows, cols int) blockRun {
	pool := nn.NewPool(be)
	c := nn.NewCtx(be, pool)
	if g != nil {
		c.TP = g
	}
	for _, p := range l.Params() {
		be.Fill(p.G, 0)
	}
	xb := pool.Get(len(x))
	be.Upload(xb, x)
	y := nn.Forward(c, []nn.Layer{l}, nn.Act{X: xb, Rows: rows, Cols: cols})
	res := blockRun{y: download(be, y.X), grads: map[string][]float32{}, ps: map[string]*nn.Param{}}
	pool.Put(y.X)
	d := pool.Get(len(dy))
	be.Upload(d, dy)
	dx := nn.Backward(c, []nn.Layer{l}, nn.Act{X: d, Rows: rows, Cols: cols})
	res.dx = download(be, dx.X)
	pool.Put(dx.X)
	for _, p := range l.Params() {
		res.grads[p.Name] = download(be, p.G)
		res.ps[p.Name] = p
	}
	if pool.LiveBytes() != 0 {
		t.Errorf("%d bytes of activations still out after the pass", pool.LiveBytes())
	}
	return res
}

// near fails unless got and want agree within rel times want's largest
// magnitude.
func near(t *testing.T, what string, got, want []float32, rel float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var top float64
	for _, w := range want {
		top = math.Max(top, math.Abs(float64(w)))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - float64(want[i])); d > rel*top || math.IsNaN(d) {
			t.Errorf("%s[%d] = %g, want %g (|diff| %.3g > %.3g)", what, i, got[i], want[i], d, rel*top)
			return
		}
	}
}

// TestLlamaShardsMatchTheWholeBlock runs a LlamaBlock cut into 2
// tensor-parallel shards (with and without sequence parallelism, kv heads
// split or replicated) and the whole block from the same weights, input
// and upstream gradient. The shards' outputs and input gradients (put
// together by rows with sequence parallelism), their cut parameters'
// gradients put together, and the sums of partial gradients equal the
// whole block's within 1e-5 of each tensor's largest value: the shards add
// the same terms in another order, float32 rounding only. Replicated
// parameters without partial gradients are checked the same way on every
// shard.
func TestLlamaShardsMatchTheWholeBlock(t *testing.T) {
	for _, k := range []struct {
		name   string
		kv     int
		tp     nn.TP
		replKV bool
		heads  int
	}{
		{"kv-split", 2, nn.TP{Size: 2}, false, 4},
		{"kv-split/sp", 2, nn.TP{Size: 2, SP: true}, false, 4},
		{"kv=1-replicated", 1, nn.TP{Size: 2}, true, 4},
		{"kv=1-replicated/sp", 1, nn.TP{Size: 2, SP: true}, true, 4},
		{"kv=3-of-6-replicated", 3, nn.TP{Size: 2}, true, 6},
	} {
		t.Run(k.name, func(t *testing.T) {
			cfg := tinyLlama(k.kv)
			cfg.Heads = k.heads
			cfg.DModel = 4 * k.heads
			checkLlamaShards(t, cfg, k.tp, k.replKV)
		})
	}
}

func checkLlamaShards(t *testing.T, cfg nn.LlamaBlockConfig, tp nn.TP, replKV bool) {
	const prefix = "layers.0"
	r := rand.New(rand.NewPCG(21, uint64(cfg.KVHeads)))
	rows, d := 2*cfg.Context, cfg.DModel
	x, dy := randF32(r, rows*d, 1), randF32(r, rows*d, 1)
	be := cpu.New(1)
	ws := nn.NewParamSet(be, 17)
	whole, err := nn.NewLlamaBlock(ws, prefix, cfg, nn.NoTP)
	if err != nil {
		t.Fatal(err)
	}
	ws.Finalize()
	perturbWeights(be, ws, 4, 1, 0.3, prefix+".input_layernorm.weight", prefix+".post_attention_layernorm.weight")
	want := runLayer(t, be, nil, whole, x, dy, rows, d)
	sd := ws.StateDict()

	runs := make([]blockRun, tp.Size)
	onShards(tp.Size, func(sh *memShard) {
		place := nn.TP{Rank: sh.rank, Size: tp.Size, SP: tp.SP}
		s := nn.NewParamSet(sh.be, 17)
		b, err := nn.NewLlamaBlock(s, prefix, cfg, place)
		if err != nil {
			panic(err)
		}
		s.Finalize()
		if err := s.LoadStateDict(sd, nil); err != nil {
			panic(err)
		}
		if b.Attn.ReplicatedKV != replKV {
			panic(fmt.Sprintf("ReplicatedKV %v, want %v", b.Attn.ReplicatedKV, replKV))
		}
		xs, dys, n := x, dy, rows
		if tp.SP {
			n = rows / tp.Size
			xs, dys = x[sh.rank*n*d:(sh.rank+1)*n*d], dy[sh.rank*n*d:(sh.rank+1)*n*d]
		}
		runs[sh.rank] = runLayer(t, sh.be, sh, b, xs, dys, n, d)
	})
	for i, run := range runs {
		y, dx := want.y, want.dx
		if tp.SP {
			n := rows / tp.Size * d
			y, dx = y[i*n:(i+1)*n], dx[i*n:(i+1)*n]
		}
		near(t, fmt.Sprintf("shard %d y", i), run.y, y, 1e-5)
		near(t, fmt.Sprintf("shard %d dx", i), run.dx, dx, 1e-5)
	}
	for name, g := range want.grads {
		p0 := runs[0].ps[name]
		if p0 == nil {
			t.Fatalf("the shards have no %s", name)
		}
		kv := name == prefix+".self_attn.k_proj.weight" || name == prefix+".self_attn.v_proj.weight"
		norm := name == prefix+".input_layernorm.weight" || name == prefix+".post_attention_layernorm.weight"
		switch {
		case kv && replKV && (p0.Split != nil || !p0.PartialGrad):
			t.Errorf("%s: replicated k/v must be whole with partial gradients (split %v, partial %v)", name, p0.Split, p0.PartialGrad)
		case norm && p0.PartialGrad != tp.SP:
			t.Errorf("%s: PartialGrad %v with sequence parallelism %v", name, p0.PartialGrad, tp.SP)
		}
		got := make([]float32, len(g))
		switch {
		case p0.Split != nil:
			for _, run := range runs {
				run.ps[name].Split.Insert(got, run.grads[name])
			}
		case p0.PartialGrad:
			for _, run := range runs {
				for j, v := range run.grads[name] {
					got[j] += v
				}
			}
		default:
			for i, run := range runs[1:] {
				near(t, fmt.Sprintf("shard %d %s", i+1, name), run.grads[name], runs[0].grads[name], 0)
			}
			got = runs[0].grads[name]
		}
		near(t, name, got, g, 1e-5)
	}
}

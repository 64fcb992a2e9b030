package plan

import (
	"math"
	"testing"

	"github.com/troupe-ml/troupe/models"
	"github.com/troupe-ml/troupe/nn"
)

// Korthikanti et al. 2022's worked case, GPT-3 175B (s 2048, h 12288, a
// 96, t 8): 5·a·s/h = 80, so one layer holds 114·sbh bytes unsharded,
// (10 + 3 + 10)·sbh = 23·sbh with tensor parallelism and 114/8·sbh with
// sequence parallelism too (the paper's 34 + 5as/h and its t-divided
// variants).
func TestActivationBytesPerLayerGPT3(t *testing.T) {
	sbh := 2048.0 * 12288
	for _, c := range []struct {
		t    int
		sp   bool
		want float64
	}{{1, false, 114}, {8, false, 23}, {8, true, 114.0 / 8}} {
		if got := ActivationBytesPerLayer(2048, 1, 12288, 96, c.t, c.sp); got != c.want*sbh {
			t.Errorf("t=%d sp=%v: %v bytes, want %v·sbh = %v", c.t, c.sp, got, c.want, c.want*sbh)
		}
	}
}

// Four ring all-reduces of sbh values: each rank sends 2(t−1)/t of each.
func TestTPBlockCommBytes(t *testing.T) {
	for _, tc := range []struct {
		t    int
		sp   bool
		want float64
	}{{1, false, 0}, {2, false, 4 * 2 * 0.5 * 1000 * 4}, {4, false, 8 * 0.75 * 1000 * 4}, {4, true, 10 * 0.75 * 1000 * 4}} {
		if got := TPBlockCommBytes(1000, tc.t, tc.sp, 4); got != tc.want {
			t.Errorf("t=%d sp=%v: %v, want %v", tc.t, tc.sp, got, tc.want)
		}
	}
}

// The parameter counts are troupe's GPT's: the whole model's is
// nn.Layout's, and so is the fullest device's for every shard count and
// for two stages (units cut after the first block: the embeddings and
// one block on stage 0, one block and the head on stage 1).
func TestTensorParallelParamsMatchTheModel(t *testing.T) {
	g := models.GPT{Vocab: 126, Context: 64, DModel: 128, Layers: 2, Heads: 4}
	spec := g
	count := func(lo, hi int, tp nn.TP) int64 {
		ps, err := nn.Layout(spec, lo, hi, tp)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, p := range ps {
			n += int64(p.Size())
		}
		return n
	}
	for _, tp := range []int{1, 2, 4} {
		for _, pp := range []int{1, 2} {
			r, err := TensorParallel(TPConfig{Seq: 64, MicroBatch: 1, Hidden: 128, Heads: 4, Layers: 2, Vocab: 126, TP: tp, PP: pp, DP: 1, ActBytes: 4, StateBytesPerParam: 16})
			if err != nil {
				t.Fatal(err)
			}
			if want := count(0, 4, nn.NoTP); r.Params != want {
				t.Errorf("tp %d: %d parameters, the model has %d", tp, r.Params, want)
			}
			place := nn.TP{Size: tp}
			want := count(0, 4, place)
			if pp == 2 {
				want = max(count(0, 2, place), count(2, 4, place))
			}
			if r.ParamsPerDevice != want {
				t.Errorf("tp %d pp %d: %d parameters on the fullest device, the layout has %d", tp, pp, r.ParamsPerDevice, want)
			}
			if r.StateBytesPerDevice != 16*float64(want) || r.Devices != tp*pp {
				t.Errorf("tp %d pp %d: state %v, devices %d", tp, pp, r.StateBytesPerDevice, r.Devices)
			}
		}
	}
}

func TestTensorParallelRejects(t *testing.T) {
	ok := TPConfig{Seq: 64, MicroBatch: 1, Hidden: 128, Heads: 4, Layers: 2, Vocab: 126, TP: 2, PP: 1, DP: 1, ActBytes: 4, StateBytesPerParam: 16}
	for name, mut := range map[string]func(*TPConfig){
		"heads tp does not divide": func(c *TPConfig) { c.TP = 3 },
		"sp without tp":            func(c *TPConfig) { c.TP, c.SP = 1, true },
		"sp seq":                   func(c *TPConfig) { c.TP, c.Heads, c.Seq, c.SP = 4, 4, 66, true },
		"more stages than layers":  func(c *TPConfig) { c.PP = 3 },
		"zero hidden":              func(c *TPConfig) { c.Hidden = 0 },
		"NaN bytes":                func(c *TPConfig) { c.ActBytes = math.NaN() },
	} {
		c := ok
		mut(&c)
		if _, err := TensorParallel(c); err == nil {
			t.Errorf("%s: accepted %+v", name, c)
		}
	}
	if _, err := TensorParallel(ok); err != nil {
		t.Fatal(err)
	}
}

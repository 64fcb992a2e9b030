package models_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/models"
	"github.com/troupe-ml/troupe/nn"
)

// TestLlamaDecoderMatchesFullForward: the KV-cache decoder of a 2-layer
// Llama (grouped-query attention, 4 heads on 2 kv heads, rope theta 500,
// weights of N(0, 0.3²) so that the logits spread over several units)
// gives, after each token fed one at a time and after chunks fed at once
// (a prompt of 3, then 1, 2, 1, 1), the logits the full forward pass over
// the whole sequence gives at that position, within 1e-5 of the largest
// logit. Both compute the same products; the GEMMs block a different
// number of key positions (masked ones are zeros in the full pass, absent
// in the cached one), a few float32 ulp through two layers. After Reset it
// decodes the same bits again.
func TestLlamaDecoderMatchesFullForward(t *testing.T) {
	be := cpu.New(1)
	spec := models.Llama{Vocab: 29, Context: 8, DModel: 16, Layers: 2, Heads: 4, KVHeads: 2, FFN: 24, RopeTheta: 500, NormEps: 1e-5}
	m, err := nn.BuildWhole(be, spec, 7)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(4, 5))
	w := m.Set.HostWeights()
	for i := range w {
		w[i] = float32(0.3 * r.NormFloat64())
	}
	if err := m.Set.SetHostWeights(w); err != nil {
		t.Fatal(err)
	}
	ids := make([]int32, spec.Context)
	for i := range ids {
		ids[i] = int32(r.IntN(spec.Vocab))
	}

	// The full forward pass, in evaluation: [Context, Vocab] logits.
	pool := nn.NewPool(be)
	c := nn.NewCtx(be, pool)
	c.Train = false
	idx := be.AllocIndex(len(ids))
	defer be.FreeIndex(idx)
	be.UploadIndex(idx, ids)
	y := nn.Forward(c, m.Layers, nn.Act{Ids: idx, Rows: len(ids)})
	full := make([]float32, y.X.Len())
	be.Download(full, y.X)
	pool.Put(y.X)
	var top float64
	for _, v := range full {
		top = math.Max(top, math.Abs(float64(v)))
	}
	bound := 1e-5 * top

	dec, err := spec.NewDecoder(m, spec.Context)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	tc := nn.NewCtx(be, pool) // a training context: the decoder must keep nothing
	check := func(what string, chunks []int) [][]float32 {
		var outs [][]float32
		at := 0
		for _, n := range chunks {
			logits, err := dec.Feed(tc, ids[at:at+n])
			if err != nil {
				t.Fatal(err)
			}
			at += n
			if dec.Len() != at {
				t.Fatalf("%s: Len %d after %d tokens", what, dec.Len(), at)
			}
			want := full[(at-1)*spec.Vocab : at*spec.Vocab]
			if len(logits) != len(want) {
				t.Fatalf("%s: %d logits, want %d", what, len(logits), len(want))
			}
			for j := range want {
				if d := math.Abs(float64(logits[j] - want[j])); d > bound || math.IsNaN(d) {
					t.Errorf("%s: position %d logit %d: decoded %g, full pass %g (|diff| %.3g > %.3g)", what, at-1, j, logits[j], want[j], d, bound)
					break
				}
			}
			outs = append(outs, logits)
		}
		if tc.Tape.Len() != 0 || pool.LiveBytes() != 0 {
			t.Errorf("%s: decoding left %d buffers on the tape and %d bytes out of the pool", what, tc.Tape.Len(), pool.LiveBytes())
		}
		return outs
	}
	one := []int{1, 1, 1, 1, 1, 1, 1, 1}
	first := check("token by token", one)
	if _, err := dec.Feed(tc, ids[:1]); !errors.Is(err, nn.ErrConfig) {
		t.Errorf("a token past the capacity: %v, want an nn.ErrConfig", err)
	}
	dec.Reset()
	again := check("token by token after Reset", one)
	for i := range first {
		for j := range first[i] {
			if first[i][j] != again[i][j] {
				t.Fatalf("position %d: %g before Reset, %g after", i, first[i][j], again[i][j])
			}
		}
	}
	dec.Reset()
	check("in chunks", []int{3, 1, 2, 1, 1})
	dec.Reset()
	if _, err := dec.Feed(tc, []int32{int32(spec.Vocab)}); !errors.Is(err, nn.ErrConfig) {
		t.Errorf("a token outside the vocabulary: %v, want an nn.ErrConfig", err)
	}
	if dec.Len() != 0 {
		t.Errorf("a refused token counts: Len %d", dec.Len())
	}

	shard, err := nn.BuildShard(be, spec, 7, 0, spec.Units(), nn.TP{Rank: 0, Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := spec.NewDecoder(shard, 4); !errors.Is(err, nn.ErrConfig) {
		t.Errorf("a decoder over a tensor-parallel shard: %v, want an nn.ErrConfig", err)
	}
}

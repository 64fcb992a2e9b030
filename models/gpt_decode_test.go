package models_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/models"
	"github.com/troupe-ml/troupe/nn"
)

// tinyGPT is a GPT whose weights are drawn wide (N(0, 0.3²) on top of its
// init) so that its logits spread over several units and a wrong position
// or a stale cache row shows.
func tinyGPT(t *testing.T, be kernels.Backend, untied bool) (models.GPT, *nn.Model) {
	t.Helper()
	cfg := models.GPT{Vocab: 13, Context: 8, DModel: 16, Layers: 2, Heads: 4, Untied: untied}
	m, err := models.NewGPT(be, cfg, 5)
	if err != nil {
		t.Fatal(err)
	}
	w := m.Set.HostWeights()
	r := rand.New(rand.NewPCG(7, 8))
	for i := range w {
		w[i] += float32(0.3 * r.NormFloat64())
	}
	if err := m.Set.SetHostWeights(w); err != nil {
		t.Fatal(err)
	}
	return cfg, m
}

// fullLogits runs the whole model over one sequence of Context tokens and
// returns its [Context, vocab] logits.
func fullLogits(t *testing.T, m *nn.Model, ids []int32) []float32 {
	t.Helper()
	be := m.Set.Backend()
	c := nn.NewCtx(be, nn.NewPool(be))
	c.Train = false
	x := be.AllocIndex(len(ids))
	defer be.FreeIndex(x)
	be.UploadIndex(x, ids)
	y := nn.Forward(c, m.Layers, nn.Act{Ids: x, Rows: len(ids)})
	out := make([]float32, y.Rows*y.Cols)
	be.Download(out, y.X)
	c.Pool.Put(y.X)
	return out
}

// TestGPTDecoderMatchesFullForward: a GPT decodes a sequence of its whole
// context, a prompt of 3 tokens and then 1, 2, 1, 1, and the logits after
// each feed equal the full forward pass's at that position within 1e-5 of
// the largest logit. Both compute the same products; the attention's GEMMs
// run over a different number of key positions and the LM head over one
// row instead of eight, so float32 sums are blocked differently (a few
// ulp). A second pass after Reset gives the first's logits bit for bit.
func TestGPTDecoderMatchesFullForward(t *testing.T) {
	for _, untied := range []bool{false, true} {
		be := cpu.New(1)
		cfg, m := tinyGPT(t, be, untied)
		r := rand.New(rand.NewPCG(1, 2))
		ids := make([]int32, cfg.Context)
		for i := range ids {
			ids[i] = int32(r.IntN(cfg.Vocab))
		}
		want := fullLogits(t, m, ids)
		dec, err := cfg.NewDecoder(m, cfg.Context)
		if err != nil {
			t.Fatal(err)
		}
		pool := nn.NewPool(be)
		c := nn.NewCtx(be, pool)
		var first [][]float32
		for pass := range 2 {
			dec.Reset()
			at := 0
			for i, n := range []int{3, 1, 2, 1, 1} {
				got, err := dec.Feed(c, ids[at:at+n])
				if err != nil {
					t.Fatal(err)
				}
				at += n
				if dec.Len() != at {
					t.Fatalf("Len %d after %d tokens", dec.Len(), at)
				}
				row := want[(at-1)*cfg.Vocab : at*cfg.Vocab]
				var scale, worst float64
				for j := range row {
					scale = max(scale, math.Abs(float64(row[j])))
					worst = max(worst, math.Abs(float64(got[j]-row[j])))
				}
				if worst > 1e-5*scale {
					t.Errorf("untied=%v position %d: logits differ by %g (largest %g)", untied, at-1, worst, scale)
				}
				if pass == 0 {
					first = append(first, got)
					continue
				}
				for j := range got {
					if got[j] != first[i][j] {
						t.Fatalf("untied=%v position %d: a second pass after Reset gives %g, the first %g", untied, at-1, got[j], first[i][j])
					}
				}
			}
		}
		if _, err := dec.Feed(c, ids[:1]); !errors.Is(err, nn.ErrConfig) {
			t.Errorf("feeding past the capacity: %v", err)
		}
		if c.Tape.Len() != 0 || pool.LiveBytes() != 0 {
			t.Errorf("decoding left %d buffers on the tape and %d bytes out of the pool", c.Tape.Len(), pool.LiveBytes())
		}
		dec.Close()
	}
}

// TestGPTDecoderRefuses: a capacity past the learned positions, a token
// outside the vocabulary and a pipeline stage are errors, not panics.
func TestGPTDecoderRefuses(t *testing.T) {
	be := cpu.New(1)
	cfg, m := tinyGPT(t, be, false)
	if _, err := cfg.NewDecoder(m, cfg.Context+1); !errors.Is(err, nn.ErrConfig) {
		t.Errorf("capacity %d of a context %d: %v", cfg.Context+1, cfg.Context, err)
	}
	dec, err := cfg.NewDecoder(m, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	c := nn.NewCtx(be, nn.NewPool(be))
	for _, bad := range [][]int32{{1, 13}, {-1}, {}} {
		if _, err := dec.Feed(c, bad); !errors.Is(err, nn.ErrConfig) || dec.Len() != 0 {
			t.Errorf("feeding %v: %v (Len %d)", bad, err, dec.Len())
		}
	}
	stage, err := nn.Build(be, cfg, 1, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.NewDecoder(stage, 4); !errors.Is(err, nn.ErrConfig) {
		t.Errorf("a decoder over a pipeline stage: %v", err)
	}
}

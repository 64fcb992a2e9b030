package nn_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
)

// decoder is a block with a KV-cache decode path.
type decoder interface {
	nn.Layer
	NewKVCache(be kernels.Backend, capacity int) *nn.KVCache
	Decode(c *nn.Ctx, x nn.Act, cache *nn.KVCache) nn.Act
}

// decodeChunks is the prefill-then-decode schedule of the tests: a prompt
// of 3 rows, then single rows and a chunk of 2, 8 positions in all.
var decodeChunks = []int{3, 1, 2, 1, 1}

// fullForward runs l in evaluation on one sequence x ([rows, d]).
func fullForward(be kernels.Backend, g nn.TPGroup, l nn.Layer, x []float32, rows, d int) []float32 {
	c := nn.NewCtx(be, nn.NewPool(be))
	c.Train = false
	if g != nil {
		c.TP = g
	}
	xb := c.Pool.Get(len(x))
	be.Upload(xb, x)
	y := nn.Forward(c, []nn.Layer{l}, nn.Act{X: xb, Rows: rows, Cols: d})
	return download(be, y.X)
}

// decodeAll runs l's decode path over x in decodeChunks and returns the
// rows' outputs, checking that nothing is left on the tape or in the pool.
func decodeAll(t *testing.T, be kernels.Backend, g nn.TPGroup, l decoder, x []float32, d int) []float32 {
	pool := nn.NewPool(be)
	c := nn.NewCtx(be, pool) // a training context: Decode must still keep nothing
	if g != nil {
		c.TP = g
	}
	cache := l.NewKVCache(be, len(x)/d)
	defer cache.Free()
	var out []float32
	at := 0
	for _, n := range decodeChunks {
		xb := pool.Get(n * d)
		be.Upload(xb, x[at*d:(at+n)*d])
		y := l.Decode(c, nn.Act{X: xb, Rows: n, Cols: d}, cache)
		out = append(out, download(be, y.X)...)
		pool.Put(y.X)
		at += n
		if cache.Len != at {
			t.Errorf("cache holds %d positions after %d rows", cache.Len, at)
		}
	}
	if c.Tape.Len() != 0 || pool.LiveBytes() != 0 {
		t.Errorf("decode left %d buffers on the tape and %d bytes out of the pool", c.Tape.Len(), pool.LiveBytes())
	}
	return out
}

// TestDecodeMatchesFullForward: a Llama block (grouped-query attention,
// rope theta 500) and a GPT block decode one sequence of 8 positions, a
// prompt of 3 rows and then 1, 2, 1, 1, and every row's output equals the
// full forward pass's over the whole sequence within 1e-5 of its largest
// value. Both compute the same products; only the GEMMs' blocking over a
// different number of key positions (masked ones are zeros in the full
// pass, absent in the cached one) and the softmax kernel differ, float32
// rounding of a few ulp.
func TestDecodeMatchesFullForward(t *testing.T) {
	be := cpu.New(1)
	const T = 8
	for _, k := range []struct {
		name string
		make func(s *nn.ParamSet) (decoder, error)
	}{
		{"llama-gqa", func(s *nn.ParamSet) (decoder, error) {
			cfg := tinyLlama(2)
			cfg.Context = T
			return nn.NewLlamaBlock(s, "layers.0", cfg, nn.NoTP)
		}},
		{"llama-mqa", func(s *nn.ParamSet) (decoder, error) {
			cfg := tinyLlama(1)
			cfg.Context = T
			return nn.NewLlamaBlock(s, "layers.0", cfg, nn.NoTP)
		}},
		{"gpt", func(s *nn.ParamSet) (decoder, error) {
			return nn.NewBlock(s, "blocks.0", 16, 4, T, 0.3, 0.3, nn.NoTP)
		}},
	} {
		t.Run(k.name, func(t *testing.T) {
			s := nn.NewParamSet(be, 31)
			l, err := k.make(s)
			if err != nil {
				t.Fatal(err)
			}
			s.Finalize()
			x := randF32(rand.New(rand.NewPCG(1, 2)), T*16, 1)
			near(t, "decoded rows", decodeAll(t, be, nil, l, x, 16), fullForward(be, nil, l, x, T, 16), 1e-5)
		})
	}
}

// TestDecodeOnShards: 2 tensor-parallel shards of a Llama block with one
// kv head (replicated on both) and of a GPT block decode a sequence as the
// whole block's full forward pass computes it (same bound as above).
func TestDecodeOnShards(t *testing.T) {
	const T, d = 8, 16
	for _, k := range []struct {
		name string
		make func(s *nn.ParamSet, tp nn.TP) (decoder, error)
	}{
		{"llama-kv=1", func(s *nn.ParamSet, tp nn.TP) (decoder, error) {
			cfg := tinyLlama(1)
			cfg.Context = T
			return nn.NewLlamaBlock(s, "layers.0", cfg, tp)
		}},
		{"gpt", func(s *nn.ParamSet, tp nn.TP) (decoder, error) {
			return nn.NewBlock(s, "blocks.0", d, 4, T, 0.3, 0.3, tp)
		}},
	} {
		t.Run(k.name, func(t *testing.T) {
			be := cpu.New(1)
			ws := nn.NewParamSet(be, 37)
			whole, err := k.make(ws, nn.NoTP)
			if err != nil {
				t.Fatal(err)
			}
			ws.Finalize()
			x := randF32(rand.New(rand.NewPCG(3, 4)), T*d, 1)
			want := fullForward(be, nil, whole, x, T, d)
			sd := ws.StateDict()
			got := make([][]float32, 2)
			onShards(2, func(sh *memShard) {
				s := nn.NewParamSet(sh.be, 37)
				l, err := k.make(s, nn.TP{Rank: sh.rank, Size: 2})
				if err != nil {
					panic(err)
				}
				s.Finalize()
				if err := s.LoadStateDict(sd, nil); err != nil {
					panic(err)
				}
				got[sh.rank] = decodeAll(t, sh.be, sh, l, x, d)
			})
			for r, g := range got {
				near(t, fmt.Sprintf("shard %d decoded rows", r), g, want, 1e-5)
			}
		})
	}
}

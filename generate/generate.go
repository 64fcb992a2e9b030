package generate

import (
	"context"
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
)

// Load builds the whole model spec on be and sets its weights from the
// safetensors file at path (the parameters' PyTorch state_dict names, as
// troupe train --save writes them): every parameter must be there with its
// shape, and nothing else.
func Load(be kernels.Backend, spec nn.Spec, path string) (*nn.Model, error) {
	m, err := nn.BuildWhole(be, spec, 0)
	if err != nil {
		return nil, err
	}
	if err := m.Set.LoadWeights(path); err != nil {
		return nil, err
	}
	return m, nil
}

// Generate returns up to o.MaxNewTokens tokens that follow prompt under
// the model m (whole, its Spec an nn.CausalLM), drawn as o says. It feeds
// the prompt to the model's decoder at once and then each new token, so
// that a step costs one row's work against the KV cache. The prompt and
// the new tokens must fit m's context (a *ContextError otherwise, before
// any work: troupe does not slide a window over a longer sequence).
// m must not run anything else meanwhile.
func Generate(ctx context.Context, m *nn.Model, prompt []int32, o Options) ([]int32, error) {
	lm, err := check(m, prompt, &o)
	if err != nil {
		return nil, err
	}
	dec, err := lm.NewDecoder(m, len(prompt)+o.MaxNewTokens)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrModel, err)
	}
	defer dec.Close()
	return run(ctx, &cached{dec: dec, c: evalCtx(m)}, prompt, o)
}

// Recompute is Generate without a KV cache: every step runs the whole
// model over the sequence so far, padded to the model's context (the
// padding comes after the last real token, which a causal model's row
// does not see), and reads the logits of the last real row — as
// nanoGPT's sample.py and Hugging Face's generate(use_cache=False) do. It
// costs the context's work per token and leaves the model's decoder
// aside; it is the reference Generate is checked against.
func Recompute(ctx context.Context, m *nn.Model, prompt []int32, o Options) ([]int32, error) {
	if _, err := check(m, prompt, &o); err != nil {
		return nil, err
	}
	return run(ctx, newFull(m), prompt, o)
}

// check validates o and says whether m can generate after prompt.
func check(m *nn.Model, prompt []int32, o *Options) (nn.CausalLM, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if m == nil || !m.First() || !m.Last() || m.TP.On() {
		return nil, fmt.Errorf("%w: it needs the whole model, not a pipeline stage or a tensor-parallel shard", ErrModel)
	}
	lm, ok := m.Spec.(nn.CausalLM)
	if !ok || m.Input != nn.TokenInput || m.Context <= 0 {
		return nil, fmt.Errorf("%w: %s is not a causal language model (its Spec does not implement nn.CausalLM)", ErrModel, m.Name)
	}
	if len(prompt) == 0 {
		return nil, fmt.Errorf("%w: it is empty; give at least one token", ErrPrompt)
	}
	for i, id := range prompt {
		if id < 0 || int(id) >= m.Classes {
			return nil, fmt.Errorf("%w: token %d (position %d) is outside the vocabulary of %d", ErrPrompt, id, i, m.Classes)
		}
	}
	if len(prompt)+o.MaxNewTokens > m.Context {
		return nil, &ContextError{Prompt: len(prompt), MaxNew: o.MaxNewTokens, Context: m.Context}
	}
	return lm, nil
}

// stepper runs a model over the next tokens of one sequence and returns
// the logits that follow the last of them.
type stepper interface {
	next(ids []int32) ([]float32, error)
}

// run is the generation loop of both paths: the prompt, then each chosen
// token.
func run(ctx context.Context, s stepper, prompt []int32, o Options) ([]int32, error) {
	smp, err := NewSampler(o)
	if err != nil {
		return nil, err
	}
	out := make([]int32, 0, o.MaxNewTokens)
	feed := prompt
	for len(out) < o.MaxNewTokens {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		logits, err := s.next(feed)
		if err != nil {
			return out, err
		}
		id, err := smp.Next(logits)
		if err != nil {
			return out, fmt.Errorf("%w (after %d new tokens)", err, len(out))
		}
		out = append(out, id)
		if o.OnToken != nil {
			if err := o.OnToken(id); err != nil {
				return out, err
			}
		}
		feed = out[len(out)-1:]
	}
	return out, nil
}

// evalCtx is a context that keeps nothing for a backward pass.
func evalCtx(m *nn.Model) *nn.Ctx {
	be := m.Set.Backend()
	c := nn.NewCtx(be, nn.NewPool(be))
	c.Train = false
	return c
}

// cached steps a model's decoder.
type cached struct {
	dec nn.Decoder
	c   *nn.Ctx
}

func (s *cached) next(ids []int32) ([]float32, error) { return s.dec.Feed(s.c, ids) }

// full steps the whole model over the sequence so far.
type full struct {
	m   *nn.Model
	c   *nn.Ctx
	seq []int32
}

func newFull(m *nn.Model) *full {
	return &full{m: m, c: evalCtx(m), seq: make([]int32, 0, m.Context)}
}

func (s *full) next(ids []int32) ([]float32, error) {
	s.seq = append(s.seq, ids...)
	m, be, n := s.m, s.m.Set.Backend(), len(s.seq)
	padded := make([]int32, m.Context)
	copy(padded, s.seq)
	x := be.AllocIndex(m.Context)
	defer be.FreeIndex(x)
	be.UploadIndex(x, padded)
	y := nn.Forward(s.c, m.Layers, nn.Act{Ids: x, Rows: m.Context})
	if y.Rows != m.Context || y.Cols < m.Classes {
		s.c.Pool.Put(y.X)
		return nil, fmt.Errorf("%w: %s's output is [%d, %d], not logits of %d positions over %d tokens", ErrModel, m.Name, y.Rows, y.Cols, m.Context, m.Classes)
	}
	logits := make([]float32, m.Classes)
	be.Download(logits, be.View(y.X, (n-1)*y.Cols, m.Classes))
	s.c.Pool.Put(y.X)
	return logits, be.Sync()
}

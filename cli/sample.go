package cli

import (
	"context"
	"fmt"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/generate"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/report"
	"github.com/troupe-ml/troupe/train"
)

// wantsSample reports whether a run of cfg's model gets a text sample in
// its report: whether the model is a causal language model. A model that
// makes no Spec for token data (a classifier) does not, and its run keeps
// no copy of the trained weights for one.
func wantsSample(cfg *train.Config) bool {
	def, err := nn.Lookup(cfg.Model)
	if err != nil {
		return false
	}
	causal, _ := causalModel(def)
	return causal
}

// reportSample is the text a trained language model writes for its report:
// the first half of the first held-out sequence (the training data's when
// there is none) as the prompt, and the model's greedy continuation to the
// end of its context, both decoded with the data's tokenizer. It is nil
// for a model that does not generate or data whose tokens have no text.
func reportSample(ctx context.Context, cfg *train.Config, m *nn.Model, step int) (*report.Sample, error) {
	if m == nil {
		return nil, nil
	}
	if _, ok := m.Spec.(nn.CausalLM); !ok || m.Context < 2 {
		return nil, nil
	}
	trainSet, test, err := train.OpenData(cfg)
	if err != nil {
		return nil, err
	}
	ds := test
	if ds == nil || ds.Len() == 0 {
		ds = trainSet
	}
	tok := tokenizerOf(ds)
	if tok == nil || ds.Len() == 0 || ds.Kind() != data.Tokens {
		return nil, nil
	}
	var b data.Batch
	ds.Fill([]int{0}, &b)
	half := m.Context / 2
	prompt := b.Tokens[:half]
	out, err := generate.Generate(ctx, m, prompt, generate.Options{MaxNewTokens: m.Context - half, Temperature: 0, TopP: 1})
	if err != nil {
		return nil, fmt.Errorf("generating the report's sample: %w", err)
	}
	return &report.Sample{Step: step, Data: ds.Name(), Prompt: tok.Decode(prompt), Text: tok.Decode(out), How: "greedy"}, nil
}

package train

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
)

// BuildModel makes the configured model on be, shaped to fit ds, with
// weights from cfg.Init when given.
func BuildModel(cfg *Config, be kernels.Backend, ds data.Dataset) (*nn.Model, error) {
	spec, err := ModelSpec(cfg, ds)
	if err != nil {
		return nil, err
	}
	return buildUnits(cfg, be, spec, 0, spec.Units())
}

// Shape is what a model learns of ds before it is built.
func Shape(ds data.Dataset) nn.DataShape {
	d := nn.DataShape{Tokens: ds.Kind() == data.Tokens, Features: ds.Features(), Classes: ds.Classes(), Context: ds.Context()}
	if r, ok := ds.(data.Regression); ok {
		d.Outputs = r.Outputs()
	}
	return d
}

// ModelSpec is the configured model (cfg.Model, from the registry, with
// cfg.ModelArgs), shaped to fit ds.
func ModelSpec(cfg *Config, ds data.Dataset) (nn.Spec, error) {
	if ds.Kind() == data.Tokens && cfg.Context > 0 && ds.Context() != cfg.Context {
		return nil, fieldErr("Context", "is %d, but the data has context %d", cfg.Context, ds.Context())
	}
	spec, err := nn.NewSpec(cfg.Model, cfg.ModelArgs, Shape(ds))
	if err != nil {
		return nil, fieldErr("Model", "%s on %s: %s", cfg.Model, ds.Name(), strings.TrimPrefix(err.Error(), nn.ErrConfig.Error()+": "))
	}
	return spec, nil
}

// buildUnits makes units [lo, hi) of spec on be, with their weights from
// cfg.Init when given.
func buildUnits(cfg *Config, be kernels.Backend, spec nn.Spec, lo, hi int) (*nn.Model, error) {
	m, err := nn.Build(be, spec, cfg.Seed, lo, hi)
	if err != nil {
		return nil, fieldErr("Model", "%v", err)
	}
	if cfg.Init != "" {
		load := m.Set.LoadWeights
		if lo != 0 || hi != spec.Units() {
			load = m.Set.LoadStageWeights
		}
		if err := load(cfg.Init); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// vocabSizeOption is the language models' option (the GPT's) that
// sizes the vocabulary.
const vocabSizeOption = "vocab-size"

// OpenData opens the configured dataset (training and held-out sets);
// without one, the model's (nn.ModelDef.Data).
func OpenData(cfg *Config) (train, test data.Dataset, err error) {
	spec := cfg.Data
	if spec == "" {
		def, err := nn.Lookup(cfg.Model)
		if err != nil {
			return nil, nil, modelErr("Model", err)
		}
		if spec = def.Data; spec == "" {
			return nil, nil, fieldErr("Data", "is unset and model %s names no default data", def.Name)
		}
	}
	o := data.DefaultOptions()
	o.Seed, o.Vocab, o.Context = cfg.Seed, cfg.Vocab, cfg.Context
	// A language model's --vocab-size is the vocabulary token shards
	// without meta.json are checked against (each id below it), or pads
	// meta.json's.
	if v, ok := cfg.ModelArgs[vocabSizeOption]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, nil, fieldErr("ModelArgs."+vocabSizeOption, "%q is not a vocabulary size", v)
		}
		o.VocabSize = n
	}
	train, test, err = data.Open(spec, o)
	if err != nil {
		return nil, nil, fmt.Errorf("train: data %s: %w", spec, err)
	}
	return train, test, nil
}

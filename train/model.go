package train

import (
	"fmt"

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

// ModelSpec is the configured architecture, shaped to fit ds.
func ModelSpec(cfg *Config, ds data.Dataset) (nn.Spec, error) {
	switch cfg.Model {
	case MLP:
		if ds.Kind() != data.Dense {
			return nn.Spec{}, fieldErr("Model", "mlp needs feature/label data, but %s is %s data", ds.Name(), ds.Kind())
		}
		sizes := cfg.MLPSizes
		if len(sizes) == 0 {
			sizes = []int{ds.Features(), 256, ds.Classes()}
		}
		if sizes[0] != ds.Features() {
			return nn.Spec{}, fieldErr("MLPSizes", "start with %d inputs but %s has %d features", sizes[0], ds.Name(), ds.Features())
		}
		if last := sizes[len(sizes)-1]; last != ds.Classes() {
			return nn.Spec{}, fieldErr("MLPSizes", "end with %d outputs but %s has %d classes", last, ds.Name(), ds.Classes())
		}
		return nn.Spec{MLP: &nn.MLPConfig{Sizes: sizes}}, nil
	case GPT:
		if ds.Kind() != data.Tokens {
			return nn.Spec{}, fieldErr("Model", "gpt needs token data, but %s is %s data", ds.Name(), ds.Kind())
		}
		if ds.Context() != cfg.Context {
			return nn.Spec{}, fieldErr("Context", "is %d, but the data has context %d", cfg.Context, ds.Context())
		}
		return nn.Spec{GPT: &nn.GPTConfig{
			Vocab: ds.Classes(), Context: cfg.Context, DModel: cfg.DModel,
			Layers: cfg.NLayers, Heads: cfg.Heads, Untied: cfg.Untied,
		}}, nil
	}
	return nn.Spec{}, fieldErr("Model", "%q is not a model", cfg.Model)
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

// OpenData opens the configured dataset (training and held-out sets).
func OpenData(cfg *Config) (train, test data.Dataset, err error) {
	spec := cfg.Data
	if spec == "" {
		spec = "gospec"
		if cfg.Model == MLP {
			spec = "mnist"
		}
	}
	o := data.DefaultOptions()
	o.Seed, o.Vocab, o.Context = cfg.Seed, cfg.Vocab, cfg.Context
	train, test, err = data.Open(spec, o)
	if err != nil {
		return nil, nil, fmt.Errorf("train: data %s: %w", spec, err)
	}
	return train, test, nil
}

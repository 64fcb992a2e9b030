package nn

import (
	"fmt"

	"github.com/troupe-ml/troupe/safetensors"
)

// SaveWeights writes every parameter as an F32 tensor, by its PyTorch
// name and shape, to a safetensors file (atomically: temp file, fsync,
// rename). meta goes into the header's __metadata__.
func (s *ParamSet) SaveWeights(path string, meta map[string]string) error {
	for _, p := range s.params {
		if p.Split != nil {
			return fmt.Errorf("nn: saving weights to %s: %q is a tensor-parallel shard; merge the shards into a whole model first", path, p.Name)
		}
	}
	sd := s.StateDict()
	ts := make([]safetensors.Tensor, 0, len(s.params))
	for _, p := range s.params {
		ts = append(ts, safetensors.NewF32(p.Name, p.Shape, sd[p.Name]))
	}
	if err := safetensors.WriteFile(path, ts, meta); err != nil {
		return fmt.Errorf("nn: saving weights to %s: %w", path, err)
	}
	return nil
}

// LoadWeights sets every parameter from a safetensors file (F32, F16 or
// BF16). Every parameter must be present with its exact shape; tensors the
// model does not have are an error, except a "head.weight" equal to a tied
// "tok.weight" (PyTorch's state_dict lists tied tensors twice; a different
// one is an untied head, and an error).
func (s *ParamSet) LoadWeights(path string) error { return s.loadWeights(path, false) }

// LoadStageWeights is LoadWeights for a pipeline stage: the file holds the
// whole model, and the tensors of other stages are skipped.
func (s *ParamSet) LoadStageWeights(path string) error { return s.loadWeights(path, true) }

func (s *ParamSet) loadWeights(path string, partial bool) error {
	f, err := safetensors.Open(path)
	if err != nil {
		return fmt.Errorf("nn: loading weights from %s: %w", path, err)
	}
	defer f.Close()
	sd := map[string][]float32{}
	shapes := map[string][]int{}
	tiedCopy := false
	for _, name := range f.Names() {
		if s.byName[name] == nil && name == "head.weight" && s.byName["tok.weight"] != nil {
			tiedCopy = true // checked against tok.weight below
			continue
		}
		if s.byName[name] == nil {
			if partial {
				continue
			}
			return fmt.Errorf("nn: loading weights from %s: %w: %q is not a parameter of this model", path, ErrStateDict, name)
		}
		v, shape, err := f.Float32(name)
		if err != nil {
			return fmt.Errorf("nn: loading weights from %s: %w", path, err)
		}
		sd[name], shapes[name] = v, shape
	}
	if tiedCopy && sd["tok.weight"] != nil {
		if err := sameAsTied(f, sd["tok.weight"]); err != nil {
			return fmt.Errorf("nn: loading weights from %s: %w", path, err)
		}
	}
	if err := s.LoadStateDict(sd, shapes); err != nil {
		return fmt.Errorf("nn: loading weights from %s: %w", path, err)
	}
	return nil
}

// sameAsTied checks that a file's head.weight is PyTorch's second listing
// of the tied tok.weight (tok, as read from the file): equal values. A different one is an untied head, which a
// tied model would silently drop.
func sameAsTied(f *safetensors.File, tok []float32) error {
	head, _, err := f.Float32("head.weight")
	if err != nil {
		return err
	}
	if len(head) != len(tok) {
		return fmt.Errorf("%w: \"head.weight\" has %d values, the tied \"tok.weight\" %d", ErrStateDict, len(head), len(tok))
	}
	for i := range head {
		if head[i] != tok[i] {
			return fmt.Errorf("%w: \"head.weight\" differs from \"tok.weight\": the file holds an untied LM head, and this model ties it to the token embedding", ErrStateDict)
		}
	}
	return nil
}

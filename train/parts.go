package train

import (
	"fmt"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/pipeline"
)

// partsLayout is how a replica's model parts (its stages' tensor-parallel
// shards) make up the whole model: what putting their weights together
// needs.
type partsLayout struct {
	spec nn.Spec
	cuts []pipeline.Range
	tp   int
	sp   bool
}

// partsLayout is the job's.
func (j *job) partsLayout() partsLayout {
	return partsLayout{spec: j.model, cuts: j.cuts, tp: j.cfg.TP, sp: j.cfg.SequenceParallel}
}

// merge puts the parts' weights (worker.Worker.Weights of each, in part
// order) together into the whole model's, in its flat order: the stages'
// in order, each stage's shards put in their places (nn.Split.Insert), the
// parameters every shard holds whole taken from shard 0.
func (l partsLayout) merge(parts [][]float32) ([]float32, error) {
	tp := max(1, l.tp)
	if len(parts) != len(l.cuts)*tp {
		return nil, fmt.Errorf("train: %d model parts' weights for %d stages of %d shards", len(parts), len(l.cuts), tp)
	}
	if len(parts) == 1 {
		return parts[0], nil // the whole model: the caller's already
	}
	var all []float32
	for st, cut := range l.cuts {
		if tp == 1 {
			all = append(all, parts[st]...)
			continue
		}
		whole, err := nn.Layout(l.spec, cut.Lo, cut.Hi, nn.NoTP)
		if err != nil {
			return nil, err
		}
		at := map[string]*nn.Param{}
		for _, p := range whole {
			at[p.Name] = p
		}
		var out []float32
		for shard := range tp {
			ps, err := nn.Layout(l.spec, cut.Lo, cut.Hi, nn.TP{Rank: shard, Size: tp, SP: l.sp})
			if err != nil {
				return nil, err
			}
			flat := parts[st*tp+shard]
			if shard == 0 {
				// A last stage's workers leave out its copy of the tied
				// embedding: the whole stage has the parameters before it.
				n := 0
				for _, p := range ps {
					if p.Offset < len(flat) {
						n = at[p.Name].Offset + at[p.Name].Size()
					}
				}
				out = make([]float32, n)
			}
			for _, p := range ps {
				w := at[p.Name]
				if p.Offset+p.Size() > len(flat) || w.Offset+w.Size() > len(out) {
					continue
				}
				src, dst := flat[p.Offset:p.Offset+p.Size()], out[w.Offset:w.Offset+w.Size()]
				switch {
				case p.Split != nil:
					p.Split.Insert(dst, src)
				case shard == 0:
					copy(dst, src)
				}
			}
		}
		all = append(all, out...)
	}
	return all, nil
}

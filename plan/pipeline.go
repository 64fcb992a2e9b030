package plan

import "fmt"

// PipelineConfig describes a pipeline of equal stages.
type PipelineConfig struct {
	// Stages is the number of pipeline stages P.
	Stages int
	// MicroBatches is the number of micro-batches M per step.
	MicroBatches int
}

// Validate reports the first input the model cannot use.
func (c PipelineConfig) Validate() error {
	if c.Stages <= 0 {
		return fmt.Errorf("%w: stages %d must be positive", ErrInvalidConfig, c.Stages)
	}
	if c.MicroBatches <= 0 {
		return fmt.Errorf("%w: micro-batches %d must be positive", ErrInvalidConfig, c.MicroBatches)
	}
	if c.Stages > maxPipelineCount || c.MicroBatches > maxPipelineCount {
		return fmt.Errorf("%w: %d stages × %d micro-batches is beyond any real pipeline (limit %d each)", ErrInvalidConfig, c.Stages, c.MicroBatches, maxPipelineCount)
	}
	return nil
}

// maxPipelineCount keeps M + P − 1 far from int overflow; real pipelines
// have tens of stages and hundreds of micro-batches.
const maxPipelineCount = 1 << 30

// PipelineResult is the bubble of a GPipe or 1F1B step with equal stages
// (both schedules idle the same share; 1F1B only holds fewer activations).
type PipelineResult struct {
	Stages       int `json:"stages"`
	MicroBatches int `json:"micro_batches"`
	// Slots is M + P − 1: the step's length in micro-batch times, forward
	// and backward each.
	Slots int `json:"slots"`
	// BubbleFraction is (P − 1)/(M + P − 1), the share of every stage's
	// step spent idle; BusyFraction is the rest, M/(M + P − 1).
	BubbleFraction float64 `json:"bubble_fraction"`
	BusyFraction   float64 `json:"busy_fraction"`
}

// Pipeline computes the bubble of cfg.
func Pipeline(cfg PipelineConfig) (PipelineResult, error) {
	if err := cfg.Validate(); err != nil {
		return PipelineResult{}, err
	}
	slots := cfg.MicroBatches + cfg.Stages - 1
	return PipelineResult{
		Stages:         cfg.Stages,
		MicroBatches:   cfg.MicroBatches,
		Slots:          slots,
		BubbleFraction: BubbleFraction(cfg.Stages, cfg.MicroBatches),
		BusyFraction:   float64(cfg.MicroBatches) / float64(slots),
	}, nil
}

// BubbleFraction is (P − 1)/(M + P − 1) for p stages and m micro-batches,
// both positive.
func BubbleFraction(p, m int) float64 {
	return float64(p-1) / float64(m+p-1)
}

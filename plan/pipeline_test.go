package plan

import (
	"errors"
	"testing"
)

func TestPipeline(t *testing.T) {
	cases := []struct {
		p, m, slots int
		bubble      float64
	}{
		// The case: 3 stages, 6 micro-batches idle 2/8 = 25%.
		{3, 6, 8, 0.25},
		{1, 1, 1, 0},
		{4, 1, 4, 0.75},
		// Megatron's rule of thumb: M = 4P keeps the bubble near 20%.
		{4, 16, 19, 3.0 / 19},
		{8, 8, 15, 7.0 / 15},
	}
	for _, c := range cases {
		r, err := Pipeline(PipelineConfig{Stages: c.p, MicroBatches: c.m})
		if err != nil {
			t.Fatal(err)
		}
		// Exact: the same single division as the expectation.
		if r.Slots != c.slots || r.BubbleFraction != c.bubble || r.BusyFraction != float64(c.m)/float64(c.slots) {
			t.Errorf("P=%d M=%d: %+v, want slots %d bubble %v", c.p, c.m, r, c.slots, c.bubble)
		}
	}
}

func TestPipelineInvalid(t *testing.T) {
	for _, cfg := range []PipelineConfig{{0, 4}, {4, 0}, {-1, 4}, {4, -2}, {1 << 31, 1}, {1, 1 << 31}} {
		if _, err := Pipeline(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Pipeline(%+v) error = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

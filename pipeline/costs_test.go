package pipeline

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/models"
)

// TestLayerParams counts by hand: an MLP 4-3-2 has two pipeline units,
// fc1 with its ReLU (4·3 + 3 = 15) and fc2 (3·2 + 2 = 8).
func TestLayerParams(t *testing.T) {
	m, err := models.NewMLP(cpu.New(1), models.MLP{Sizes: []int{4, 3, 2}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := LayerParams(m)
	if !slices.Equal(got, []int{15, 8}) {
		t.Fatalf("%v", got)
	}
	sum := 0
	for _, n := range got {
		sum += n
	}
	if sum != m.Set.Len() {
		t.Fatalf("layers hold %d parameters, the set %d", sum, m.Set.Len())
	}
	costs, err := ParamCosts(got)
	if err != nil || !slices.Equal(costs, []float64{15, 8}) {
		t.Fatal(costs, err)
	}
	if _, err := ParamCosts([]int{1, -1}); !errors.Is(err, ErrBadArgument) {
		t.Fatal(err)
	}
}

// TestLayerParamsTiedGPT: the tied embedding is counted on both the first
// layer and the head, so the list sums to more than the set by one
// vocab × d_model matrix.
func TestLayerParamsTiedGPT(t *testing.T) {
	cfg := models.GPT{Vocab: 11, Context: 4, DModel: 8, Layers: 2, Heads: 2}
	m, err := models.NewGPT(cpu.New(1), cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := LayerParams(m)
	if len(got) != 4 {
		t.Fatalf("%d layers", len(got))
	}
	sum := 0
	for _, n := range got {
		sum += n
	}
	if sum != m.Set.Len()+11*8 {
		t.Fatalf("layers hold %d, set %d + tied %d", sum, m.Set.Len(), 11*8)
	}
	if got[0] != (11+4)*8 || got[3] != 2*8+11*8 {
		t.Fatalf("embedding %d, head %d", got[0], got[3])
	}
}

func TestTimeCosts(t *testing.T) {
	ms := time.Millisecond
	got, err := TimeCosts([][]time.Duration{{3 * ms, 1 * ms, 100 * ms}, {2 * ms, 4 * ms}, {0}})
	if err != nil {
		t.Fatal(err)
	}
	// Medians: 3 ms (the 100 ms outlier ignored), (2+4)/2 ms, 0.
	if !slices.Equal(got, []float64{0.003, 0.003, 0}) {
		t.Fatal(got)
	}
	if _, err := TimeCosts([][]time.Duration{{ms}, {}}); !errors.Is(err, ErrBadArgument) {
		t.Fatal(err)
	}
	if _, err := TimeCosts([][]time.Duration{{-ms, ms}}); !errors.Is(err, ErrBadArgument) {
		t.Fatal(err)
	}
}

// TestEstimateCosts reads the costs back from simulated timelines: equal
// stages with DefaultStageCost plus message times, and a slow stage whose
// estimated costs re-simulate to the same makespan.
func TestEstimateCosts(t *testing.T) {
	s, _ := Build(Config{Kind: Kind1F1B, Stages: 3, MicroBatches: 5, Recompute: true})
	in := Costs{Stages: []StageCost{
		{Forward: 1, Backward: 2, Recompute: 1, Send: 0.25, Recv: 0.5},
		{Forward: 3, Backward: 5, Recompute: 3, Send: 0.25, Recv: 0.5},
		{Forward: 1, Backward: 2, Recompute: 1, Send: 0.25, Recv: 0.5},
	}}
	tl, err := Simulate(s, in)
	if err != nil {
		t.Fatal(err)
	}
	got := EstimateCosts(tl)
	if !slices.Equal(got.Stages, in.Stages) {
		t.Fatalf("%+v, want %+v", got.Stages, in.Stages)
	}
	again, err := Simulate(s, got)
	if err != nil {
		t.Fatal(err)
	}
	if again.Stats().Makespan != tl.Stats().Makespan {
		t.Fatalf("re-simulated makespan %v, first %v", again.Stats().Makespan, tl.Stats().Makespan)
	}
	// A single stage has no messages: its send and receive costs are 0.
	one, _ := Build(Config{Kind: KindGPipe, Stages: 1, MicroBatches: 2})
	tl1, _ := Simulate(one, UniformCosts(1, DefaultStageCost()))
	if c := EstimateCosts(tl1).Stages[0]; c != (StageCost{Forward: 1, Backward: 2}) {
		t.Fatalf("%+v", c)
	}
}

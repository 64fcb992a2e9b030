package pipeline

import "fmt"

// Grid lays out D data-parallel replicas of a P-stage pipeline on D × P
// workers (DP × PP). Ranks are stage-major, as Megatron-LM orders its
// pipeline dimension outside the data-parallel one: rank = stage·D +
// replica. Stage s's data-parallel group (the ranks whose gradients for
// that stage's layers are all-reduced together, and only those) is then D
// consecutive ranks, and replica d's pipeline is ranks d, D+d, 2D+d, …
type Grid struct {
	// Replicas is the data-parallel degree D ≥ 1.
	Replicas int
	// Stages is the pipeline degree P ≥ 1.
	Stages int
}

// NewGrid returns the grid of D replicas × P stages.
func NewGrid(D, P int) (Grid, error) {
	if D < 1 || P < 1 || P > MaxStages || D > 1<<20 {
		return Grid{}, fmt.Errorf("%w: grid of %d replicas × %d stages: want 1 to %d replicas and 1 to %d stages", ErrBadArgument, D, P, 1<<20, MaxStages)
	}
	return Grid{Replicas: D, Stages: P}, nil
}

// Size is the number of workers, D × P.
func (g Grid) Size() int { return g.Replicas * g.Stages }

// Rank is the worker that runs stage of replica.
func (g Grid) Rank(replica, stage int) int { return stage*g.Replicas + replica }

// Coords is Rank's inverse.
func (g Grid) Coords(rank int) (replica, stage int) { return rank % g.Replicas, rank / g.Replicas }

// DataGroup lists the ranks that hold stage, one per replica in replica
// order: the all-reduce group of that stage's gradients.
func (g Grid) DataGroup(stage int) []int {
	out := make([]int, g.Replicas)
	for d := range out {
		out[d] = g.Rank(d, stage)
	}
	return out
}

// PipelineGroup lists replica's ranks in stage order: where its
// activations flow forward and its gradients backward.
func (g Grid) PipelineGroup(replica int) []int {
	out := make([]int, g.Stages)
	for s := range out {
		out[s] = g.Rank(replica, s)
	}
	return out
}

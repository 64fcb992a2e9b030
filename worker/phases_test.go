package worker

import (
	"testing"

	"github.com/troupe-ml/troupe/mesh"
)

// TestPlanPhases checks which phases a worker gets for its mesh and spec,
// without a world: every data-parallel mode, ZeRO stage, tensor
// parallelism and a tied embedding across stages.
func TestPlanPhases(t *testing.T) {
	dp := func(d, p, tp int) mesh.Mesh { return mesh.Mesh{DP: d, PP: p, TP: tp} }
	cases := []struct {
		name  string
		m     mesh.Mesh
		spec  Spec
		tied  bool
		want  phasePlan
		every bool
	}{
		{name: "one rank", m: dp(1, 1, 1), want: phasePlan{}},
		{name: "dp2", m: dp(2, 1, 1), want: phasePlan{Reduce: reduceAllReduce}},
		{name: "dp2 zero1", m: dp(2, 1, 1), spec: Spec{Zero: 1},
			want: phasePlan{Reduce: reduceScatter, Weights: weightsGathered}},
		{name: "dp2 zero2", m: dp(2, 1, 1), spec: Spec{Zero: 2},
			want: phasePlan{Reduce: reduceScatterMicro, Weights: weightsGathered}},
		{name: "dp2 zero3", m: dp(2, 1, 1), spec: Spec{Zero: 3},
			want: phasePlan{Reduce: reduceScatterMicro, Weights: weightsPerLayer}, every: true},
		// ZeRO shards over the replicas: with one replica there is nothing
		// to shard, and the part steps as without it.
		{name: "dp1 zero3", m: dp(1, 1, 1), spec: Spec{Zero: 3}, want: phasePlan{}},
		{name: "dp2 local-sgd", m: dp(2, 1, 1), spec: Spec{Sync: Sync{Mode: SyncLocalSGD}},
			want: phasePlan{Reduce: reduceRounds}},
		{name: "dp1 diloco", m: dp(1, 1, 1), spec: Spec{Sync: Sync{Mode: SyncDiLoCo}},
			want: phasePlan{Reduce: reduceRounds}},
		{name: "async servers zero2", m: dp(2, 1, 1), spec: Spec{Zero: 2, Sync: Sync{Mode: SyncAsync}},
			want: phasePlan{Reduce: reduceScatterMicro, Weights: weightsGathered}},
		{name: "tp2", m: dp(1, 1, 2), want: phasePlan{TP: true}},
		{name: "pp2 tied", m: dp(1, 2, 1), tied: true, want: phasePlan{Tied: tiedAfter}, every: true},
		{name: "pp1 tied", m: dp(1, 1, 1), tied: true, want: phasePlan{}},
		{name: "dp2 pp2 tp2 tied", m: dp(2, 2, 2), tied: true,
			want: phasePlan{Reduce: reduceAllReduce, Tied: tiedAfter, TP: true}, every: true},
		{name: "dp2 pp2 zero1 tied", m: dp(2, 2, 1), spec: Spec{Zero: 1}, tied: true,
			want: phasePlan{Reduce: reduceScatter, Weights: weightsGathered, Tied: tiedBefore}, every: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := planPhases(c.m, &c.spec, c.tied)
			if got != c.want {
				t.Errorf("planPhases(%v) = %v, want %v", c.m, got, c.want)
			}
			if e := got.everyMicro(c.m); e != c.every {
				t.Errorf("everyMicro = %t, want %t", e, c.every)
			}
		})
	}
}

// TestPhaseKindsHaveNames checks that every kind prints its name, the
// way the plan reads in a failure message.
func TestPhaseKindsHaveNames(t *testing.T) {
	p := phasePlan{Reduce: reduceScatterMicro, Weights: weightsPerLayer, Tied: tiedBefore, TP: true}
	want := "reduce=reduce-scatter-micro weights=per-layer tied=before tp=true"
	if got := p.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

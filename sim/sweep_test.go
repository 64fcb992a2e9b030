package sim

import (
	"fmt"
	"strings"
	"testing"
)

// replayLine is the troupe sim command that replays seed of cfg: the
// job's flags that differ from the defaults, as the command prints them
// (cli's simReplay).
func replayLine(cfg Config, seed uint64) string {
	def := DefaultConfig()
	args := []string{"troupe sim"}
	add := func(name string, v, d any) {
		if v != d {
			args = append(args, fmt.Sprintf("--%s %v", name, v))
		}
	}
	add("nodes", cfg.Nodes, def.Nodes)
	add("pp", max(1, cfg.PP), max(1, def.PP))
	add("tp", max(1, cfg.TP), max(1, def.TP))
	add("zero", cfg.Zero, def.Zero)
	if cfg.Zero > 0 {
		add("zero-group", cfg.ZeroGroup, 0)
	}
	add("faults", cfg.Faults, def.Faults)
	add("steps", cfg.Steps, def.Steps)
	add("ckpt-every", cfg.CkptEvery, def.CkptEvery)
	return strings.Join(append(args, fmt.Sprintf("--seed %d --trace seed%d.txt", seed, seed)), " ")
}

// sweep runs seeds 1..n of cfg against the fault-free reference: no
// invariant may break, and the schedules must reach torn writes,
// restores from checkpoints and a lost unit (what the job holds one copy
// of in a replica: a part, a slot), with at least a fifth of the seeds
// finished.
func sweep(t *testing.T, cfg Config, n int, unit string) {
	t.Helper()
	ref, err := NewReference(cfg)
	if err != nil {
		t.Fatal(err)
	}
	finished, lost, torn, restores := 0, 0, 0, 0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		r, err := Run(cfg, seed, nil, ref)
		if err != nil {
			t.Fatal(err)
		}
		if r.Violation != nil {
			t.Fatalf("seed %d: %v (replay: %s)", seed, r.Violation, replayLine(cfg, seed))
		}
		torn += r.TornWrites
		restores += r.Restores
		switch {
		case r.Outcome == "finished":
			finished++
		case strings.Contains(r.Outcome, "is lost"):
			lost++
		}
	}
	t.Logf("%d seeds: %d finished, %d lost a %s, %d torn writes, %d %ss restored", n, finished, lost, unit, torn, restores, unit)
	if finished < n/5 || torn == 0 || restores == 0 || lost == 0 {
		t.Errorf("%d finished, %d torn writes, %d restores, %d lost a %s of %d seeds: the schedules miss a path", finished, torn, restores, lost, unit, n)
	}
}

// sweepSeeds is how many seeds a sweep runs: 200, or 40 with -short or
// under the race detector (raceDetector).
func sweepSeeds() int {
	if testing.Short() || raceDetector {
		return 40
	}
	return 200
}

// The replay line names the job's flags that differ from the defaults,
// in cli's order, and the seed.
func TestReplayLine(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Nodes, cfg.Zero, cfg.ZeroGroup, cfg.PP, cfg.Faults = 4, 1, 2, 2, 0.2
	want := "troupe sim --nodes 4 --pp 2 --zero 1 --zero-group 2 --faults 0.2 --seed 7 --trace seed7.txt"
	if got := replayLine(cfg, 7); got != want {
		t.Errorf("replayLine = %q, want %q", got, want)
	}
	if got, want := replayLine(DefaultConfig(), 3), "troupe sim --seed 3 --trace seed3.txt"; got != want {
		t.Errorf("replayLine(default) = %q, want %q", got, want)
	}
}

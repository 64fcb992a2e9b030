package sim

import (
	"bytes"
	"flag"
	"math"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/troupe-ml/troupe/internal/simbug"
)

var (
	seedsFlag = flag.Int("seeds", 300, "how many seeds TestSeeds runs")
	seedFlag  = flag.Uint64("seed", 0, "TestSeeds runs this seed only and writes its trace to sim-trace.txt")
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSeeds runs seeded fault schedules on the default job: no invariant
// may break. A failure names its seed; -seed=N replays it with its trace.
func TestSeeds(t *testing.T) {
	cfg := DefaultConfig()
	ref, err := NewReference(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if *seedFlag != 0 {
		var trace bytes.Buffer
		r, err := Run(cfg, *seedFlag, &trace, ref)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile("sim-trace.txt", trace.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if r.Violation != nil {
			t.Fatalf("seed %d: %v", *seedFlag, r.Violation)
		}
		return
	}
	n := *seedsFlag
	if testing.Short() {
		n /= 5
	}
	faults, finished, stalled, diff := 0, 0, 0, 0.0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		r, err := Run(cfg, seed, nil, ref)
		if err != nil {
			t.Fatal(err)
		}
		if r.Violation != nil {
			t.Fatalf("seed %d: %v (replay: go test ./sim -run TestSeeds -seed=%d)", seed, r.Violation, seed)
		}
		faults += r.Faults
		diff = max(diff, r.LossDiff)
		switch {
		case r.Outcome == "finished":
			finished++
		case strings.HasPrefix(r.Outcome, "stalled"):
			stalled++
		}
	}
	t.Logf("%d seeds, %d faults, %d finished, %d stalled without a quorum (the others lost every replica: an expected permanent failure); largest relative loss difference from the fault-free run %.2g", n, faults, finished, stalled, diff)
	// Schedules so harsh that every job loses its state would check little.
	if finished < n/2 {
		t.Errorf("only %d of %d seeds finished training", finished, n)
	}
	if faults < 10*n {
		t.Errorf("%d faults over %d seeds: the schedules are too mild to test anything", faults, n)
	}
}

// TestSameSeedSameTrace: a seed's run is one total order of events, so
// its trace is the same bytes every time.
func TestSameSeedSameTrace(t *testing.T) {
	cfg := DefaultConfig()
	var a, b bytes.Buffer
	ra, err := Run(cfg, 42, &a, nil)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := Run(cfg, 42, &b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) || ra != rb {
		t.Fatalf("two runs of seed 42 differ: %d and %d trace bytes, results %+v and %+v", a.Len(), b.Len(), ra, rb)
	}
	if ra.Faults == 0 || a.Len() < 1000 {
		t.Fatalf("seed 42 ran %d faults, %d trace bytes: nothing to compare", ra.Faults, a.Len())
	}
	var c bytes.Buffer
	if _, err := Run(cfg, 43, &c, nil); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a.Bytes(), c.Bytes()) {
		t.Fatal("seeds 42 and 43 gave the same trace: the seed does not drive the schedule")
	}
}

// TestFindsNoPrepareBug brings back the rendezvous without a prepare round
// (simbug.NoPrepare): the simulator must find two worlds for one
// generation within 300 seeds, and the failing seed must replay to the same
// violation.
func TestFindsNoPrepareBug(t *testing.T) {
	simbug.NoPrepare = true
	defer func() { simbug.NoPrepare = false }()
	cfg := DefaultConfig()
	for seed := uint64(1); seed <= 300; seed++ {
		r, err := Run(cfg, seed, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Violation == nil || r.Violation.Invariant != InvOneWorld {
			continue
		}
		t.Logf("seed %d: %v", seed, r.Violation)
		again, err := Run(cfg, seed, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if again.Violation == nil || *again.Violation != *r.Violation {
			t.Fatalf("seed %d replayed to %v, first %v", seed, again.Violation, r.Violation)
		}
		return
	}
	t.Fatal("no seed of 300 found two worlds for one generation with the prepare round removed")
}

// TestGradientFiniteDifferences checks the model's hand-written gradient
// against central differences in float64 (float32 forward passes would
// leave errors of 1e-3 relative at a step of 1e-3; in float64 the
// agreement is 1e-6 relative, so the tolerance is 1e-4).
func TestGradientFiniteDifferences(t *testing.T) {
	d := newDataset(16)
	p := initParams()
	idx := []int{0, 3, 5, 9, 15}
	g := make([]float32, nParams)
	d.gradient(p, idx, 1/float32(len(idx)), g)
	loss := func(q []float32) float64 {
		var l float64
		for _, i := range idx {
			out := float64(q[nParams-1])
			for k := range hidden {
				z := float64(q[hidden*inputs+k])
				for j := range inputs {
					z += float64(q[k*inputs+j]) * float64(d.x[i][j])
				}
				out += float64(q[hidden*inputs+hidden+k]) * math.Tanh(z)
			}
			e := out - float64(d.y[i])
			l += 0.5 * e * e / float64(len(idx))
		}
		return l
	}
	const h = 1e-3
	for i := range nParams {
		q := append([]float32(nil), p...)
		q[i] = p[i] + h
		up := loss(q)
		q[i] = p[i] - h
		down := loss(q)
		// the perturbed parameter is float32: use the step it really took
		num := (up - down) / (float64(p[i]+h) - float64(p[i]-h))
		if diff := math.Abs(num - float64(g[i])); diff > 1e-4*max(1, math.Abs(num)) {
			t.Errorf("parameter %d: gradient %g, finite differences %g", i, g[i], num)
		}
	}
}

// TestConfigValidate: a bad configuration names its field.
func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.Nodes = 0 }, "nodes"},
		{func(c *Config) { c.Batch = 100 }, "batch"},
		{func(c *Config) { c.Faults = -1 }, "fault rate"},
		{func(c *Config) { c.MinNodes = 9 }, "min nodes"},
		{func(c *Config) { c.Steps = 0 }, "steps"},
	} {
		cfg := DefaultConfig()
		c.mut(&cfg)
		if _, err := Run(cfg, 1, nil, nil); err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("%+v: error %v, want one naming %q", cfg, err, c.want)
		}
	}
}

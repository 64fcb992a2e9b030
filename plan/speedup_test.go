package plan

import (
	"errors"
	"math"
	"testing"
)

func TestSpeedup(t *testing.T) {
	cases := []struct {
		name                  string
		cfg                   SpeedupConfig
		step, serial, speedup float64
	}{
		// 8 ranks, 100 ms compute, 25 ms comm, nothing hidden: 800/125 = 6.4.
		{"no overlap", SpeedupConfig{Ranks: 8, ComputeMs: 100, CommMs: 25}, 125, 800, 6.4},
		// Half hidden: 112.5 ms steps, 800/112.5 = 7.111…
		{"half overlap", SpeedupConfig{Ranks: 8, ComputeMs: 100, CommMs: 25, Overlap: 0.5}, 112.5, 800, 800 / 112.5},
		// All hidden: linear speedup.
		{"full overlap", SpeedupConfig{Ranks: 8, ComputeMs: 100, CommMs: 25, Overlap: 1}, 100, 800, 8},
		{"one rank", SpeedupConfig{Ranks: 1, ComputeMs: 50}, 50, 50, 1},
		// Communication longer than compute: slower than one device.
		{"comm bound", SpeedupConfig{Ranks: 2, ComputeMs: 10, CommMs: 30}, 40, 20, 0.5},
		// The same in rounds of 10 steps (local SGD, DiLoCo): 10 + 30/10.
		{"rounds", SpeedupConfig{Ranks: 2, ComputeMs: 10, CommMs: 30, SyncEvery: 10}, 13, 20, 20.0 / 13},
		// A round of one step is every step.
		{"round of one", SpeedupConfig{Ranks: 8, ComputeMs: 100, CommMs: 25, Overlap: 0.5, SyncEvery: 1}, 112.5, 800, 800 / 112.5},
	}
	for _, c := range cases {
		r, err := Speedup(c.cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		// Exact: every figure is one or two float operations on the same
		// inputs as the expected value's.
		if r.StepMs != c.step || r.SerialMs != c.serial || r.Speedup != c.speedup || r.Efficiency != c.speedup/float64(c.cfg.Ranks) {
			t.Errorf("%s: %+v; want step %v serial %v speedup %v", c.name, r, c.step, c.serial, c.speedup)
		}
	}
}

func TestCommMsFromBytes(t *testing.T) {
	// 8 GB over 4 ranks at 25 GB/s: 12 GB / 25 GB/s = 480 ms.
	c, err := CommMsFromBytes(8e9, 4, 25e9)
	if err != nil {
		t.Fatal(err)
	}
	// 0.48 s × 1e3 is not exactly 480 in binary floating point; one ulp.
	if math.Abs(c-480) > 1e-9 {
		t.Errorf("comm = %v ms, want 480", c)
	}
	if _, err := CommMsFromBytes(8e9, 4, 0); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("zero bandwidth: %v", err)
	}
	if _, err := CommMsFromBytes(8e9, 0, 1); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("zero ranks: %v", err)
	}
}

func TestSpeedupInvalid(t *testing.T) {
	for _, cfg := range []SpeedupConfig{
		{Ranks: 0, ComputeMs: 1},
		{Ranks: 2, ComputeMs: 0},
		{Ranks: 2, ComputeMs: -1},
		{Ranks: 2, ComputeMs: math.NaN()},
		{Ranks: 2, ComputeMs: math.Inf(1)},
		{Ranks: 2, ComputeMs: 1, CommMs: -1},
		{Ranks: 2, ComputeMs: 1, CommMs: math.NaN()},
		{Ranks: 2, ComputeMs: 1, Overlap: 1.5},
		{Ranks: 2, ComputeMs: 1, Overlap: -0.1},
		{Ranks: 2, ComputeMs: 1, Overlap: math.NaN()},
		{Ranks: 2, ComputeMs: 1, SyncEvery: -1},
		{Ranks: 2, ComputeMs: 1, SyncEvery: 4, Overlap: 0.5},
	} {
		if _, err := Speedup(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Speedup(%+v) error = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

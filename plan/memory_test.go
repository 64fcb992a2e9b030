package plan

import (
	"errors"
	"testing"
)

// Byte counts are whole numbers below 2^53 and are compared exactly.

func TestMemory(t *testing.T) {
	cases := []struct {
		name       string
		cfg        MemoryConfig
		total      float64
		minDevices int64
	}{
		// The case: 1.5B parameters at 16 bytes is 24 GB.
		{"1.5B on 80GB", MemoryConfig{Params: 1_500_000_000, BytesPerParam: 16, DeviceMem: 80e9}, 24e9, 1},
		{"1.5B on 16GB", MemoryConfig{Params: 1_500_000_000, BytesPerParam: 16, DeviceMem: 16e9}, 24e9, 2},
		// An exact multiple needs exactly that many devices, not one more.
		{"exact fit", MemoryConfig{Params: 1_500_000_000, BytesPerParam: 16, DeviceMem: 8e9}, 24e9, 3},
		{"one byte over", MemoryConfig{Params: 1_500_000_000, BytesPerParam: 16, DeviceMem: 8e9 - 1}, 24e9, 4},
		// 175B (GPT-3) at 16 bytes = 2.8 TB over 80 GB devices: 35.
		{"GPT-3 on 80GB", MemoryConfig{Params: 175_000_000_000, BytesPerParam: 16, DeviceMem: 80e9}, 2.8e12, 35},
		// Quantised states: 0.5 bytes per parameter rounds up to whole bytes.
		{"fractional bytes", MemoryConfig{Params: 3, BytesPerParam: 0.5, DeviceMem: 1}, 2, 2},
		{"no device", MemoryConfig{Params: 7_000_000_000, BytesPerParam: 2}, 14e9, 0},
		{"tiny", MemoryConfig{Params: 1, BytesPerParam: 16, DeviceMem: 80e9}, 16, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := Memory(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.TotalBytes != c.total || r.MinDevices != c.minDevices {
				t.Errorf("total %v, min devices %d; want %v, %d", r.TotalBytes, r.MinDevices, c.total, c.minDevices)
			}
			if r.DeviceMemBytes != c.cfg.DeviceMem {
				t.Errorf("device mem %d, want %d", r.DeviceMemBytes, c.cfg.DeviceMem)
			}
		})
	}
}

func TestMemoryDefault(t *testing.T) {
	r, err := Memory(DefaultMemoryConfig(1000))
	if err != nil {
		t.Fatal(err)
	}
	if r.BytesPerParam != 16 || r.TotalBytes != 16000 {
		t.Errorf("default = %+v, want 16 bytes per parameter", r)
	}
}

func TestMemoryInvalid(t *testing.T) {
	for _, cfg := range []MemoryConfig{
		{Params: 0, BytesPerParam: 16},
		{Params: -5, BytesPerParam: 16},
		{Params: 10, BytesPerParam: 0},
		{Params: 10, BytesPerParam: -2},
		{Params: 10, BytesPerParam: 16, DeviceMem: -1},
		{Params: 1 << 62, BytesPerParam: 1e300},
	} {
		if _, err := Memory(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Memory(%+v) error = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

func TestZeRO(t *testing.T) {
	const n = 1_500_000_000
	cases := []struct {
		stage, dp       int
		w, g, o, perDev float64
	}{
		// Stage 0 is plain DDP: all 16 bytes on every device.
		{0, 8, 2 * n, 2 * n, 12 * n, 16 * n},
		// Stage 1: (2 + 2 + 12/8)·N = 5.5·N.
		{1, 8, 2 * n, 2 * n, 1.5 * n, 5.5 * n},
		// Stage 2: (2 + 14/8)·N = 3.75·N.
		{2, 8, 2 * n, 0.25 * n, 1.5 * n, 3.75 * n},
		// Stage 3: 16·N/8 = 2·N, the case: 16 bytes divided by 8.
		{3, 8, 0.25 * n, 0.25 * n, 1.5 * n, 2 * n},
		// Over one device every stage is stage 0.
		{3, 1, 2 * n, 2 * n, 12 * n, 16 * n},
	}
	for _, c := range cases {
		r, err := ZeRO(DefaultZeROConfig(n, c.stage, c.dp))
		if err != nil {
			t.Fatal(err)
		}
		if r.WeightBytes != c.w || r.GradientBytes != c.g || r.OptimizerBytes != c.o || r.PerDeviceBytes != c.perDev {
			t.Errorf("stage %d dp %d: w %v g %v o %v per device %v; want %v %v %v %v",
				c.stage, c.dp, r.WeightBytes, r.GradientBytes, r.OptimizerBytes, r.PerDeviceBytes, c.w, c.g, c.o, c.perDev)
		}
		if r.TotalBytes != 16*n || r.BytesPerParam != 16 || r.Fits != nil {
			t.Errorf("stage %d: total %v bytes/param %v fits %v; want 24e9, 16, absent", c.stage, r.TotalBytes, r.BytesPerParam, r.Fits)
		}
	}
}

// TestZeROPaperFigure1 reproduces the ZeRO paper's Figure 1 (Rajbhandari
// et al., 2020): 7.5B parameters, K = 12, 64 devices: 120 GB per device
// for the baseline, 31.4 GB with P_os, 16.6 GB with P_os+g, 1.88 GB with
// P_os+g+p. 64 divides 7.5e9, so the figures are exact.
func TestZeROPaperFigure1(t *testing.T) {
	want := []float64{120e9, 31.40625e9, 16.640625e9, 1.875e9}
	for stage, w := range want {
		r, err := ZeRO(DefaultZeROConfig(7_500_000_000, stage, 64))
		if err != nil {
			t.Fatal(err)
		}
		if r.PerDeviceBytes != w {
			t.Errorf("stage %d: %v bytes per device, want %v", stage, r.PerDeviceBytes, w)
		}
	}
}

func TestZeROFitsAndUnevenShards(t *testing.T) {
	// 3.0 GB per device at stage 3 over 8 fits 80 GB and fits exactly 3 GB,
	// but not one byte less.
	for _, c := range []struct {
		mem  int64
		fits bool
	}{{80e9, true}, {3e9, true}, {3e9 - 1, false}} {
		cfg := DefaultZeROConfig(1_500_000_000, 3, 8)
		cfg.DeviceMem = c.mem
		r, err := ZeRO(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r.Fits == nil || *r.Fits != c.fits || r.DeviceMemBytes != c.mem {
			t.Errorf("mem %d: fits %v, want %v", c.mem, r.Fits, c.fits)
		}
	}
	// 10 parameters over 4 devices: the largest shard has 3, so stage 3
	// holds 16·3 = 48 bytes, not 16·2.5 = 40.
	r, err := ZeRO(DefaultZeROConfig(10, 3, 4))
	if err != nil {
		t.Fatal(err)
	}
	if r.PerDeviceBytes != 48 {
		t.Errorf("uneven shard: %v bytes, want 48", r.PerDeviceBytes)
	}
	// A custom K (8-bit Adam states + fp32 master: 6) and a fractional one.
	cfg := DefaultZeROConfig(100, 1, 4)
	cfg.K = 6
	if r, _ := ZeRO(cfg); r.PerDeviceBytes != 400+6*25 || r.BytesPerParam != 10 {
		t.Errorf("K=6: %+v, want 550 bytes per device and 10 bytes/param", r)
	}
	cfg.K = 0.1 // 0.1·25 = 2.5 rounds up to 3 bytes
	if r, _ := ZeRO(cfg); r.OptimizerBytes != 3 {
		t.Errorf("K=0.1: optimizer bytes %v, want 3", r.OptimizerBytes)
	}
}

func TestZeROInvalid(t *testing.T) {
	base := DefaultZeROConfig(1000, 2, 4)
	for name, mut := range map[string]func(*ZeROConfig){
		"stage 4":  func(c *ZeROConfig) { c.Stage = 4 },
		"stage -1": func(c *ZeROConfig) { c.Stage = -1 },
		"dp 0":     func(c *ZeROConfig) { c.DP = 0 },
		"params 0": func(c *ZeROConfig) { c.Params = 0 },
		"K < 0":    func(c *ZeROConfig) { c.K = -1 },
		"mem < 0":  func(c *ZeROConfig) { c.DeviceMem = -1 },
		"overflow": func(c *ZeROConfig) { c.Params = 1 << 62; c.K = 1e300 },
	} {
		cfg := base
		mut(&cfg)
		if _, err := ZeRO(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: error = %v, want ErrInvalidConfig", name, err)
		}
	}
}

package train

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/failure"
	_ "github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/safetensors"
)

func tinyGPT() Config {
	c := DefaultConfig()
	c.Data = "synthetic-tokens:vocab=13,n=64,test=16"
	c.Context = 8
	c.SetModelArg("d-model", 16)
	c.SetModelArg("n-layers", 1)
	c.SetModelArg("n-heads", 2)
	c.Batch, c.Steps, c.Warmup = 4, 6, 2
	return c
}

func tinyMLP() Config {
	c := mlpDefaults()
	c.Data = "synthetic-mlp:features=12,classes=3,n=64,test=16"
	c.SetModelArg("layers", []int{12, 8, 3})
	c.Batch, c.Steps, c.Epochs = 8, 5, 0
	return c
}

func readMetrics(t *testing.T, path string) []StepMetrics {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []StepMetrics
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m StepMetrics
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("metrics line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestRunWritesOneMetricsLinePerStep(t *testing.T) {
	for name, cfg := range map[string]Config{"gpt": tinyGPT(), "mlp": tinyMLP()} {
		t.Run(name, func(t *testing.T) {
			cfg.MetricsOut = filepath.Join(t.TempDir(), "m.jsonl")
			sum, err := Run(context.Background(), cfg, Options{})
			if err != nil {
				t.Fatal(err)
			}
			ms := readMetrics(t, cfg.MetricsOut)
			if len(ms) != cfg.Steps {
				t.Fatalf("%d metrics lines, want %d", len(ms), cfg.Steps)
			}
			for i, m := range ms {
				if m.Step != i+1 || m.Loss <= 0 || m.LR <= 0 || m.SamplesPerS <= 0 || m.StepMs <= 0 || m.World != 1 {
					t.Errorf("line %d: %+v", i, m)
				}
				if (name == "gpt") != (m.TokensPerS > 0) {
					t.Errorf("line %d: tokens_per_s %v for %s", i, m.TokensPerS, name)
				}
			}
			if sum.FinalLoss != ms[len(ms)-1].Loss || sum.FirstLoss != ms[0].Loss {
				t.Errorf("summary losses %v→%v disagree with metrics %v→%v", sum.FirstLoss, sum.FinalLoss, ms[0].Loss, ms[len(ms)-1].Loss)
			}
			if sum.EvalLoss <= 0 {
				t.Errorf("no held-out loss in the summary: %+v", sum)
			}
		})
	}
}

func TestSameSeedSameLosses(t *testing.T) {
	run := func() []StepMetrics {
		cfg := tinyGPT()
		cfg.MetricsOut = filepath.Join(t.TempDir(), "m.jsonl")
		if _, err := Run(context.Background(), cfg, Options{}); err != nil {
			t.Fatal(err)
		}
		return readMetrics(t, cfg.MetricsOut)
	}
	a, b := run(), run()
	for i := range a {
		if a[i].Loss != b[i].Loss {
			t.Fatalf("step %d: loss %v then %v: runs are not reproducible", i+1, a[i].Loss, b[i].Loss)
		}
	}
}

// Gradient accumulation over K micro-batches is the same optimizer step as
// one pass over the whole batch: the losses may differ only by float32
// summation order (1e-5 relative).
func TestAccumulationMatchesWholeBatch(t *testing.T) {
	losses := func(accum int) []StepMetrics {
		cfg := tinyMLP()
		cfg.Accum = accum
		cfg.MetricsOut = filepath.Join(t.TempDir(), "m.jsonl")
		if _, err := Run(context.Background(), cfg, Options{}); err != nil {
			t.Fatal(err)
		}
		return readMetrics(t, cfg.MetricsOut)
	}
	a, b := losses(1), losses(4)
	for i := range a {
		if d := a[i].Loss - b[i].Loss; d > 1e-5*a[i].Loss || -d > 1e-5*a[i].Loss {
			t.Errorf("step %d: loss %v without accumulation, %v with 4 micro-steps", i+1, a[i].Loss, b[i].Loss)
		}
	}
}

func TestSaveThenInitRestoresWeights(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyGPT()
	cfg.Save = filepath.Join(dir, "w.safetensors")
	if _, err := Run(context.Background(), cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(cfg.Save)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, shape, err := f.Float32("blocks.0.qkv.weight"); err != nil || shape[0] != 48 || shape[1] != 16 {
		t.Fatalf("blocks.0.qkv.weight: shape %v, err %v; want [48 16] (PyTorch's [out, in])", shape, err)
	}
	// Loading the saved weights and evaluating gives the saved model's loss.
	c2 := tinyGPT()
	c2.Init, c2.Seed = cfg.Save, 99
	be, trainSet, _ := openForTest(t, &c2)
	m, err := BuildModel(&c2, be, trainSet)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Set.Params() {
		want, _, err := f.Float32(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		got := m.Set.StateDict()[p.Name]
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s[%d] = %v after --init, saved %v", p.Name, i, got[i], want[i])
			}
		}
	}
}

func TestBadInputFailsClearly(t *testing.T) {
	dir := t.TempDir()
	wrong := filepath.Join(dir, "wrong.safetensors")
	if err := safetensors.WriteFile(wrong, []safetensors.Tensor{safetensors.NewF32("fc1.weight", []int{8, 11}, make([]float32, 88))}, nil); err != nil {
		t.Fatal(err)
	}
	corrupt := filepath.Join(dir, "corrupt.safetensors")
	if err := os.WriteFile(corrupt, []byte("\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": not json}"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"missing data file", func(c *Config) { c.Data = filepath.Join(dir, "nope.txt") }, "nope.txt"},
		{"init with a wrong shape", func(c *Config) { c.Init = wrong }, "fc1.weight"},
		{"init with a corrupt header", func(c *Config) { c.Init = corrupt }, "corrupt.safetensors"},
		{"missing init file", func(c *Config) { c.Init = filepath.Join(dir, "absent.safetensors") }, "absent.safetensors"},
		{"save into a missing directory", func(c *Config) { c.Save = filepath.Join(dir, "no", "w.safetensors") }, "w.safetensors"},
		{"metrics into a missing directory", func(c *Config) { c.MetricsOut = filepath.Join(dir, "no", "m.jsonl") }, "m.jsonl"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyMLP()
			tc.edit(&cfg)
			_, err := Run(context.Background(), cfg, Options{})
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %q", err, tc.want)
			}
			if failure.Transient(err) {
				t.Errorf("error %q is transient", err)
			}
		})
	}
	// Settings that cannot work are refused before anything runs, naming
	// the field.
	fields := []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"layers not fitting the data", func(c *Config) { c.SetModelArg("layers", []int{10, 3}) }, "Model"},
		{"zero batch", func(c *Config) { c.Batch = 0 }, "Batch"},
		{"unknown optimizer", func(c *Config) { c.Optim.Name = "lion" }, "Optim"},
		{"batch not divisible by accum", func(c *Config) { c.Accum = 3 }, "Batch"},
		{"unknown partition", func(c *Config) { c.PP, c.MicroBatches, c.Partition = 2, 2, "luck" }, "Partition"},
		{"micro-batches without a pipeline", func(c *Config) { c.MicroBatches = 4 }, "MicroBatches"},
		{"negative replicas", func(c *Config) { c.DP = -2 }, "DP"},
		{"procs without a worker command", func(c *Config) { c.Procs = 2 }, "Procs"},
		{"tp that does not divide a cut layer", func(c *Config) { c.SetModelArg("layers", []int{12, 6, 3}); c.TP = 4 }, "TP"},
		{"tp that does not divide the default layers", func(c *Config) { c.TP = 3 }, "TP"},
		{"sequence parallelism of the mlp", func(c *Config) { c.TP, c.SequenceParallel = 2, true }, "SequenceParallel"},
		{"an option the model does not have", func(c *Config) { c.SetModelArg("d-model", 64) }, "ModelArgs"},
		{"an option value of the wrong kind", func(c *Config) { c.SetModelArg("layers", "12,x,3") }, "ModelArgs"},
		{"an unregistered model", func(c *Config) { c.Model = "resnet" }, "Model"},
		{"sequence parallelism without tp", func(c *Config) { c.SequenceParallel = true }, "SequenceParallel"},
		{"procs not a multiple of pp × tp", func(c *Config) { c.Procs, c.TP = 3, 2 }, "Procs"},
		{"unknown transport", func(c *Config) { c.Transport = "pigeon" }, "Transport"},
		{"unknown all-reduce algorithm", func(c *Config) { c.AllReduceAlgo = "tree" }, "AllReduceAlgo"},
	}
	for _, tc := range fields {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyMLP()
			tc.edit(&cfg)
			_, err := Run(context.Background(), cfg, Options{})
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, ErrConfig) {
				t.Errorf("%v, want a config error naming %s", err, tc.field)
			}
		})
	}
}

func TestCancelledContextStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, tinyMLP(), Options{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

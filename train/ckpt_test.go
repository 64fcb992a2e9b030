package train

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/failure"
)

// A run stopped after step k and resumed with --resume gives per-step
// losses bit-identical to an uninterrupted run of the same world: weights,
// optimizer moments and step count, the LR schedule's position and the
// sampler's cursor all come back exactly.
func TestResumeIsBitIdentical(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dp, pp int
	}{{"dp1", 1, 1}, {"dp2", 2, 1}, {"pp2", 1, 2}} {
		for model, base := range map[string]Config{"gpt": tinyGPT(), "mlp": tinyMLP()} {
			t.Run(tc.name+"/"+model, func(t *testing.T) {
				base.Steps, base.Batch, base.DP, base.PP = 12, 8, tc.dp, tc.pp
				if tc.pp > 1 {
					base.MicroBatches = 2
				}
				whole := losses(t, base)

				cfg := base
				cfg.CkptDir, cfg.CkptEvery = t.TempDir(), 4
				cfg.MetricsOut = filepath.Join(t.TempDir(), "first.jsonl")
				if _, err := Run(context.Background(), cfg, Options{StopAfter: 6}); err != nil {
					t.Fatal(err)
				}
				if got, err := checkpoint.Latest(checkpoint.OSFS{}, cfg.CkptDir); err != nil || got != 4 {
					t.Fatalf("latest checkpoint %d (%v), want step 4", got, err)
				}
				cfg.Resume = true
				cfg.MetricsOut = filepath.Join(t.TempDir(), "resumed.jsonl")
				sum, err := Run(context.Background(), cfg, Options{})
				if err != nil {
					t.Fatal(err)
				}
				if sum.StartStep != 4 {
					t.Fatalf("resumed at step %d, want 4", sum.StartStep)
				}
				resumed := readMetrics(t, cfg.MetricsOut)
				if len(resumed) != 8 {
					t.Fatalf("resumed run logged %d steps, want steps 5-12", len(resumed))
				}
				for _, m := range resumed {
					if m.Loss != whole[m.Step-1] {
						t.Errorf("step %d: resumed loss %v, uninterrupted %v (must be bit-identical)", m.Step, m.Loss, whole[m.Step-1])
					}
				}
			})
		}
	}
}

// A checkpoint written by one world loads into another (2 replicas into a
// 2-stage pipeline and back): the next steps match the run that never
// changed world, within the float32 tolerance of a different summation
// order.
func TestResumeIntoAnotherWorld(t *testing.T) {
	base := tinyGPT()
	base.Steps, base.Batch = 8, 8
	base.SetModelArg("n-layers", 2)
	ref := losses(t, base)
	dir := t.TempDir()
	cfg := base
	cfg.DP, cfg.CkptDir, cfg.CkptEvery = 2, dir, 4
	if _, err := Run(context.Background(), cfg, Options{StopAfter: 4}); err != nil {
		t.Fatal(err)
	}
	cfg = base
	cfg.PP, cfg.MicroBatches, cfg.CkptDir, cfg.Resume = 2, 2, dir, true
	cfg.MetricsOut = filepath.Join(t.TempDir(), "m.jsonl")
	if _, err := Run(context.Background(), cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, m := range readMetrics(t, cfg.MetricsOut) {
		if d := m.Loss - ref[m.Step-1]; d > 1e-4*ref[m.Step-1] || -d > 1e-4*ref[m.Step-1] {
			t.Errorf("step %d: loss %v after resharding dp2 → pp2, %v without", m.Step, m.Loss, ref[m.Step-1])
		}
	}
}

func TestResumeWithoutCheckpointStartsFromScratch(t *testing.T) {
	cfg := tinyMLP()
	cfg.CkptDir, cfg.Resume = t.TempDir(), true
	sum, err := Run(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.StartStep != 0 || sum.Steps != cfg.Steps {
		t.Fatalf("start %d of %d, want a whole run from 0", sum.StartStep, sum.Steps)
	}
	_ = fmt.Sprint()
}

// diskFullAt is a checkpoint file system whose disk is full for the
// checkpoint of one step: every file of it fails to be created.
type diskFullAt struct {
	checkpoint.FS
	step int64
}

func (d diskFullAt) Create(name string) (checkpoint.File, error) {
	if strings.Contains(name, checkpoint.StepDirName(d.step)) {
		return nil, &fs.PathError{Op: "create", Path: name, Err: syscall.ENOSPC}
	}
	return d.FS.Create(name)
}

// A checkpoint that cannot be written ends the run with an output failure
// naming it, after the weights of the last step were written to Save, as an
// interrupt would; the checkpoint before it stays the latest.
func TestCheckpointWriteFailureSavesTheWeights(t *testing.T) {
	cfg := tinyMLP()
	cfg.Steps, cfg.CkptEvery = 8, 2
	cfg.CkptDir = t.TempDir()
	cfg.Save = filepath.Join(t.TempDir(), "w.safetensors")
	sum, err := Run(context.Background(), cfg, Options{ckptFS: diskFullAt{checkpoint.OSFS{}, 4}})
	if err == nil {
		t.Fatal("the run succeeded with a full disk")
	}
	if !errors.Is(err, checkpoint.ErrWrite) || failure.CodeOf(err) != failure.Output || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("error %v (class %v), want checkpoint.ErrWrite of class output naming the cause", err, failure.CodeOf(err))
	}
	// The write of step 4 runs in the background; its failure is taken by
	// the next checkpoint's Save, after step 6.
	if sum == nil || sum.Saved != cfg.Save || sum.SavedStep != 6 || sum.Steps != 6 {
		t.Fatalf("summary %+v, want the weights of step 6 saved", sum)
	}
	if got, err := checkpoint.Latest(checkpoint.OSFS{}, cfg.CkptDir); err != nil || got != 2 {
		t.Fatalf("latest checkpoint %d (%v), want step 2", got, err)
	}
	// The weights are those of an uninterrupted run stopped after step 6.
	ref := cfg
	ref.CkptDir, ref.CkptEvery = "", 0
	ref.Save = filepath.Join(t.TempDir(), "ref.safetensors")
	if _, err := Run(context.Background(), ref, Options{StopAfter: 6}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(cfg.Save)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(ref.Save)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the saved weights differ from those of a run stopped after step 6")
	}
}

func TestResumeRequiredWithoutCheckpointFails(t *testing.T) {
	cfg := tinyMLP()
	cfg.CkptDir, cfg.Resume, cfg.ResumeRequired = t.TempDir(), true, true
	stepped := false
	_, err := Run(context.Background(), cfg, Options{OnStep: func(StepMetrics) { stepped = true }})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "ResumeRequired" || !errors.Is(err, checkpoint.ErrNoCheckpoint) {
		t.Fatalf("error %v, want a FieldError of ResumeRequired wrapping checkpoint.ErrNoCheckpoint", err)
	}
	if stepped {
		t.Fatal("a step ran")
	}
	cfg.Resume = false
	if err := cfg.Validate(); err == nil {
		t.Fatal("ResumeRequired without Resume validated")
	}
}

// Every output is probed before the first step; the error names its field.
func TestOutputsProbedBeforeTraining(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field string
		set   func(*Config)
		say   string
	}{
		{"Save", func(c *Config) { c.Save = filepath.Join(dir, "missing", "w.safetensors") }, "does not exist"},
		{"MetricsOut", func(c *Config) { c.MetricsOut = filepath.Join(file, "m.jsonl") }, "is not a directory"},
		{"CkptDir", func(c *Config) { c.CkptDir, c.CkptEvery = file, 2 }, "is a file, not a directory"},
		{"DumpDir", func(c *Config) { c.DumpDir = filepath.Join(file, "dumps") }, "cannot make the directory"},
		{"Trace", func(c *Config) { c.Trace, c.PP, c.MicroBatches = dir, 2, 2 }, "is a directory"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			cfg := tinyMLP()
			tc.set(&cfg)
			stepped := false
			_, err := Run(context.Background(), cfg, Options{OnStep: func(StepMetrics) { stepped = true }})
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, ErrOutput) || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("error %v, want an output FieldError of %s saying %q", err, tc.field, tc.say)
			}
			if stepped {
				t.Fatal("a step ran before the output was refused")
			}
		})
	}
}

// A resumed run takes the model, data and training options its checkpoint
// recorded; a model or data option set to another value is refused, naming
// it.
func TestFromCheckpoint(t *testing.T) {
	first := tinyMLP()
	first.Steps, first.CkptEvery, first.CkptDir = 4, 2, t.TempDir()
	first.LR = 0.02
	if _, err := Run(context.Background(), first, Options{}); err != nil {
		t.Fatal(err)
	}
	unset := func(string) bool { return false }

	cfg := DefaultConfig() // the GPT's: every model field differs
	cfg.CkptDir, cfg.Resume = first.CkptDir, true
	step, err := cfg.FromCheckpoint(unset)
	if err != nil || step != 4 {
		t.Fatalf("FromCheckpoint: step %d, %v", step, err)
	}
	if cfg.Model != "mlp" || cfg.Data != first.Data || !maps.Equal(cfg.ModelArgs, first.ModelArgs) || cfg.LR != first.LR || cfg.Optim != first.Optim || cfg.Batch != first.Batch {
		t.Fatalf("config after FromCheckpoint: %+v", cfg)
	}

	cfg = DefaultConfig()
	cfg.CkptDir, cfg.Resume = first.CkptDir, true
	cfg.Model, cfg.Data, cfg.LR = "mlp", "synthetic-mlp:features=12,classes=3,n=64,test=17", 0.5
	cfg.SetModelArg("layers", []int{12, 4, 3})
	setFields := map[string]bool{"Model": true, "ModelArgs": true, "Data": true, "LR": true}
	_, err = cfg.FromCheckpoint(func(f string) bool { return setFields[f] })
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "Data" || !strings.Contains(err.Error(), "ModelArgs.layers 12,4,3") {
		t.Fatalf("conflicting model and data: %v", err)
	}
	if strings.Contains(err.Error(), "LR") {
		t.Fatalf("the learning rate, which a resumed run may change, is named: %v", err)
	}

	cfg = DefaultConfig()
	cfg.CkptDir, cfg.Resume = t.TempDir(), true
	if step, err := cfg.FromCheckpoint(unset); err != nil || step != -1 || cfg.Model != "gpt" {
		t.Fatalf("no checkpoint: step %d, %v, model %s; want the config unchanged", step, err, cfg.Model)
	}
}

func TestStepsAndEpochsAreOneChoice(t *testing.T) {
	cfg := mlpDefaults()
	cfg.Steps = 300
	var fe *FieldError
	if err := cfg.Validate(); !errors.As(err, &fe) || fe.Field != "Steps" {
		t.Fatalf("Steps and Epochs both set: %v", err)
	}
}

// A checkpoint's recorded configuration is outside bytes (a manifest
// written by any version, or by hand): taking it into a resumed run's
// configuration returns an error or a configuration, never a panic.
func FuzzTakeRecordedConfig(f *testing.F) {
	good, _ := json.Marshal(tinyMLP())
	for _, s := range []string{string(good), `{}`, `{"Model":"gpt","ModelArgs":{"d-model":"-3"}}`, `{"Model":"mlp","ModelArgs":{"layers":"1,2"}}`, `{"ModelArgs":{"nope":"1"}}`, `{"Optim":{"Name":7}}`, `null`, `[`} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, conf []byte, setAll bool) {
		var saved Config
		if json.Unmarshal(conf, &saved) != nil {
			return
		}
		cfg := DefaultConfig()
		_ = cfg.takeRecorded(saved, func(string) bool { return setAll }, "the fuzzed checkpoint's")
	})
}

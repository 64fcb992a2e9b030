package cli

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/models"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/safetensors"
)

// ckptDir saves steps 1 and 2 of a tiny GPT with AdamW as 2 data-parallel
// ranks and returns the directory and the model.
func ckptDir(t *testing.T) (string, *nn.Model) {
	t.Helper()
	be, err := kernels.Open("cpu", kernels.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	m, err := models.NewGPT(be, models.GPT{Vocab: 7, Context: 4, DModel: 8, Layers: 1, Heads: 2}, 3)
	if err != nil {
		t.Fatal(err)
	}
	opt, _ := optim.New(m.Set, optim.DefaultConfig("adamw"))
	dir := filepath.Join(t.TempDir(), "ckpt")
	for step := int64(1); step <= 2; step++ {
		opt.SetSteps(int(step))
		s := &checkpoint.Snapshot{Meta: checkpoint.Meta{Step: step, World: checkpoint.World{DP: 2, PP: 1},
			Sampler: &data.SamplerState{N: 100, Seed: 1, Shuffle: true, Cursor: data.Cursor(8 * step)}}}
		if err := s.AddModel(0, m.Set, opt); err != nil {
			t.Fatal(err)
		}
		if _, err := checkpoint.Save(checkpoint.OSFS{}, dir, s, 0); err != nil {
			t.Fatal(err)
		}
	}
	return dir, m
}

func TestCkptInspect(t *testing.T) {
	dir, m := ckptDir(t)
	out, err := execute(newCkptCmd(), "inspect", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"2 checkpoint(s), latest step-000002", "step-000001", "dp=2 pp=1",
		"cursor 16", "adamw after 2 steps", "shard-00001-of-00002.safetensors", "latest"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = execute(newCkptCmd(), "inspect", dir, "--json", "--step", "1")
	if err != nil {
		t.Fatal(err)
	}
	var rep checkpoint.DirReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if !rep.OK || rep.Latest != 2 || len(rep.Checkpoints) != 2 || rep.Checkpoints[1].Params != int64(m.Set.Len()) ||
		!rep.Checkpoints[0].Verified || len(rep.Checkpoints[0].Files) != 2 {
		t.Fatalf("report %+v", rep)
	}

	// Damage a data byte of step 1: inspect fails and names the file.
	shard := filepath.Join(dir, "step-000001", "shard-00001-of-00002.safetensors")
	b, _ := os.ReadFile(shard)
	b[len(b)-3] ^= 0x10
	os.WriteFile(shard, b, 0o644)
	out, err = execute(newCkptCmd(), "inspect", dir)
	if err == nil || !strings.Contains(err.Error(), shard) || !strings.Contains(out, "DAMAGED") {
		t.Fatalf("damaged shard: %v\n%s", err, out)
	}
	// Without CRCs the flip goes unseen (sizes and headers are fine).
	if _, err := execute(newCkptCmd(), "inspect", dir, "--no-verify"); err != nil {
		t.Fatalf("--no-verify: %v", err)
	}
	if _, err := execute(newCkptCmd(), "inspect", dir, "--step", "7"); !errors.Is(err, errUsage) {
		t.Fatalf("--step of a missing checkpoint: %v", err)
	}
	if _, err := execute(newCkptCmd(), "inspect", filepath.Join(dir, "nope")); err == nil {
		t.Fatal("a missing directory passed")
	}
}

func TestCkptConvert(t *testing.T) {
	dir, m := ckptDir(t)
	out := filepath.Join(t.TempDir(), "w.safetensors")
	if _, err := execute(newCkptCmd(), "convert", dir, "--out", out); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sd := m.Set.StateDict()
	if len(f.Tensors) != len(sd) {
		t.Fatalf("%d tensors, the model has %d parameters", len(f.Tensors), len(sd))
	}
	for name, want := range sd {
		got, shape, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		if !equalBits(got, want) || len(shape) != len(m.Set.Get(name).Shape) {
			t.Fatalf("%s differs", name)
		}
	}
	if f.Metadata["troupe_step"] != "2" {
		t.Fatalf("metadata %v", f.Metadata)
	}
	// The converted file loads as --init weights.
	if err := m.Set.LoadWeights(out); err != nil {
		t.Fatal(err)
	}
	bf := filepath.Join(t.TempDir(), "bf.safetensors")
	if _, err := execute(newCkptCmd(), "convert", dir, "--step", "1", "--dtype", "bf16", "--out", bf); err != nil {
		t.Fatal(err)
	}
	g, err := safetensors.Open(bf)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.Tensors[0].DType != safetensors.BF16 {
		t.Fatalf("dtype %v", g.Tensors[0].DType)
	}
	if _, err := execute(newCkptCmd(), "convert", dir); !errors.Is(err, errUsage) {
		t.Fatalf("no --out: %v", err)
	}
	if _, err := execute(newCkptCmd(), "convert", dir, "--out", bf, "--dtype", "f8"); !errors.Is(err, errUsage) {
		t.Fatalf("bad dtype: %v", err)
	}
	if _, err := execute(newCkptCmd(), "convert", t.TempDir(), "--out", bf); !errors.Is(err, checkpoint.ErrNoCheckpoint) {
		t.Fatalf("empty directory: %v", err)
	}
}

// equalBits compares float32 values bit for bit: conversion copies bytes.
func equalBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

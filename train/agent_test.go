package train

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// A pipeline stage undoes its last step exactly: weights, optimizer state,
// step and cursor come back bit for bit, and it refuses to undo twice or
// without a copy.
func TestAgentUndoesItsLastStep(t *testing.T) {
	cfg := tinyMLP()
	cfg.PP, cfg.MicroBatches = 2, 2
	be, tr, _ := openForTest(t, &cfg)
	whole, err := BuildModel(&cfg, be, tr)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := planWorld(&cfg, whole, tr)
	if err != nil {
		t.Fatal(err)
	}
	a := &agent{cfg: &cfg, be: be, spec: whole.Spec, cuts: plan.cuts, sched: plan.sched, log: zap.NewNop(), held: -1}
	if err := a.setStage(1, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.rollBack(); err == nil {
		t.Fatal("undo with no copy kept succeeded")
	}
	host := func() [][]float32 {
		var out [][]float32
		for _, b := range a.stateBufs() {
			h := make([]float32, b.Len())
			be.Download(h, b)
			out = append(out, h)
		}
		return out
	}
	r := rand.New(rand.NewPCG(1, 2))
	scramble := func() {
		for _, b := range a.stateBufs() {
			h := make([]float32, b.Len())
			for i := range h {
				h[i] = r.Float32()
			}
			be.Upload(b, h)
		}
	}
	scramble()
	a.applied, a.cursor = 5, 40
	before := host()
	if want := 1 + len(a.opt.States()); len(before) != want || want < 2 {
		t.Fatalf("stage state is %d buffers, want the weights and every %s state (%d)", len(before), cfg.Optim.Name, want)
	}
	a.keepUndo()
	scramble() // the step
	a.applied, a.cursor, a.undo.valid = 6, 48, true
	if err := a.rollBack(); err != nil {
		t.Fatal(err)
	}
	after := host()
	for i := range before {
		if !slices.Equal(before[i], after[i]) {
			t.Fatalf("buffer %d differs after the undo", i)
		}
	}
	if a.applied != 5 || a.cursor != 40 {
		t.Fatalf("after the undo: step %d cursor %d, want 5 and 40", a.applied, a.cursor)
	}
	if err := a.rollBack(); err == nil {
		t.Fatal("a second undo succeeded")
	}
}

// The agent's own settings are checked, and the defaults filled in.
func TestAgentConfigValidate(t *testing.T) {
	base := func() AgentConfig {
		return AgentConfig{Train: tinyMLP(), Name: "n1", Listen: "127.0.0.1:0"}
	}
	ac := base()
	if err := ac.Validate(); err != nil {
		t.Fatal(err)
	}
	if ac.LostStageTimeout != time.Minute || ac.Rescale != "keep-global-batch" {
		t.Fatalf("defaults: lost-stage timeout %s, rescale %q", ac.LostStageTimeout, ac.Rescale)
	}
	for want, mut := range map[string]func(*AgentConfig){
		"--lost-stage-timeout": func(c *AgentConfig) { c.LostStageTimeout = -time.Second },
		"--rescale":            func(c *AgentConfig) { c.Rescale = "double" },
		"--name":               func(c *AgentConfig) { c.Name = "" },
		"--dp":                 func(c *AgentConfig) { c.Train.DP = 2 },
		"--trace":              func(c *AgentConfig) { c.Train.PP, c.Train.Trace = 2, "t.json" },
	} {
		ac := base()
		mut(&ac)
		if err := ac.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("%v, want ErrConfig naming %s", err, want)
		}
	}
}

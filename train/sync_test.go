package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/troupe-ml/troupe/nn/optim"
)

// runMetrics runs cfg and returns its metrics lines.
func runMetrics(t *testing.T, cfg Config) []StepMetrics {
	t.Helper()
	cfg.MetricsOut = filepath.Join(t.TempDir(), "m.jsonl")
	if _, err := Run(context.Background(), cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	return readMetrics(t, cfg.MetricsOut)
}

// syncWorlds are the worlds the round tests run in: replicas alone, of
// a pipeline (the GPT's tied embedding on both stages) and of
// tensor-parallel shards, with accumulation.
var syncWorlds = []struct {
	name string
	set  func(*Config)
}{
	{"dp2", func(c *Config) { c.DP = 2 }},
	{"dp3/accum2", func(c *Config) { c.DP, c.Accum = 3, 2 }},
	{"dp2/pp2", func(c *Config) { c.DP, c.PP, c.MicroBatches = 2, 2, 2 }},
	{"dp2/tp2", func(c *Config) { c.DP, c.TP = 2, 2 }},
}

// syncGPT is the GPT the round tests train: two layers, no clipping (the
// norm of a replica's own gradient is not the global one's).
func syncGPT() Config {
	c := tinyGPT()
	c.Batch, c.Steps, c.ClipNorm = 12, 6, 0
	c.SetModelArg("n-layers", 2)
	c.SetModelArg("n-heads", 2)
	return c
}

// With rounds of one step, local SGD and DiLoCo with an outer SGD of rate
// 1 and no momentum are the step's synchronous training whenever the
// update is linear in the gradient: each replica steps from the same
// parameters on its share of the global mean's gradient times the
// replicas, and the average of those updates is the update of the
// average (SGD, with momentum, Nesterov's or weight decay: the replicas'
// momentum buffers average to the global one). The float32 sums run in
// another order (a replica's scaled gradient, an average of parameters
// instead of one of gradients), ~1e-7 relative a step: losses within 1e-5
// relative over 6 steps. AdamW and clipping are not linear: with several
// replicas they differ by design (TestDiLoCoIsLocalSGD covers them).
func TestRoundsOfOneStepAreSynchronous(t *testing.T) {
	optims := map[string]optim.Config{
		"sgd":          {Name: "sgd"},
		"momentum":     {Name: "sgd", Momentum: 0.9},
		"nesterov+wd":  {Name: "sgd", Momentum: 0.9, Nesterov: true, WeightDecay: 0.01},
		"momentum+dmp": {Name: "sgd", Momentum: 0.5, Dampening: 0.3},
	}
	for _, w := range syncWorlds {
		for oname, o := range optims {
			base := syncGPT()
			base.Optim, base.LR = o, 0.2
			w.set(&base)
			ref := losses(t, base)
			for _, sync := range []SyncMethod{SyncLocalSGD, SyncDiLoCo} {
				t.Run(fmt.Sprintf("%s/%s/%s", w.name, oname, sync), func(t *testing.T) {
					cfg := base
					cfg.Sync, cfg.SyncEvery, cfg.OuterLR, cfg.OuterMomentum, cfg.CheckEvery = sync, 1, 1, 0, 1
					got := losses(t, cfg)
					for s := range ref {
						if math.Abs(got[s]-ref[s]) > 1e-5*math.Abs(ref[s]) {
							t.Errorf("step %d: loss %v, %v with --sync step", s+1, got[s], ref[s])
						}
					}
				})
			}
		}
	}
}

// With one replica there is nothing to average: local SGD is the step's
// training for any round length, and DiLoCo with an outer SGD of rate 1
// and no momentum sets the global parameters to the replica's (θ − (θ −
// θ_local), exact up to one rounding). Any optimizer, clipping on.
func TestOneReplicaRoundsAreSteps(t *testing.T) {
	base := syncGPT()
	base.ClipNorm, base.Steps = 1, 7
	ref := losses(t, base)
	for _, sync := range []SyncMethod{SyncLocalSGD, SyncDiLoCo} {
		for _, h := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/H%d", sync, h), func(t *testing.T) {
				cfg := base
				cfg.Sync, cfg.SyncEvery, cfg.OuterLR, cfg.OuterMomentum = sync, h, 1, 0
				got := losses(t, cfg)
				for s := range ref {
					if math.Abs(got[s]-ref[s]) > 1e-5*math.Abs(ref[s]) {
						t.Errorf("step %d: loss %v, %v with --sync step", s+1, got[s], ref[s])
					}
				}
			})
		}
	}
}

// DiLoCo with an outer SGD of rate 1 and no momentum is local SGD for any
// round length and inner optimizer: θ − avg(θ − θ_i) = avg(θ_i). The
// parameters take one more rounding a round (the pseudo-gradient and its
// subtraction): losses within 1e-5 relative. The replicas agree at every
// round's end (checksums at every round, bit for bit), and the rounds'
// count and bytes are in the metrics.
func TestDiLoCoIsLocalSGD(t *testing.T) {
	for _, w := range syncWorlds {
		for _, h := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/H%d", w.name, h), func(t *testing.T) {
				base := syncGPT()
				base.Steps = 7 // the last round is shorter
				w.set(&base)
				base.Sync, base.SyncEvery, base.CheckEvery = "local-sgd", h, h
				local := runMetrics(t, base)
				cfg := base
				cfg.Sync, cfg.OuterLR, cfg.OuterMomentum = "diloco", 1, 0
				diloco := runMetrics(t, cfg)
				rounds := 0
				for s := range local {
					if math.Abs(diloco[s].Loss-local[s].Loss) > 1e-5*math.Abs(local[s].Loss) {
						t.Errorf("step %d: loss %v with diloco, %v with local-sgd", s+1, diloco[s].Loss, local[s].Loss)
					}
					round := (s+1)%h == 0 || s+1 == len(local)
					if round {
						rounds++
					}
					m := diloco[s]
					if m.SyncRound != round || m.SyncRounds != rounds || (m.SyncBytes > 0) != round {
						t.Errorf("step %d: sync_round %v, sync_rounds %d, sync_bytes %d; want a round %v, %d rounds", s+1, m.SyncRound, m.SyncRounds, m.SyncBytes, round, rounds)
					}
				}
				// Without a round, the replicas differ: a checksum check
				// there would fail, and the outer momentum matters.
				cfg.OuterMomentum, cfg.OuterNesterov = 0.9, true
				nesterov := losses(t, cfg)
				if nesterov[len(nesterov)-1] == diloco[len(diloco)-1].Loss {
					t.Errorf("the outer Nesterov momentum changed nothing: final loss %v", nesterov[len(nesterov)-1])
				}
			})
		}
	}
}

// A round of DiLoCo sends what a step of synchronous training sends: one
// all-reduce of the part's parameters (two replicas: each rank sends its
// whole part once, in reduce-scatter and all-gather halves, however the
// buckets cut it), every H steps instead of every step; bf16
// pseudo-gradients half of that.
func TestDiLoCoSendsOneHth(t *testing.T) {
	for _, w := range []string{"dp2", "dp2/pp2"} {
		base := syncGPT()
		base.Steps, base.DP = 12, 2
		if w == "dp2/pp2" {
			base.PP, base.MicroBatches = 2, 2
		}
		step := runMetrics(t, base)
		var stepBytes int64
		for _, m := range step {
			if m.SyncBytes == 0 {
				t.Fatalf("%s: step %d of --sync step sent no gradient bytes", w, m.Step)
			}
			stepBytes += m.SyncBytes
		}
		for _, h := range []int{3, 4} {
			for _, dt := range []DType{FP32, BF16} {
				t.Run(fmt.Sprintf("%s/H%d/%s", w, h, dt), func(t *testing.T) {
					cfg := base
					cfg.Sync, cfg.SyncEvery, cfg.SyncDType = "diloco", h, dt
					var bytes int64
					for _, m := range runMetrics(t, cfg) {
						bytes += m.SyncBytes
					}
					want := stepBytes / int64(h)
					if dt == "bf16" {
						want /= 2
					}
					if bytes != want || stepBytes%int64(h) != 0 {
						t.Errorf("diloco sent %d bytes in %d steps, --sync step %d: want 1/%d of it (%d)", bytes, cfg.Steps, stepBytes, h, want)
					}
				})
			}
		}
	}
}

// A DiLoCo run resumed from a checkpoint continues as if never stopped:
// the checkpoint holds the global parameters and the outer momentum
// beside the inner optimizer's state. With plain SGD inside (the inner
// state is empty, so every replica resumes with its own) the losses after
// the resume are the uninterrupted run's bit for bit; with one AdamW
// replica too.
func TestDiLoCoResumesFromCheckpoint(t *testing.T) {
	for name, set := range map[string]func(*Config){
		"dp2/sgd":   func(c *Config) { c.DP, c.Optim, c.LR = 2, optim.Config{Name: "sgd"}, 0.2 },
		"dp1/adamw": func(c *Config) {},
	} {
		t.Run(name, func(t *testing.T) {
			base := syncGPT()
			base.Steps = 12 // two rounds after the resume: the second starts from the outer momentum
			set(&base)
			base.Sync, base.SyncEvery, base.OuterNesterov = "diloco", 3, true
			full := losses(t, base)
			cfg := base
			cfg.CkptDir, cfg.CkptEvery = t.TempDir(), 3
			if _, err := Run(context.Background(), cfg, Options{StopAfter: 6}); err != nil {
				t.Fatal(err)
			}
			cfg.Resume = true
			ms := runMetrics(t, cfg)
			if len(ms) != 6 || ms[0].Step != 7 {
				t.Fatalf("the resumed run reported %d steps from step %d, want 6 from 7", len(ms), ms[0].Step)
			}
			for i, m := range ms {
				if m.Loss != full[6+i] {
					t.Errorf("step %d: loss %v after the resume, %v uninterrupted", m.Step, m.Loss, full[6+i])
				}
			}
		})
	}
}

// Settings that cannot work are refused with the field that is wrong.
func TestSyncConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		field string
		set   func(*Config)
	}{
		{"Sync", func(c *Config) { c.Sync = "hogwild" }},
		{"SyncEvery", func(c *Config) { c.Sync = "diloco" }},
		{"SyncEvery", func(c *Config) { c.SyncEvery = 5 }},
		{"SyncDType", func(c *Config) { c.Sync, c.SyncEvery, c.SyncDType = "local-sgd", 5, "bf16" }},
		{"SyncDType", func(c *Config) { c.SyncDType = "fp8" }},
		{"OuterNesterov", func(c *Config) { c.Sync, c.SyncEvery, c.OuterNesterov = "local-sgd", 5, true }},
		{"Zero", func(c *Config) { c.Sync, c.SyncEvery, c.DP, c.Zero = "diloco", 5, 2, 1 }},
		{"CkptEvery", func(c *Config) { c.Sync, c.SyncEvery, c.CkptDir, c.CkptEvery = "diloco", 5, "x", 7 }},
		{"CheckEvery", func(c *Config) { c.Sync, c.SyncEvery, c.CheckEvery = "diloco", 5, 1 }},
		{"EvalEvery", func(c *Config) { c.Sync, c.SyncEvery, c.EvalEvery = "local-sgd", 5, 3 }},
		{"Sync", func(c *Config) { c.Sync, c.SyncEvery, c.OuterMomentum = "diloco", 5, 1 }},
		{"Sync", func(c *Config) { c.Sync, c.SyncEvery, c.OuterLR = "diloco", 5, -1 }},
		{"Sync", func(c *Config) { c.Sync, c.SyncEvery, c.OuterMomentum, c.OuterNesterov = "diloco", 5, 0, true }},
	} {
		cfg := DefaultConfig()
		tc.set(&cfg)
		err := cfg.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: got %v, want an error on %s", cfg, err, tc.field)
		}
	}
	ok := DefaultConfig()
	ok.Sync, ok.SyncEvery, ok.CkptDir, ok.CkptEvery, ok.EvalEvery, ok.SyncDType = "diloco", 5, "x", 10, 20, "bf16"
	if err := ok.Validate(); err != nil {
		t.Errorf("a valid DiLoCo config: %v", err)
	}
}

// The Prometheus counters follow the metrics lines: the bytes sent to
// other replicas and the rounds completed.
func TestSyncPrometheusCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	p, err := newPromMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.observeStep(StepMetrics{Step: 1, SyncBytes: 0})
	p.observeStep(StepMetrics{Step: 2, SyncBytes: 1000, SyncRound: true, SyncRounds: 1})
	p.observeStep(StepMetrics{Step: 3, SyncBytes: 0, SyncRounds: 1})
	fams := gathered(t, reg)
	if b, r := value(fams["troupe_sync_sent_bytes_total"]), value(fams["troupe_sync_rounds_total"]); b != 1000 || r != 1 {
		t.Errorf("troupe_sync_sent_bytes_total %v, troupe_sync_rounds_total %v; want 1000 and 1", b, r)
	}
}

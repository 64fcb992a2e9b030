package checkpoint

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
	_ "github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/models"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
)

func cpu(t testing.TB) kernels.Backend {
	t.Helper()
	be, err := kernels.Open("cpu", kernels.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	return be
}

func tinyGPT(t testing.TB, be kernels.Backend) *nn.Model {
	t.Helper()
	m, err := models.NewGPT(be, models.GPT{Vocab: 11, Context: 8, DModel: 16, Layers: 2, Heads: 2}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fill sets every weight and optimizer buffer of set to random values and
// the step count to steps, standing in for some training.
func fill(r *rand.Rand, set *nn.ParamSet, opt optim.Optimizer, steps int) {
	be := set.Backend()
	v := make([]float32, set.Len())
	rnd := func() []float32 {
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	be.Upload(set.Weights(), rnd())
	for _, st := range opt.States() {
		be.Upload(st.Buf, rnd())
	}
	opt.SetSteps(steps)
}

// state is a model part's full host state by tensor name.
func state(set *nn.ParamSet, opt optim.Optimizer) map[string][]float32 {
	out := map[string][]float32{}
	w := set.HostWeights()
	for _, p := range set.Params() {
		out[p.Name] = w[p.Offset : p.Offset+p.Size()]
	}
	for _, st := range opt.States() {
		b := make([]float32, set.Len())
		set.Backend().Download(b, st.Buf)
		for _, p := range set.Params() {
			out[OptimName(st.Name, p.Name)] = b[p.Offset : p.Offset+p.Size()]
		}
	}
	return out
}

// sameBits compares float32 values bit for bit: a checkpoint round trip
// copies bytes, so no tolerance applies.
func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// stageSets splits a model's parameters into stages at bounds, each a
// ParamSet of its own (as a pipeline stage holds only its layers) with its
// own optimizer.
func stageSets(t *testing.T, be kernels.Backend, params []*nn.Param, bounds []int, c optim.Config) ([]*nn.ParamSet, []optim.Optimizer) {
	var sets []*nn.ParamSet
	var opts []optim.Optimizer
	for s := 0; s+1 < len(bounds); s++ {
		set := nn.NewParamSet(be, 1)
		for _, p := range params[bounds[s]:bounds[s+1]] {
			set.Add(p.Name, p.Shape, nn.Const(0))
		}
		set.Finalize()
		o, err := optim.New(set, c)
		if err != nil {
			t.Fatal(err)
		}
		sets, opts = append(sets, set), append(opts, o)
	}
	return sets, opts
}

// TestModelRoundTrip saves a GPT with AdamW state as 2 data-parallel ranks
// and restores it into a fresh model: weights, both moments and the step
// count come back bit for bit.
func TestModelRoundTrip(t *testing.T) {
	be := cpu(t)
	m := tinyGPT(t, be)
	opt, _ := optim.New(m.Set, optim.DefaultConfig("adamw"))
	fill(rand.New(rand.NewPCG(1, 1)), m.Set, opt, 42)
	snap := &Snapshot{}
	snap.Meta = Meta{Step: 42, World: World{DP: 2, PP: 1}}
	if err := snap.AddModel(0, m.Set, opt); err != nil {
		t.Fatal(err)
	}
	if snap.Meta.Optimizer.Steps != 42 || !slices.Equal(snap.Meta.Optimizer.States, []string{"exp_avg", "exp_avg_sq"}) {
		t.Fatalf("optimizer state %+v", snap.Meta.Optimizer)
	}
	fsys := NewMemFS()
	if _, err := Save(fsys, "ckpt", snap, 0); err != nil {
		t.Fatal(err)
	}
	ck, err := OpenLatest(fsys, "ckpt")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	m2 := tinyGPT(t, be)
	opt2, _ := optim.New(m2.Set, optim.DefaultConfig("adamw"))
	if err := ck.Restore(m2.Set, opt2); err != nil {
		t.Fatal(err)
	}
	want, got := state(m.Set, opt), state(m2.Set, opt2)
	for name, w := range want {
		if !sameBits(w, got[name]) {
			t.Fatalf("%s differs after the round trip", name)
		}
	}
	if opt2.Steps() != 42 {
		t.Fatalf("steps %d", opt2.Steps())
	}

	// The snapshot keeps its buffers: a second capture downloads into the
	// same memory.
	before := &snap.bufs[bufKey{}][0]
	snap.Reset()
	snap.Meta = Meta{Step: 43, World: World{DP: 1, PP: 1}}
	if err := snap.AddModel(0, m.Set, opt); err != nil {
		t.Fatal(err)
	}
	if &snap.bufs[bufKey{}][0] != before {
		t.Fatal("the second snapshot allocated new weight buffers")
	}
}

// TestRestoreAcrossPipelineSplits saves a model held as a 2-stage pipeline
// of 3 data-parallel ranks each, and restores it as one stage, and as 3
// stages split elsewhere, with SGD momentum state: every tensor bit-exact.
func TestRestoreAcrossPipelineSplits(t *testing.T) {
	be := cpu(t)
	full := tinyGPT(t, be)
	params := full.Set.Params()
	n := len(params)
	c := optim.Config{Name: "sgd", Momentum: 0.9}
	sets, opts := stageSets(t, be, params, []int{0, n / 3, n}, c)
	r := rand.New(rand.NewPCG(2, 2))
	want := map[string][]float32{}
	snap := &Snapshot{Meta: Meta{Step: 9, World: World{DP: 3, PP: 2}}}
	for s := range sets {
		fill(r, sets[s], opts[s], 9)
		for k, v := range state(sets[s], opts[s]) {
			want[k] = v
		}
		if err := snap.AddModel(s, sets[s], opts[s]); err != nil {
			t.Fatal(err)
		}
	}
	fsys := NewMemFS()
	if _, err := Save(fsys, "ckpt", snap, 0); err != nil {
		t.Fatal(err)
	}
	ck, err := OpenLatest(fsys, "ckpt")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, bounds := range [][]int{{0, n}, {0, 1, n - 2, n}, {0, n / 2, n}} {
		tsets, topts := stageSets(t, be, params, bounds, c)
		for s := range tsets {
			if err := ck.Restore(tsets[s], topts[s]); err != nil {
				t.Fatal(err)
			}
			for k, v := range state(tsets[s], topts[s]) {
				if !sameBits(v, want[k]) {
					t.Fatalf("split %v: %s differs", bounds, k)
				}
			}
			if topts[s].Steps() != 9 {
				t.Fatalf("steps %d", topts[s].Steps())
			}
		}
	}
}

func TestRestoreMismatch(t *testing.T) {
	be := cpu(t)
	m := tinyGPT(t, be)
	opt, _ := optim.New(m.Set, optim.DefaultConfig("adamw"))
	snap := &Snapshot{Meta: Meta{Step: 1, World: World{DP: 1, PP: 1}}}
	snap.AddModel(0, m.Set, opt)
	fsys := NewMemFS()
	if _, err := Save(fsys, "ckpt", snap, 0); err != nil {
		t.Fatal(err)
	}
	ck, _ := OpenLatest(fsys, "ckpt")
	defer ck.Close()
	sgd, _ := optim.New(m.Set, optim.Config{Name: "sgd", Momentum: 0.9})
	if err := ck.Restore(m.Set, sgd); !errors.Is(err, ErrMismatch) {
		t.Fatalf("adamw checkpoint into SGD: %v", err)
	}
	other, _ := models.NewGPT(be, models.GPT{Vocab: 12, Context: 8, DModel: 16, Layers: 2, Heads: 2}, 1)
	if err := ck.Restore(other.Set, nil); !errors.Is(err, ErrMismatch) {
		t.Fatalf("another vocabulary: %v", err)
	}
	untied, _ := models.NewGPT(be, models.GPT{Vocab: 11, Context: 8, DModel: 16, Layers: 2, Heads: 2, Untied: true}, 1)
	if err := ck.Restore(untied.Set, nil); !errors.Is(err, ErrMismatch) {
		t.Fatalf("a parameter the checkpoint lacks: %v", err)
	}
	if err := ck.Restore(m.Set, nil); err != nil {
		t.Fatalf("weights only: %v", err)
	}
}

func TestSnapshotRejects(t *testing.T) {
	m := smallModel()
	cases := map[string]func(s *Snapshot){
		"short data":    func(s *Snapshot) { s.Tensors[0].Data = s.Tensors[0].Data[1:] },
		"stage":         func(s *Snapshot) { s.Tensors[0].Stage = 3 },
		"duplicate":     func(s *Snapshot) { s.Tensors[1].Name = s.Tensors[0].Name },
		"world":         func(s *Snapshot) { s.Meta.World.DP = 0 },
		"no optim meta": func(s *Snapshot) { s.Meta.Optimizer = nil },
	}
	for name, mutate := range cases {
		s := m.snapshot(1, 2, 1, []int{0, 2})
		mutate(s)
		if _, err := s.Shards(); !errors.Is(err, ErrSnapshot) {
			t.Errorf("%s: %v", name, err)
		}
	}
	s := m.snapshot(1, 2, 1, []int{0, 2})
	if _, err := s.Shard(0, 2, 0); !errors.Is(err, ErrSnapshot) {
		t.Errorf("dp rank out of range: %v", err)
	}
}

// TestTiedEmbeddingAcrossStages: a GPT whose tied token embedding sits on
// the first stage (embedding) and the last (LM head) is saved with the
// tensor once, and every stage of another split, and the whole model, load
// it back bit for bit.
func TestTiedEmbeddingAcrossStages(t *testing.T) {
	be := cpu(t)
	spec := models.GPT{Vocab: 7, Context: 4, DModel: 8, Layers: 3, Heads: 2}
	units := spec.Units()
	c := optim.DefaultConfig("adamw")
	build := func(lo, hi int) (*nn.Model, optim.Optimizer) {
		m, err := nn.Build(be, spec, 5, lo, hi)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := optim.New(m.Set, c)
		return m, o
	}
	r := rand.New(rand.NewPCG(3, 3))
	whole, wopt := build(0, units)
	fill(r, whole.Set, wopt, 4)
	want := state(whole.Set, wopt)
	// Two stages holding the whole model's state.
	cuts := []int{0, 2, units}
	snap := &Snapshot{Meta: Meta{Step: 4, World: World{DP: 2, PP: 2}}}
	for s := 0; s < 2; s++ {
		m, o := build(cuts[s], cuts[s+1])
		if m.Tied == nil {
			t.Fatal("the stage does not mark the tied embedding")
		}
		if err := ck0Restore(whole, wopt, m, o); err != nil {
			t.Fatal(err)
		}
		if err := snap.AddStage(s, m, o); err != nil {
			t.Fatal(err)
		}
	}
	fsys := NewMemFS()
	if _, err := Save(fsys, "ckpt", snap, 0); err != nil {
		t.Fatal(err)
	}
	ck, err := OpenLatest(fsys, "ckpt")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if tok, _ := ck.Manifest.Lookup("tok.weight"); tok.Stage != 0 {
		t.Fatalf("tok.weight saved under stage %d", tok.Stage)
	}
	for _, cut := range [][]int{{0, units}, {0, 1, 3, units}} {
		for s := 0; s+1 < len(cut); s++ {
			m, o := build(cut[s], cut[s+1])
			if err := ck.Restore(m.Set, o); err != nil {
				t.Fatal(err)
			}
			for k, v := range state(m.Set, o) {
				if !sameBits(v, want[k]) {
					t.Fatalf("split %v stage %d: %s differs", cut, s, k)
				}
			}
		}
	}
}

// ck0Restore copies the whole model's state into a stage by name.
func ck0Restore(whole *nn.Model, wopt optim.Optimizer, m *nn.Model, o optim.Optimizer) error {
	s := &Snapshot{Meta: Meta{Step: 4, World: World{DP: 1, PP: 1}}}
	if err := s.AddModel(0, whole.Set, wopt); err != nil {
		return err
	}
	fsys := NewMemFS()
	if _, err := Save(fsys, "c", s, 0); err != nil {
		return err
	}
	ck, err := OpenLatest(fsys, "c")
	if err != nil {
		return err
	}
	defer ck.Close()
	return ck.Restore(m.Set, o)
}

package checkpoint

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/models"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/pipeline"
)

// tpGPT is a GPT whose vocabulary (13) neither 2 nor 4 divides and whose
// 4 heads both do.
var tpGPT = models.GPT{Vocab: 13, Context: 4, DModel: 8, Layers: 2, Heads: 4}

// tpState is a whole model's weights and AdamW states, random.
type tpState struct {
	weights map[string][]float32
	states  map[string]map[string][]float32 // state → param → values
}

func newTPState(t testing.TB) tpState {
	t.Helper()
	r := rand.New(rand.NewPCG(3, 4))
	whole, err := nn.Build(cpu(t), tpGPT, 1, 0, tpGPT.Units())
	if err != nil {
		t.Fatal(err)
	}
	st := tpState{weights: map[string][]float32{}, states: map[string]map[string][]float32{}}
	for _, p := range whole.Set.Params() {
		st.weights[p.Name] = randVals(r, p.Size())
	}
	for _, s := range []string{"exp_avg", "exp_avg_sq"} {
		st.states[s] = map[string][]float32{}
		for _, p := range whole.Set.Params() {
			st.states[s][p.Name] = randVals(r, p.Size())
		}
	}
	return st
}

func randVals(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// part builds units [lo, hi) as shard place and loads its part of st into
// it and into an AdamW optimizer at 5 steps.
func (st tpState) part(t testing.TB, lo, hi int, place nn.TP) (*nn.Model, optim.Optimizer) {
	t.Helper()
	m, err := nn.BuildShard(cpu(t), tpGPT, 1, lo, hi, place)
	if err != nil {
		t.Fatal(err)
	}
	sd := map[string][]float32{}
	for _, p := range m.Set.Params() {
		sd[p.Name] = st.weights[p.Name]
	}
	if err := m.Set.LoadStateDict(sd, nil); err != nil {
		t.Fatal(err)
	}
	opt, err := optim.New(m.Set, optim.DefaultConfig("adamw"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range opt.States() {
		flat := make([]float32, m.Set.Len())
		for _, p := range m.Set.Params() {
			dst := flat[p.Offset : p.Offset+p.Size()]
			if p.Split != nil {
				p.Split.Extract(dst, st.states[s.Name][p.Name])
			} else {
				copy(dst, st.states[s.Name][p.Name])
			}
		}
		m.Set.Backend().Upload(s.Buf, flat)
	}
	opt.SetSteps(5)
	return m, opt
}

// save writes st as a world of dp replicas of the stages cut at cuts,
// each of tp shards.
func (st tpState) save(t testing.TB, fsys FS, dir string, dp, tp int, cuts []pipeline.Range) {
	t.Helper()
	snap := &Snapshot{Meta: Meta{Step: 9, World: World{DP: dp, PP: len(cuts), TP: tp}}}
	for s, c := range cuts {
		for r := range tp {
			m, opt := st.part(t, c.Lo, c.Hi, nn.TP{Rank: r, Size: tp})
			if tp == 1 {
				m.TP = nn.NoTP
			}
			if err := snap.AddStage(s, m, opt); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := Save(fsys, dir, snap, 0); err != nil {
		t.Fatal(err)
	}
}

// checkPart restores units [lo, hi) as shard place from the checkpoint and
// checks every weight and state against st's part, bit for bit.
func (st tpState) checkPart(t *testing.T, fsys FS, lo, hi int, place nn.TP) {
	t.Helper()
	ck, err := OpenLatest(fsys, "ckpt")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	m, err := nn.BuildShard(cpu(t), tpGPT, 2, lo, hi, place)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optim.New(m.Set, optim.DefaultConfig("adamw"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ck.Restore(m.Set, opt); err != nil {
		t.Fatal(err)
	}
	if opt.Steps() != 5 {
		t.Errorf("optimizer at %d steps, want 5", opt.Steps())
	}
	want, wantOpt := st.part(t, lo, hi, place)
	same := func(what string, got, exp []float32) {
		t.Helper()
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(exp[i]) {
				t.Fatalf("%s of units [%d, %d) shard %d of %d: element %d is %v, want %v", what, lo, hi, place.Rank, place.Size, i, got[i], exp[i])
			}
		}
	}
	same("weights", m.Set.HostWeights(), want.Set.HostWeights())
	for i, s := range opt.States() {
		got, exp := make([]float32, m.Set.Len()), make([]float32, m.Set.Len())
		m.Set.Backend().Download(got, s.Buf)
		m.Set.Backend().Download(exp, wantOpt.States()[i].Buf)
		same(s.Name, got, exp)
	}
}

// TestTensorParallelCheckpointsReshard: a checkpoint written by any world
// of (dp, pp, tp) loads into any other with the same weights and optimizer
// states, bit for bit: tp 2 → 1, 1 → 4, pp 2 × tp 2 → dp 4 (one whole
// model), tp 4 → pp 2 × tp 2. The padded vocabulary rows are never
// written; each shard's come back as zeros.
func TestTensorParallelCheckpointsReshard(t *testing.T) {
	st := newTPState(t)
	units := tpGPT.Units()
	whole := []pipeline.Range{{Lo: 0, Hi: units}}
	two := []pipeline.Range{{Lo: 0, Hi: 2}, {Lo: 2, Hi: units}}
	for _, tc := range []struct {
		name         string
		dp, tp       int
		cuts         []pipeline.Range
		loadTP       int
		loadCuts     []pipeline.Range
		wantSlicesAt int // slices of blocks.0.qkv.weight
	}{
		{"tp2→1", 1, 2, whole, 1, whole, 6},
		{"tp1→4", 1, 1, whole, 4, whole, 1},
		{"pp2×tp2→dp4", 1, 2, two, 1, whole, 6},
		{"dp2×tp4→pp2×tp2", 2, 4, whole, 2, two, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := NewMemFS()
			st.save(t, fsys, "ckpt", tc.dp, tc.tp, tc.cuts)
			ck, err := OpenLatest(fsys, "ckpt")
			if err != nil {
				t.Fatal(err)
			}
			if err := ck.Verify(); err != nil {
				t.Fatal(err)
			}
			qkv, _ := ck.Manifest.Lookup("blocks.0.qkv.weight")
			if len(qkv.Slices) != tc.wantSlicesAt {
				t.Errorf("qkv in %d slices, want %d: %+v", len(qkv.Slices), tc.wantSlicesAt, qkv.Slices)
			}
			// The whole tensors read back as written.
			for _, name := range []string{"tok.weight", "blocks.1.out.weight", "optim.exp_avg.blocks.0.qkv.bias"} {
				tn, err := ck.ReadTensor(name)
				if err != nil {
					t.Fatal(err)
				}
				want := st.weights[name]
				if s, p, ok := splitOptimName(name); ok {
					want = st.states[s][p]
				}
				got := make([]float32, len(want))
				decodeF32(got, tn.Data)
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("%s[%d] = %v, want %v", name, i, got[i], want[i])
					}
				}
			}
			ck.Close()
			for _, c := range tc.loadCuts {
				for r := range tc.loadTP {
					st.checkPart(t, fsys, c.Lo, c.Hi, nn.TP{Rank: r, Size: tc.loadTP})
				}
			}
		})
	}
}

// A shard's blocks are checked like any slice: a torn byte in one fails
// the read that touches it, naming the block.
func TestTensorParallelCheckpointCorruptBlock(t *testing.T) {
	st := newTPState(t)
	dir := filepath.Join(t.TempDir(), "ckpt")
	st.save(t, OSFS{}, dir, 1, 2, []pipeline.Range{{Lo: 0, Hi: tpGPT.Units()}})
	ck, err := OpenLatest(OSFS{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := ck.Manifest.Lookup("blocks.0.out.weight")
	s := out.Slices[1]
	ck.Close()
	path := filepath.Join(dir, StepDirName(9), s.File)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[s.Offset] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ck, err = OpenLatest(OSFS{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	_, err = ck.ReadTensor("blocks.0.out.weight")
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "block [0 16] + [8 16]") {
		t.Fatalf("reading a torn block: %v", err)
	}
	t.Log(err)
}

// tpManifest is the manifest of a tp 2 checkpoint (column blocks, keyed
// qkv blocks, replicated tensors spread over the ranks).
func tpManifest(t testing.TB) []byte {
	fsys := NewMemFS()
	newTPState(t).save(t, fsys, "ckpt", 1, 2, []pipeline.Range{{Lo: 0, Hi: tpGPT.Units()}})
	b, err := readFile(fsys, filepath.Join("ckpt", StepDirName(9), ManifestFile), MaxManifestSize)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// shardedPart is part (lo, hi, place) of st with an optimizer that holds
// only ranges of its flat buffers (a ZeRO shard), filled from st.
func (st tpState) shardedPart(t testing.TB, lo, hi int, place nn.TP, ranges []optim.Range) (*nn.Model, optim.Optimizer) {
	t.Helper()
	m, full := st.part(t, lo, hi, place)
	opt, err := optim.NewShard(m.Set, optim.DefaultConfig("adamw"), ranges)
	if err != nil {
		t.Fatal(err)
	}
	be := m.Set.Backend()
	for i, s := range opt.States() {
		whole := make([]float32, m.Set.Len())
		be.Download(whole, full.States()[i].Buf)
		var mine []float32
		for _, r := range ranges {
			mine = append(mine, whole[r.Lo:r.Hi]...)
		}
		be.Upload(s.Buf, mine)
	}
	opt.SetSteps(5)
	return m, opt
}

// zeroRanges cuts n elements into buckets of about 37 and gives shard z of
// S its chunk of each, as a ZeRO reduce-scatter does.
func zeroRanges(n, S, z int) []optim.Range {
	var out []optim.Range
	for b := 0; b < n; b += 37 {
		e := min(b+37, n)
		lo, hi := b+(e-b)*z/S, b+(e-b)*(z+1)/S
		if lo < hi {
			out = append(out, optim.Range{Lo: lo, Hi: hi})
		}
	}
	return out
}

// ZeRO shards of optimizer state are written by their owners, each as
// blocks of the whole tensors (ranges cut rows anywhere), and restore into
// any other layout bit for bit: 4 shards (of 2 tensor-parallel shards
// each) into one whole optimizer, into 2 shards, and into another tp.
func TestZeroStateCheckpointsReshard(t *testing.T) {
	st := newTPState(t)
	units := tpGPT.Units()
	for _, tc := range []struct {
		name         string
		dp, tp       int
		loadS, loadT int
	}{{"zero4→whole", 4, 1, 1, 1}, {"zero4×tp2→zero2", 4, 2, 2, 1}, {"zero2→zero3×tp2", 2, 1, 3, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := NewMemFS()
			snap := &Snapshot{Meta: Meta{Step: 9, World: World{DP: tc.dp, PP: 1, TP: tc.tp}}}
			for tr := range tc.tp {
				place := nn.TP{Rank: tr, Size: tc.tp}
				if tc.tp == 1 {
					place = nn.NoTP
				}
				for d := range tc.dp {
					m, _ := st.part(t, 0, units, place)
					m2, opt := st.shardedPart(t, 0, units, place, zeroRanges(m.Set.Len(), tc.dp, d))
					if err := snap.AddPart(0, m2, opt, PartOptions{Weights: d == 0, Owner: d}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, err := Save(fsys, "ckpt", snap, 0); err != nil {
				t.Fatal(err)
			}
			ck, err := OpenLatest(fsys, "ckpt")
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			if err := ck.Verify(); err != nil {
				t.Fatal(err)
			}
			for tr := range tc.loadT {
				place := nn.TP{Rank: tr, Size: tc.loadT}
				if tc.loadT == 1 {
					place = nn.NoTP
				}
				for z := range tc.loadS {
					m, err := nn.BuildShard(cpu(t), tpGPT, 2, 0, units, place)
					if err != nil {
						t.Fatal(err)
					}
					var ranges []optim.Range
					if tc.loadS > 1 {
						ranges = zeroRanges(m.Set.Len(), tc.loadS, z)
					}
					opt, err := optim.NewShard(m.Set, optim.DefaultConfig("adamw"), ranges)
					if err != nil {
						t.Fatal(err)
					}
					if err := ck.Restore(m.Set, opt); err != nil {
						t.Fatal(err)
					}
					want, wantOpt := st.part(t, 0, units, place)
					if ranges != nil {
						want, wantOpt = st.shardedPart(t, 0, units, place, ranges)
					}
					for i, s := range opt.States() {
						got, exp := make([]float32, s.Buf.Len()), make([]float32, s.Buf.Len())
						m.Set.Backend().Download(got, s.Buf)
						want.Set.Backend().Download(exp, wantOpt.States()[i].Buf)
						for j := range got {
							if math.Float32bits(got[j]) != math.Float32bits(exp[j]) {
								t.Fatalf("tp %d shard %d: %s element %d is %v, want %v", tr, z, s.Name, j, got[j], exp[j])
							}
						}
					}
					if !slicesEqual(m.Set.HostWeights(), want.Set.HostWeights()) {
						t.Fatalf("tp %d shard %d: weights differ", tr, z)
					}
				}
			}
		})
	}
}

func slicesEqual(a, b []float32) bool {
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

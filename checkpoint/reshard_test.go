package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// saveModel saves m as world (dp, pp) with the stage split bounds into a
// fresh MemFS and opens it.
func saveModel(t *testing.T, m *model, step int64, dp, pp int, bounds []int) (*MemFS, *Checkpoint) {
	t.Helper()
	fsys := NewMemFS()
	if _, err := Save(fsys, "ckpt", m.snapshot(step, dp, pp, bounds), 0); err != nil {
		t.Fatalf("save dp=%d pp=%d bounds %v: %v", dp, pp, bounds, err)
	}
	ck, err := OpenLatest(fsys, "ckpt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return fsys, ck
}

// TestPlanReadHandWorked: a [5, 2] F32 tensor saved by 2 ranks is split at
// row 3 (40 bytes over 2 ranks: cut at byte 20, row 2.5 → 3); elements
// [4, 8) are rows 2–3, so two reads: elements 4–5 from the end of the first
// slice, 6–7 from the start of the second.
func TestPlanReadHandWorked(t *testing.T) {
	m := &model{params: []TensorSpec{{Name: "w", DType: 12 /* F32 */, Shape: []int{5, 2}}},
		opt: &OptimizerState{Name: "sgd", States: []string{}}, data: map[string][]byte{"w": make([]byte, 40)}}
	for i := range m.data["w"] {
		m.data["w"][i] = byte(i)
	}
	_, ck := saveModel(t, m, 1, 2, 1, []int{0, 1})
	reads, err := ck.Manifest.PlanRead("w", 4, 8)
	if err != nil {
		t.Fatal(err)
	}
	f0, f1 := ShardFileName(0, 2), ShardFileName(1, 2)
	want := []Read{
		{Tensor: "w", Slice: 0, File: f0, SrcOff: 16, DstOff: 0, Len: 8},
		{Tensor: "w", Slice: 1, File: f1, SrcOff: 0, DstOff: 8, Len: 8},
	}
	if !reflect.DeepEqual(reads, want) {
		t.Fatalf("got %+v\nwant %+v", reads, want)
	}
	dst := make([]byte, 16)
	if err := ck.Execute(reads, dst); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, m.data["w"][16:32]) {
		t.Fatalf("read %v", dst)
	}
	if _, err := ck.Manifest.PlanRead("w", 4, 11); !errors.Is(err, ErrMismatch) {
		t.Fatalf("read past the end: %v", err)
	}
	if _, err := ck.Manifest.PlanRead("nope", 0, 1); !errors.Is(err, ErrMismatch) {
		t.Fatalf("unknown tensor: %v", err)
	}
}

// TestReshardProperty saves random models under a random world a = (dp,
// pp, stage split) and loads them under a random b: every rank of b gets
// every tensor of its stage, parameters and optimizer state, bit for bit;
// and random element ranges read through PlanRead match the saved bytes.
func TestReshardProperty(t *testing.T) {
	for seed := uint64(0); seed < 150; seed++ {
		r := rand.New(rand.NewPCG(seed, 3))
		m := randomModel(r)
		n := len(m.params)
		dpA, ppA := 1+r.IntN(4), 1+r.IntN(3)
		boundsA := randomBounds(r, n, ppA)
		_, ck := saveModel(t, m, int64(seed), dpA, ppA, boundsA)
		dpB, ppB := 1+r.IntN(4), 1+r.IntN(3)
		target := Target{DP: dpB, PP: ppB, Bounds: randomBounds(r, n, ppB)}
		where := fmt.Sprintf("seed %d: a = dp %d pp %d %v, b = dp %d pp %d %v", seed, dpA, ppA, boundsA, dpB, ppB, target.Bounds)
		for rank := 0; rank < dpB*ppB; rank++ {
			trs, err := ck.Manifest.PlanRank(target, rank)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			st := rank / dpB
			want := 0
			for _, p := range m.params[target.Bounds[st]:target.Bounds[st+1]] {
				want += 1 + len(m.opt.States)
				_ = p
			}
			if len(trs) != want {
				t.Fatalf("%s: rank %d gets %d tensors, want %d", where, rank, len(trs), want)
			}
			for _, tr := range trs {
				dst := make([]byte, tr.Bytes)
				if err := ck.Execute(tr.Reads, dst); err != nil {
					t.Fatalf("%s: rank %d: %v", where, rank, err)
				}
				if !bytes.Equal(dst, m.data[tr.Name]) {
					t.Fatalf("%s: rank %d: %s differs", where, rank, tr.Name)
				}
			}
		}
		for name, d := range m.data {
			tn, _ := ck.Manifest.Lookup(name)
			es := int64(tn.DType.Size())
			elems := int64(len(d)) / es
			a := r.Int64N(elems + 1)
			b := a + r.Int64N(elems-a+1)
			dst := make([]byte, (b-a)*es)
			if err := ck.ReadElements(name, a, b, dst); err != nil {
				t.Fatalf("%s: %s[%d:%d]: %v", where, name, a, b, err)
			}
			if !bytes.Equal(dst, d[a*es:b*es]) {
				t.Fatalf("%s: %s[%d:%d] differs", where, name, a, b)
			}
		}
		if err := ck.Verify(); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
	}
}

func TestTargetValidate(t *testing.T) {
	for _, tc := range []Target{
		{DP: 0, PP: 1, Bounds: []int{0, 3}},
		{DP: 1, PP: 2, Bounds: []int{0, 3}},
		{DP: 1, PP: 2, Bounds: []int{0, 2, 1}},
		{DP: 1, PP: 1, Bounds: []int{0, 2}},
		{DP: 1, PP: 2, Bounds: []int{1, 2, 3}},
	} {
		if err := tc.Validate(3); !errors.Is(err, ErrMismatch) {
			t.Errorf("%+v: %v", tc, err)
		}
	}
	if err := (Target{DP: 2, PP: 2, Bounds: []int{0, 0, 3}}).Validate(3); err != nil {
		t.Error(err)
	}
}

package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/troupe-ml/troupe/safetensors"
)

// TestShardFileIsPlainSafetensors reads a shard file with the safetensors
// package as any safetensors reader would: each slice is a tensor of the
// logical name, with the slice's shape and bytes.
func TestShardFileIsPlainSafetensors(t *testing.T) {
	m := smallModel()
	fsys := NewMemFS()
	if _, err := Save(fsys, "ckpt", m.snapshot(7, 2, 1, []int{0, 2}), 0); err != nil {
		t.Fatal(err)
	}
	f, err := fsys.Open("ckpt/step-000007/" + ShardFileName(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := fsys.Stat("ckpt/step-000007/" + ShardFileName(1, 2))
	sf, err := safetensors.Read(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	if sf.Metadata["format"] != "pt" || sf.Metadata["troupe_rank"] != "1" || sf.Metadata["troupe_step"] != "7" {
		t.Fatalf("metadata %v", sf.Metadata)
	}
	// Rank 1 holds rows 2– of optim.exp_avg.fc.weight (see
	// TestManifestGolden) and everything after it.
	got := map[string][]int{}
	for _, info := range sf.Tensors {
		got[info.Name] = info.Shape
	}
	want := map[string][]int{"optim.exp_avg.fc.weight": {1, 2}, "optim.exp_avg.fc.bias": {3},
		"optim.exp_avg_sq.fc.weight": {3, 2}, "optim.exp_avg_sq.fc.bias": {3}}
	if len(got) != len(want) {
		t.Fatalf("tensors %v", got)
	}
	for n, sh := range want {
		if len(got[n]) != len(sh) || (len(sh) > 0 && got[n][0] != sh[0]) {
			t.Fatalf("%s: shape %v, want %v", n, got[n], sh)
		}
	}
	raw, _ := sf.Raw("optim.exp_avg.fc.weight")
	if !bytes.Equal(raw, m.data["optim.exp_avg.fc.weight"][16:]) {
		t.Fatal("row block bytes differ")
	}
}

func TestBuildManifestRejects(t *testing.T) {
	snap := smallModel().snapshot(7, 2, 1, []int{0, 2})
	shards, err := snap.Shards()
	if err != nil {
		t.Fatal(err)
	}
	fsys := NewMemFS()
	fsys.MkdirAll("t")
	var parts []*Part
	for _, sh := range shards {
		p, err := WriteShard(fsys, "t", sh)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
	}
	clone := func() []*Part {
		b, _ := json.Marshal(parts)
		var out []*Part
		json.Unmarshal(b, &out)
		return out
	}
	cases := map[string]func(ps []*Part){
		"other step":       func(ps []*Part) { ps[1].Step = 8 },
		"other world":      func(ps []*Part) { ps[1].World.DP = 3 },
		"two rank 0":       func(ps []*Part) { ps[1].File.Rank = 0 },
		"specs disagree":   func(ps []*Part) { ps[1].Specs = ps[1].Specs[1:] },
		"slice elsewhere":  func(ps []*Part) { ps[1].Slices[0].File = ps[0].File.Name },
		"unlisted tensor":  func(ps []*Part) { ps[1].Slices[0].Tensor = "ghost" },
		"missing slice":    func(ps []*Part) { ps[1].Slices = ps[1].Slices[1:] },
		"overlapping rows": func(ps []*Part) { ps[1].Slices[0].Offsets[0] = 0 },
	}
	for name, mutate := range cases {
		ps := clone()
		mutate(ps)
		if _, err := BuildManifest(snap.Meta, ps); !errors.Is(err, ErrManifest) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := BuildManifest(snap.Meta, clone()); err != nil {
		t.Fatal(err)
	}
}

// FuzzDecodePart: a part manifest from another process never panics the
// decoder or the merge.
func FuzzDecodePart(f *testing.F) {
	snap := smallModel().snapshot(7, 1, 1, []int{0, 2})
	shards, _ := snap.Shards()
	fsys := NewMemFS()
	fsys.MkdirAll("t")
	p, err := WriteShard(fsys, "t", shards[0])
	if err != nil {
		f.Fatal(err)
	}
	good, _ := json.Marshal(p)
	f.Add(good)
	f.Add([]byte(`{"world":{"size":1,"dp":1,"pp":1},"file":{"name":"a.safetensors","bytes":8},"specs":[],"slices":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePart(b)
		if err != nil {
			return
		}
		m, err := BuildManifest(Meta{Step: p.Step, World: p.World}, []*Part{p})
		if err != nil {
			return
		}
		if _, err := EncodeManifest(m); err != nil {
			t.Fatalf("a merged, validated manifest does not encode: %v", err)
		}
	})
}

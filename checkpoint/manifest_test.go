package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/safetensors"
)

var update = flag.Bool("update", false, "rewrite testdata/manifest_v1.json")

// smallModel is a fixed two-parameter model with AdamW state: the source
// of testdata/manifest_v1.json.
func smallModel() *model {
	m := &model{
		params: []TensorSpec{
			{Name: "fc.weight", DType: safetensors.F32, Shape: []int{3, 2}},
			{Name: "fc.bias", DType: safetensors.F32, Shape: []int{3}},
		},
		opt:  &OptimizerState{Name: "adamw", Steps: 7, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, States: []string{"exp_avg", "exp_avg_sq"}},
		data: map[string][]byte{},
	}
	k := byte(0)
	for _, p := range m.params {
		for _, n := range append([]string{p.Name}, m.optNames(p.Name)...) {
			b, _ := p.Bytes()
			d := make([]byte, b)
			for i := range d {
				d[i] = k
				k++
			}
			m.data[n] = d
		}
	}
	return m
}

// smallManifest saves smallModel as 2 data-parallel ranks and returns the
// manifest's bytes.
func smallManifest(t testing.TB) []byte {
	fsys := NewMemFS()
	if _, err := Save(fsys, "ckpt", smallModel().snapshot(7, 2, 1, []int{0, 2}), 0); err != nil {
		t.Fatal(err)
	}
	b, err := readFile(fsys, filepath.Join("ckpt", StepDirName(7), ManifestFile), MaxManifestSize)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestManifestGolden pins format version 2: today's writer produces the
// committed document byte for byte, and it decodes to what was saved.
// Version 1 (written before tensor parallelism, every slice whole rows)
// still decodes to the same content.
func TestManifestGolden(t *testing.T) {
	old, err := os.ReadFile(filepath.Join("testdata", "manifest_v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	m1, err := DecodeManifest(old)
	if err != nil {
		t.Fatalf("version 1: %v", err)
	}
	b := smallManifest(t)
	path := filepath.Join("testdata", "manifest_v2.json")
	if *update {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("manifest changed (a new format needs a new version; run with -update if intended):\n%s", b)
	}
	m, err := DecodeManifest(want)
	if err != nil {
		t.Fatal(err)
	}
	if m.Step != 7 || m.World != (World{Size: 2, DP: 2, PP: 1}) || m.Sampler.Cursor != 224 || m.Optimizer.Steps != 7 ||
		m.Schedule.Position != 7 || len(m.Files) != 2 || len(m.Tensors) != 6 {
		t.Fatalf("decoded %+v", m)
	}
	// 2 params + 4 optimizer tensors, F32: 6·4 + 3·4 = 36 bytes each kind,
	// 108 in all, cut at byte 54 over 2 ranks: in optim.exp_avg.fc.weight
	// (bytes 36–60, rows of 8), 2.25 rows in → row 2.
	ea, _ := m.Lookup("optim.exp_avg.fc.weight")
	if len(ea.Slices) != 2 || ea.Slices[0].Sizes[0] != 2 || ea.Slices[1].Offsets[0] != 2 {
		t.Fatalf("exp_avg slices %+v", ea.Slices)
	}
	if got := m.Params(); !reflect.DeepEqual(got, []string{"fc.weight", "fc.bias"}) {
		t.Fatalf("params %v", got)
	}
	again, err := EncodeManifest(m)
	if err != nil || !bytes.Equal(again, want) {
		t.Fatalf("re-encoding differs: %v\n%s", err, again)
	}
	m1.Version = m.Version
	if !reflect.DeepEqual(m1.Tensors, m.Tensors) || m1.Meta.World != m.Meta.World || !reflect.DeepEqual(m1.Files, m.Files) {
		t.Errorf("version 1 decodes to other content:\n%+v\n%+v", m1, m)
	}
}

// rawEncode marshals m with a correct checksum but without validating, so
// that a test can check that validation (not the checksum) rejects it.
func rawEncode(t *testing.T, m *Manifest) []byte {
	t.Helper()
	sum, err := m.checksum()
	if err != nil {
		t.Fatal(err)
	}
	m.Checksum = sum
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeManifestRejects(t *testing.T) {
	good := smallManifest(t)
	cases := []struct {
		name, want string
		mutate     func(m *Manifest)
	}{
		{"format", "format", func(m *Manifest) { m.Format = "other" }},
		{"negative step", "step -1", func(m *Manifest) { m.Step = -1 }},
		{"zero dp", "world dp=0", func(m *Manifest) { m.World.DP = 0 }},
		{"size", "world size 3", func(m *Manifest) { m.World.Size = 3 }},
		{"files count", "1 files for a world of 2", func(m *Manifest) { m.Files = m.Files[:1] }},
		{"file path", "not a plain", func(m *Manifest) { m.Files[0].Name = "../x.safetensors" }},
		{"file twice", "listed twice", func(m *Manifest) { m.Files[1].Name = m.Files[0].Name }},
		{"file rank", "rank order", func(m *Manifest) { m.Files[0].Rank = 1 }},
		{"file stage", "is not stage", func(m *Manifest) { m.Files[1].DPRank = 0 }},
		{"file bytes", "at least 8", func(m *Manifest) { m.Files[0].Bytes = 3 }},
		{"tensor twice", "listed twice", func(m *Manifest) { m.Tensors[1].Name = m.Tensors[0].Name }},
		{"empty name", "empty", func(m *Manifest) { m.Tensors[0].Name = "" }},
		{"negative dim", "negative", func(m *Manifest) { m.Tensors[0].Shape = []int{-3, 2} }},
		{"shape missing", "shape missing", func(m *Manifest) { m.Tensors[0].Shape = nil }},
		{"stage range", "stage 1 outside", func(m *Manifest) { m.Tensors[0].Stage = 1 }},
		{"no slices", "no slices", func(m *Manifest) { m.Tensors[0].Slices = nil }},
		{"slice past the end", "outside shape", func(m *Manifest) { m.Tensors[2].Slices[1].Offsets[0] = 3 }},
		{"slice short", "cover 4 of the tensor's 6", func(m *Manifest) { m.Tensors[2].Slices = m.Tensors[2].Slices[:1] }},
		{"slice overlap", "overlaps", func(m *Manifest) { m.Tensors[2].Slices[1].Offsets[0] = 1 }},
		{"slice order", "sorted", func(m *Manifest) {
			m.Tensors[2].Slices[0], m.Tensors[2].Slices[1] = m.Tensors[2].Slices[1], m.Tensors[2].Slices[0]
		}},
		{"column block bytes", "elements of 4 bytes", func(m *Manifest) { m.Tensors[0].Slices[0].Sizes[1] = 1 }},
		{"slice key", "reserved", func(m *Manifest) { m.Tensors[0].Slices[0].Key = "__metadata__" }},
		{"v1 with tp", "version-1", func(m *Manifest) { m.Version, m.World.TP, m.World.Size = 1, 1, 2 }},
		{"file tp rank", "tp rank 1", func(m *Manifest) { m.Files[0].TPRank = 1 }},
		{"slice dims", "dimensions", func(m *Manifest) { m.Tensors[0].Slices[0].Offsets = []int{0} }},
		{"slice file", "not in the manifest's files", func(m *Manifest) { m.Tensors[0].Slices[0].File = "x.safetensors" }},
		{"slice bytes", "elements of", func(m *Manifest) { m.Tensors[0].Slices[0].Bytes++ }},
		{"slice offset", "outside file", func(m *Manifest) { m.Tensors[0].Slices[0].Offset = m.Files[0].Bytes }},
		{"two slices one file", "holds two slices named", func(m *Manifest) {
			m.Tensors[2].Slices[1].File = m.Tensors[2].Slices[0].File
			m.Tensors[2].Slices[1].Offset = m.Tensors[2].Slices[0].Offset
		}},
		{"optim unknown state", "not a state", func(m *Manifest) { m.Optimizer.States = []string{"exp_avg", "other"} }},
		{"optim missing", "optimizer-state tensors", func(m *Manifest) {
			m.Optimizer.States = append(m.Optimizer.States, "extra")
		}},
		{"optim bad name", "optimizer state", func(m *Manifest) { m.Optimizer.States[0] = "exp.avg" }},
		{"optim config", "betas", func(m *Manifest) { m.Optimizer.Beta1 = 1.5 }},
		{"no optimizer", "not a state", func(m *Manifest) { m.Optimizer = nil }},
		{"optim param", "no parameter", func(m *Manifest) { m.Tensors[2].Name = "optim.exp_avg.nope" }},
		{"schedule", "schedule", func(m *Manifest) { m.Schedule.Kind = "zigzag" }},
		{"sampler", "sampler", func(m *Manifest) { m.Sampler.N = 0 }},
		{"config", "config", func(m *Manifest) { m.Config = json.RawMessage(`[1]`) }},
		{"rng name", "rng", func(m *Manifest) { m.RNG[""] = []byte{1} }},
	}
	for _, tc := range cases {
		m, err := DecodeManifest(good)
		if err != nil {
			t.Fatal(err)
		}
		tc.mutate(m)
		_, err = DecodeManifest(rawEncode(t, m))
		if !errors.Is(err, ErrManifest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want ErrManifest mentioning %q", tc.name, err, tc.want)
		}
	}
	texts := []struct{ name, in, want string }{
		{"empty", ``, "empty"},
		{"not json", `{"format":`, "truncated"},
		{"unknown field", strings.Replace(string(good), `"step"`, `"stepp": 1, "step"`, 1), "unknown field"},
		{"trailing", string(good) + `{}`, "after the JSON"},
		{"checksum", strings.Replace(string(good), `"generation": 3`, `"generation": 4`, 1), "checksum"},
		{"dtype", strings.Replace(string(good), `"F32"`, `"F33"`, 1), "dtype"},
	}
	for _, tc := range texts {
		_, err := DecodeManifest([]byte(tc.in))
		if !errors.Is(err, ErrManifest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want ErrManifest mentioning %q", tc.name, err, tc.want)
		}
	}
	v3 := strings.Replace(string(good), `"version": 2`, `"version": 3`, 1)
	if _, err := DecodeManifest([]byte(v3)); !errors.Is(err, ErrVersion) {
		t.Errorf("version 3: %v", err)
	}
}

// TestManifestByteFlips: inverting any single byte of a manifest is
// detected, by the JSON syntax, the validation or the checksum.
func TestManifestByteFlips(t *testing.T) {
	good := smallManifest(t)
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0xff
		if _, err := DecodeManifest(b); err == nil {
			t.Fatalf("byte %d (%q) inverted and the manifest still decodes", i, good[i])
		}
	}
}

// FuzzDecodeManifest: no input panics the decoder, and whatever it accepts
// encodes and decodes back to the same manifest.
func FuzzDecodeManifest(f *testing.F) {
	good := smallManifest(f)
	f.Add(good)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"format":"troupe-checkpoint","version":1,"world":{"size":1,"dp":1,"pp":1},"files":[],"tensors":[]}`))
	f.Add(bytes.Replace(good, []byte(`"offsets": [`), []byte(`"offsets": [-1, `), 1))
	f.Add(tpManifest(f))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			return
		}
		out, err := EncodeManifest(m)
		if err != nil {
			t.Fatalf("accepted manifest does not encode: %v", err)
		}
		m2, err := DecodeManifest(out)
		if err != nil {
			t.Fatalf("re-encoded manifest does not decode: %v", err)
		}
		m.index, m2.index = nil, nil
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip changed the manifest")
		}
	})
}

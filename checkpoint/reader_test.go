package checkpoint

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// loadAll opens the latest checkpoint and reads every tensor, as a resume
// of a one-rank world does.
func loadAll(fsys FS, dir string) error {
	ck, err := OpenLatest(fsys, dir)
	if err != nil {
		return err
	}
	defer ck.Close()
	for _, t := range ck.Manifest.Tensors {
		if _, err := ck.ReadTensor(t.Name); err != nil {
			return err
		}
	}
	return nil
}

// osCheckpoint saves a random model as 2 data-parallel ranks to a real
// directory and returns the model, the root and the step directory.
func osCheckpoint(t *testing.T) (*model, string, string) {
	r := rand.New(rand.NewPCG(11, 12))
	m := randomModel(r)
	for len(m.params) < 3 {
		m = randomModel(r)
	}
	root := filepath.Join(t.TempDir(), "ckpt")
	if _, err := Save(OSFS{}, root, m.snapshot(9, 2, 1, []int{0, len(m.params)}), 0); err != nil {
		t.Fatal(err)
	}
	return m, root, filepath.Join(root, StepDirName(9))
}

func wantCorrupt(t *testing.T, what string, err error, file string, words ...string) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrManifest) {
		t.Fatalf("%s: got %v, want a corruption error", what, err)
	}
	for _, w := range append([]string{file}, words...) {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("%s: error %q does not mention %q", what, err, w)
		}
	}
}

// TestDetectsDamage damages a real checkpoint on disk in each way the issue
// names (a flipped byte in data or header, a truncated file, a missing
// shard, a damaged manifest) and checks that loading fails with an error
// naming the file, and that the undamaged checkpoint loads.
func TestDetectsDamage(t *testing.T) {
	m, root, stepDir := osCheckpoint(t)
	if err := loadAll(OSFS{}, root); err != nil {
		t.Fatal(err)
	}
	ck, _ := OpenLatest(OSFS{}, root)
	m.checkAll(t, ck)
	ck.Close()
	shard := filepath.Join(stepDir, ShardFileName(1, 2))
	orig, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	restore := func() {
		if err := os.WriteFile(shard, orig, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	damage := func(b []byte) {
		if err := os.WriteFile(shard, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	flipped := bytes.Clone(orig)
	flipped[len(flipped)-1] ^= 1
	damage(flipped)
	wantCorrupt(t, "flipped data byte", loadAll(OSFS{}, root), shard, "CRC-32C")
	ck, err = OpenLatest(OSFS{}, root)
	if err != nil {
		t.Fatal(err)
	}
	wantCorrupt(t, "flipped data byte, Verify", ck.Verify(), shard, "CRC-32C")
	ck.Close()
	restore()

	flipped = bytes.Clone(orig)
	flipped[12] ^= 1
	damage(flipped)
	wantCorrupt(t, "flipped header byte", loadAll(OSFS{}, root), shard)
	restore()

	damage(orig[:len(orig)-1])
	wantCorrupt(t, "truncated shard", loadAll(OSFS{}, root), shard, "truncated")
	restore()

	if err := os.Remove(shard); err != nil {
		t.Fatal(err)
	}
	wantCorrupt(t, "missing shard", loadAll(OSFS{}, root), shard, "missing")
	restore()

	mpath := filepath.Join(stepDir, ManifestFile)
	mb, _ := os.ReadFile(mpath)
	i := bytes.Index(mb, []byte(`"step": 9`)) + len(`"step": `)
	mb[i] = '8'
	os.WriteFile(mpath, mb, 0o644)
	wantCorrupt(t, "manifest with another step", loadAll(OSFS{}, root), mpath, "checksum")
	mb[i] = '9'
	os.WriteFile(mpath, mb, 0o644)
	if err := loadAll(OSFS{}, root); err != nil {
		t.Fatalf("after repair: %v", err)
	}
	os.Remove(mpath)
	wantCorrupt(t, "missing manifest", loadAll(OSFS{}, root), mpath)
}

// TestEveryShardByteIsChecked inverts each byte of each shard file of a
// small checkpoint in turn: opening it or verifying it must fail and name
// the file, so no byte of a checkpoint goes unchecked.
func TestEveryShardByteIsChecked(t *testing.T) {
	base := NewMemFS()
	if _, err := Save(base, "ckpt", smallModel().snapshot(7, 2, 1, []int{0, 2}), 0); err != nil {
		t.Fatal(err)
	}
	for rank := 0; rank < 2; rank++ {
		path := filepath.Join("ckpt", StepDirName(7), ShardFileName(rank, 2))
		orig, err := readFile(base, path, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for i := range orig {
			fsys := base.Clone()
			b := bytes.Clone(orig)
			b[i] ^= 0xff
			writeAll(t, fsys, path, string(b), true)
			ck, err := OpenLatest(fsys, "ckpt")
			if err == nil {
				err = ck.Verify()
				ck.Close()
			}
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("byte %d of %s inverted: %v", i, path, err)
			}
		}
	}
}

func TestLatestErrors(t *testing.T) {
	fsys := NewMemFS()
	if _, err := Latest(fsys, "nowhere"); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("missing dir: %v", err)
	}
	fsys.MkdirAll("ckpt")
	if _, err := OpenLatest(fsys, "ckpt"); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("empty dir: %v", err)
	}
	writeAll(t, fsys, "ckpt/latest", "../../etc\n", true)
	if _, err := Latest(fsys, "ckpt"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("bad pointer: %v", err)
	}
	writeAll(t, fsys, "ckpt/latest", "step-000004\n", true)
	if _, err := Latest(fsys, "ckpt"); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "step-000004") {
		t.Fatalf("dangling pointer: %v", err)
	}
	if _, err := Open(fsys, "ckpt", 4); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("missing step: %v", err)
	}
}

func TestCheckpointReadErrors(t *testing.T) {
	_, ck := saveModel(t, smallModel(), 7, 1, 1, []int{0, 2})
	if _, err := ck.ReadTensor("nope"); !errors.Is(err, ErrMismatch) {
		t.Fatal(err)
	}
	if err := ck.ReadElements("fc.bias", 0, 3, make([]byte, 4)); !errors.Is(err, ErrMismatch) {
		t.Fatalf("short buffer: %v", err)
	}
	if err := ck.Execute([]Read{{Tensor: "fc.bias", Slice: 5}}, nil); !errors.Is(err, ErrMismatch) {
		t.Fatalf("bad slice: %v", err)
	}
	if err := ck.Execute([]Read{{Tensor: "fc.bias", Slice: 0, Len: 8, DstOff: 0}}, make([]byte, 4)); !errors.Is(err, ErrMismatch) {
		t.Fatalf("read past the buffer: %v", err)
	}
	ws, err := ck.Weights()
	if err != nil || len(ws) != 2 || ws[0].Name != "fc.weight" || ws[1].Name != "fc.bias" {
		t.Fatalf("weights %v %v", ws, err)
	}
}

package checkpoint

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestInspect builds a directory with two committed checkpoints, one
// renamed into place but never committed, a leftover temporary directory
// and a damaged shard, and checks what Inspect says about each.
func TestInspect(t *testing.T) {
	m := smallModel()
	fsys := NewMemFS()
	for step := int64(1); step <= 3; step++ {
		if _, err := Save(fsys, "ckpt", m.snapshot(step, 2, 1, []int{0, 2}), 0); err != nil {
			t.Fatal(err)
		}
	}
	// Step 3 loses its commit: latest goes back to step 2.
	writeAll(t, fsys, "ckpt/latest", "step-000002\n", true)
	fsys.MkdirAll("ckpt/step-000004.tmp-0badf00d")
	shard := filepath.Join("ckpt", "step-000001", ShardFileName(0, 2))
	b, _ := readFile(fsys, shard, 1<<20)
	b = bytes.Clone(b)
	b[len(b)-1] ^= 4
	writeAll(t, fsys, shard, string(b), true)

	rep, err := Inspect(fsys, "ckpt", true)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || rep.Latest != 2 || !slices.Equal(rep.Leftovers, []string{"step-000004.tmp-0badf00d"}) || len(rep.Checkpoints) != 3 {
		t.Fatalf("report %+v", rep)
	}
	c1, c2, c3 := rep.Checkpoints[0], rep.Checkpoints[1], rep.Checkpoints[2]
	if c1.OK || c1.Files[0].OK || !strings.Contains(c1.Files[0].Error, shard) || !c1.Files[1].OK {
		t.Fatalf("damaged step 1: %+v", c1)
	}
	if !c2.OK || !c2.Latest || !c2.Committed || c2.Meta.Step != 2 || c2.Tensors != 6 || c2.Params != 9 || c2.Bytes == 0 {
		t.Fatalf("step 2: %+v", c2)
	}
	if !c3.OK || c3.Committed || c3.Latest {
		t.Fatalf("uncommitted step 3: %+v", c3)
	}
	// Without verification only sizes and headers are checked.
	rep, _ = Inspect(fsys, "ckpt", false)
	if !rep.OK || rep.Checkpoints[0].Verified {
		t.Fatalf("unverified report %+v", rep)
	}
	// A pointer to nothing is a problem of the directory.
	writeAll(t, fsys, "ckpt/latest", "step-000009\n", true)
	rep, _ = Inspect(fsys, "ckpt", false)
	if rep.OK || !strings.Contains(rep.Error, "step-000009") {
		t.Fatalf("dangling pointer: %+v", rep)
	}
	if _, err := Inspect(fsys, "nowhere", true); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("missing directory: %v", err)
	}
	// A broken manifest is reported against its checkpoint.
	writeAll(t, fsys, "ckpt/step-000002/manifest.json", "{", true)
	rep, _ = Inspect(fsys, "ckpt", true)
	if rep.Checkpoints[1].OK || !strings.Contains(rep.Checkpoints[1].Error, "manifest.json") {
		t.Fatalf("broken manifest: %+v", rep.Checkpoints[1])
	}
}

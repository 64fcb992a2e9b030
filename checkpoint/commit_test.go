package checkpoint

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseStepDir(t *testing.T) {
	for name, want := range map[string]int64{"step-000000": 0, "step-000123": 123, "step-1234567": 1234567} {
		if got, ok := ParseStepDir(name); !ok || got != want {
			t.Errorf("%s: %d %v", name, got, ok)
		}
		if StepDirName(want) != name {
			t.Errorf("StepDirName(%d) = %s", want, StepDirName(want))
		}
	}
	for _, name := range []string{"step-1", "step-0000001", "step--00001", "step-00000x", "step-000001.tmp-ab", "latest", "step-99999999999999999999"} {
		if _, ok := ParseStepDir(name); ok {
			t.Errorf("%s accepted", name)
		}
	}
}

// TestPlanCommit pins the commit protocol step by step.
func TestPlanCommit(t *testing.T) {
	in := commitInput{
		Dir: "ckpt", Tmp: "step-000030.tmp-aa", Step: 30, Manifest: []byte("{}"),
		Entries:    []string{"latest", "step-000010", "step-000020", "step-000030", "step-000025.tmp-bb", "latest.tmp-cc", "step-000030.tmp-aa"},
		TmpEntries: []string{"part-00000.json", "shard-00000-of-00001.safetensors"},
		Latest:     "step-000020", Keep: 2, Nonce: "dd",
	}
	acts, err := planCommit(in)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range acts {
		got = append(got, a.String())
	}
	want := []string{
		"write+fsync ckpt/step-000030.tmp-aa/manifest.json (2 bytes)",
		"remove ckpt/step-000030.tmp-aa/part-00000.json",
		"fsync-dir ckpt/step-000030.tmp-aa",
		// An uncommitted step-000030 from a crashed run is replaced; it is
		// moved out of the way first, so that a kill halfway through the
		// removal leaves no directory that looks like a torn checkpoint.
		"rename ckpt/step-000030 -> ckpt/step-000030.tmp-trash-dd",
		"fsync-dir ckpt",
		"remove-all ckpt/step-000030.tmp-trash-dd",
		"rename ckpt/step-000030.tmp-aa -> ckpt/step-000030",
		"fsync-dir ckpt",
		"write+fsync ckpt/latest.tmp-dd (12 bytes)",
		"rename ckpt/latest.tmp-dd -> ckpt/latest", // the commit point
		"fsync-dir ckpt",
		"rename ckpt/step-000010 -> ckpt/step-000010.tmp-trash-dd (prune)",
		"fsync-dir ckpt (prune)",
		"remove-all ckpt/latest.tmp-cc (prune)",
		"remove-all ckpt/step-000010.tmp-trash-dd (prune)",
		"remove-all ckpt/step-000025.tmp-bb (prune)",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("plan:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	in.Latest = "step-000030"
	if _, err := planCommit(in); !errors.Is(err, ErrCommitted) {
		t.Fatalf("committing the latest step again: %v", err)
	}
}

func TestSelectPrune(t *testing.T) {
	entries := []string{"latest", "notes.txt", "step-000001", "step-000002", "step-000003", "step-000004", "step-000005", "step-000004.tmp-x"}
	cases := []struct {
		step int64
		keep int
		want []string
	}{
		{4, 0, []string{"step-000004.tmp-x"}},
		{4, 1, []string{"step-000001", "step-000002", "step-000003", "step-000004.tmp-x", "step-000005"}},
		{4, 3, []string{"step-000001", "step-000004.tmp-x", "step-000005"}},
		{5, 10, []string{"step-000004.tmp-x"}},
	}
	for _, c := range cases {
		got := selectPrune(entries, "", c.step, c.keep)
		if !slices.Equal(got, c.want) {
			t.Errorf("step %d keep %d: %v, want %v", c.step, c.keep, got, c.want)
		}
	}
	if got := selectPrune(entries, "step-000004.tmp-x", 5, 0); len(got) != 0 {
		t.Errorf("pruned its own temporary directory: %v", got)
	}
}

func TestKeepAndResave(t *testing.T) {
	m := smallModel()
	fsys := NewMemFS()
	for step := int64(1); step <= 5; step++ {
		if _, err := Save(fsys, "ckpt", m.snapshot(step, 1, 1, []int{0, 2}), 2); err != nil {
			t.Fatal(err)
		}
	}
	names, _ := fsys.List("ckpt")
	if want := []string{"latest", "step-000004", "step-000005"}; !slices.Equal(names, want) {
		t.Fatalf("keep 2 left %v", names)
	}
	if _, err := Save(fsys, "ckpt", m.snapshot(5, 2, 1, []int{0, 2}), 2); !errors.Is(err, ErrCommitted) {
		t.Fatalf("saving the latest step again: %v", err)
	}
	// A resume from step 4 (say the user pointed latest back) that saves
	// step 5 again replaces the abandoned step 5.
	writeAll(t, fsys, "ckpt/latest", "step-000004\n", true)
	if _, err := Save(fsys, "ckpt", m.snapshot(5, 2, 1, []int{0, 2}), 2); err != nil {
		t.Fatal(err)
	}
	ck, err := OpenLatest(fsys, "ckpt")
	if err != nil || ck.Manifest.World.DP != 2 {
		t.Fatalf("after re-saving step 5: %v", err)
	}
	ck.Close()
	// Keep 0 keeps everything.
	for step := int64(6); step <= 8; step++ {
		if _, err := Save(fsys, "ckpt", m.snapshot(step, 1, 1, []int{0, 2}), 0); err != nil {
			t.Fatal(err)
		}
	}
	if names, _ := fsys.List("ckpt"); len(names) != 6 {
		t.Fatalf("keep 0 left %v", names)
	}
}

// TestMultiProcessProtocol runs the path a multi-process world takes: the
// leader begins, every rank writes its shard and part manifest on its own,
// the leader reads the parts and commits.
func TestMultiProcessProtocol(t *testing.T) {
	m := smallModel()
	fsys := NewMemFS()
	const dp, pp = 2, 2
	bounds := []int{0, 1, 2}
	tmp, err := BeginSave(fsys, "ckpt", 7)
	if err != nil {
		t.Fatal(err)
	}
	full := m.snapshot(7, dp, pp, bounds)
	for st := 0; st < pp; st++ {
		// Each rank's snapshot holds its own stage only.
		own := &Snapshot{Meta: full.Meta}
		for _, tn := range full.Tensors {
			if tn.Stage == st {
				own.Add(tn)
			}
		}
		for d := 0; d < dp; d++ {
			sh, err := own.Shard(st, d, 0)
			if err != nil {
				t.Fatal(err)
			}
			p, err := WriteShard(fsys, "ckpt/"+tmp, sh)
			if err != nil {
				t.Fatal(err)
			}
			if err := WritePart(fsys, "ckpt/"+tmp, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	parts, err := ReadParts(fsys, "ckpt/"+tmp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := BuildManifest(full.Meta, parts[:3]); !errors.Is(err, ErrManifest) {
		t.Fatalf("a missing rank: %v", err)
	}
	man, err := BuildManifest(full.Meta, parts)
	if err != nil {
		t.Fatal(err)
	}
	if err := Commit(fsys, "ckpt", tmp, man, CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	ck, err := OpenLatest(fsys, "ckpt")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	m.checkAll(t, ck)
	names, _ := fsys.List("ckpt/step-000007")
	for _, n := range names {
		if strings.HasPrefix(n, "part-") {
			t.Fatalf("part manifest %s left in the committed checkpoint", n)
		}
	}
	// The same checkpoint written by one process is byte-identical.
	one := NewMemFS()
	Save(one, "ckpt", full, 0)
	a, _ := readFile(one, "ckpt/step-000007/manifest.json", MaxManifestSize)
	b, _ := readFile(fsys, "ckpt/step-000007/manifest.json", MaxManifestSize)
	if string(a) != string(b) {
		t.Fatal("multi-process manifest differs from the one-process one")
	}
}

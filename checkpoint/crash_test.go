package checkpoint

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// crashFixture is a checkpoint root holding two committed checkpoints
// (steps 1 and 2, keep 2) and an uncommitted step 3 of other values (a run
// that crashed between renaming its directory and moving latest), and the
// model that the step-3 save writes over it.
type crashFixture struct {
	base   *MemFS
	models map[int64]*model
	dp, pp int
	bounds []int
}

func newCrashFixture(t *testing.T, seed uint64) *crashFixture {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 4))
	f := &crashFixture{base: NewMemFS(), models: map[int64]*model{}, dp: 2, pp: 2}
	m := randomModel(r)
	for len(m.params) < 2 {
		m = randomModel(r)
	}
	f.bounds = []int{0, 1, len(m.params)}
	for step := int64(1); step <= 3; step++ {
		// Same shapes, new values: the steps of one run.
		sm := &model{params: m.params, opt: m.opt, data: map[string][]byte{}}
		for k, v := range m.data {
			d := slices.Clone(v)
			for i := range d {
				d[i] ^= byte(step)
			}
			sm.data[k] = d
		}
		f.models[step] = sm
	}
	for step := int64(1); step <= 2; step++ {
		if _, err := Save(f.base, "ckpt", f.snapshot(step), 2); err != nil {
			t.Fatal(err)
		}
	}
	stale := f.models[1].snapshot(3, f.dp, f.pp, f.bounds)
	if _, err := Save(f.base, "ckpt", stale, 0); err != nil {
		t.Fatal(err)
	}
	writeAll(t, f.base, "ckpt/latest.tmp-x", "step-000002\n", true)
	f.base.Rename("ckpt/latest.tmp-x", "ckpt/latest")
	f.base.SyncDir("ckpt")
	return f
}

func (f *crashFixture) snapshot(step int64) *Snapshot {
	return f.models[step].snapshot(step, f.dp, f.pp, f.bounds)
}

// checkRecovered checks a file system after a failed or crashed save of
// step 3: latest names step 2 or 3, that checkpoint verifies and holds
// exactly the saved tensors, and a new save of step 3 commits and leaves
// no leftovers.
func (f *crashFixture) checkRecovered(t *testing.T, fsys *MemFS, what string, trace []string) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s: %s\noperations until then:\n  %s", what, fmt.Sprintf(format, args...), strings.Join(trace, "\n  "))
	}
	step, err := Latest(fsys, "ckpt")
	if err != nil {
		fail("latest: %v", err)
	}
	if step != 2 && step != 3 {
		fail("latest is step %d", step)
	}
	ck, err := OpenLatest(fsys, "ckpt")
	if err != nil {
		fail("opening step %d: %v", step, err)
	}
	if err := ck.Verify(); err != nil {
		fail("verifying step %d: %v", step, err)
	}
	f.models[step].checkAll(t, ck)
	ck.Close()
	// No step directory is torn either: a crash in the middle of removing
	// one (a prune, or the replacement of an uncommitted step) must not
	// leave a checkpoint that lacks files.
	rep, err := Inspect(fsys, "ckpt", true)
	if err != nil {
		fail("inspect: %v", err)
	}
	for _, c := range rep.Checkpoints {
		if !c.OK {
			fail("%s is damaged: %s", c.Name, c.Error)
		}
	}
	if step == 3 {
		// The previous checkpoint is kept (keep 2) and still whole.
		prev, err := Open(fsys, "ckpt", 2)
		if err != nil {
			fail("step 2 after committing 3: %v", err)
		}
		if err := prev.Verify(); err != nil {
			fail("step 2 after committing 3: %v", err)
		}
		prev.Close()
	}
	_, err = Save(fsys, "ckpt", f.snapshot(3), 2)
	if step == 3 && !errors.Is(err, ErrCommitted) || step == 2 && err != nil {
		fail("saving step 3 again: %v", err)
	}
	if step == 3 {
		// Prune leftovers the way the next commit would.
		if err := Prune(fsys, "ckpt", 2); err != nil {
			fail("prune: %v", err)
		}
	}
	names, _ := fsys.List("ckpt")
	if want := []string{LatestFile, "step-000002", "step-000003"}; !slices.Equal(names, want) {
		fail("after a clean save the directory holds %v, want %v", names, want)
	}
}

// TestCrashAtEveryOperation saves step 3 over steps 1 and 2 and crashes it
// at each changing file-system operation in turn (every create, write,
// fsync, close, rename, remove, mkdir and directory fsync), then restarts
// from the disk a power loss would leave: strictly only synced state, and
// several torn states where the disk got further. Each time the latest
// checkpoint must load and verify.
func TestCrashAtEveryOperation(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		f := newCrashFixture(t, seed)
		count := NewFaultFS(f.base.Clone())
		if _, err := Save(count, "ckpt", f.snapshot(3), 2); err != nil {
			t.Fatal(err)
		}
		ops := count.Ops()
		kinds := map[string]bool{}
		for _, line := range count.Trace() {
			kinds[strings.Fields(line)[1]] = true
		}
		for _, k := range []string{"mkdir", "create", "write", "sync", "close", "remove", "rename", "syncdir"} {
			if !kinds[k] {
				t.Fatalf("the save made no %s operation: %v", k, count.Trace())
			}
		}
		for i := 1; i <= ops; i++ {
			mem := f.base.Clone()
			ffs := NewFaultFS(mem, Fault{Op: OpAny, N: i, Mode: Crash, Torn: 5})
			if _, err := Save(ffs, "ckpt", f.snapshot(3), 2); !errors.Is(err, ErrCrashed) {
				t.Fatalf("seed %d: crash at operation %d of %d: Save returned %v", seed, i, ops, err)
			}
			trace := ffs.Trace()
			f.checkRecovered(t, mem.Crash(), fmt.Sprintf("seed %d, strict crash at %s", seed, trace[len(trace)-1]), trace)
			for k := uint64(0); k < 3; k++ {
				torn := mem.CrashTorn(rand.New(rand.NewPCG(seed, uint64(i)*8+k)))
				f.checkRecovered(t, torn, fmt.Sprintf("seed %d, torn crash %d at %s", seed, k, trace[len(trace)-1]), trace)
			}
		}
	}
}

// TestFailAtEveryOperation makes each operation of the save fail (EIO,
// ENOSPC) while the process goes on: Save reports it, the latest
// checkpoint stays loadable, and the next save succeeds.
func TestFailAtEveryOperation(t *testing.T) {
	f := newCrashFixture(t, 3)
	count := NewFaultFS(f.base.Clone())
	if _, err := Save(count, "ckpt", f.snapshot(3), 2); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= count.Ops(); i++ {
		mem := f.base.Clone()
		ffs := NewFaultFS(mem, Fault{Op: OpAny, N: i, Mode: Fail, Torn: 3})
		_, err := Save(ffs, "ckpt", f.snapshot(3), 2)
		if !errors.Is(err, ErrInjected) {
			t.Fatalf("failure at operation %d: Save returned %v", i, err)
		}
		f.checkRecovered(t, mem, fmt.Sprintf("failure at operation %d", i), ffs.Trace())
	}
}

// TestPruneFailureKeepsCommit: an error after the commit point says so.
func TestPruneFailureKeepsCommit(t *testing.T) {
	f := newCrashFixture(t, 4)
	// The prune of step 1 is the last remove-all of the save.
	count := NewFaultFS(f.base.Clone())
	Save(count, "ckpt", f.snapshot(3), 2)
	n := 0
	for _, line := range count.Trace() {
		if strings.Fields(line)[1] == "remove" {
			n++
		}
	}
	mem := f.base.Clone()
	_, err := Save(NewFaultFS(mem, Fault{Op: OpRemove, N: n, Mode: Fail}), "ckpt", f.snapshot(3), 2)
	if !errors.Is(err, ErrPrune) {
		t.Fatalf("got %v, want ErrPrune", err)
	}
	if step, err := Latest(mem, "ckpt"); err != nil || step != 3 {
		t.Fatalf("latest %d, %v after a prune failure", step, err)
	}
}

// TestCompletedSaveIsDurable: once Save returns, the checkpoint survives a
// power loss, including the first one into a directory Save had to create
// (whose entry in its parent must be synced too).
func TestCompletedSaveIsDurable(t *testing.T) {
	m := smallModel()
	fsys := NewMemFS()
	fsys.MkdirAll("runs")
	fsys.SyncDir(".")
	dir := "runs/a/ckpt"
	for step := int64(1); step <= 2; step++ {
		if _, err := Save(fsys, dir, m.snapshot(step, 2, 1, []int{0, 2}), 1); err != nil {
			t.Fatal(err)
		}
		after := fsys.Crash()
		got, err := Latest(after, dir)
		if err != nil || got != step {
			t.Fatalf("after saving step %d and a crash: latest %d, %v", step, got, err)
		}
		ck, err := OpenLatest(after, dir)
		if err != nil {
			t.Fatal(err)
		}
		m.checkAll(t, ck)
		ck.Close()
	}
	// Crashing the first save at each operation leaves no checkpoint or a
	// whole one.
	count := NewFaultFS(NewMemFS())
	if _, err := Save(count, dir, m.snapshot(1, 2, 1, []int{0, 2}), 1); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= count.Ops(); i++ {
		mem := NewMemFS()
		Save(NewFaultFS(mem, Fault{Op: OpAny, N: i, Mode: Crash}), dir, m.snapshot(1, 2, 1, []int{0, 2}), 1)
		after := mem.Crash()
		step, err := Latest(after, dir)
		if errors.Is(err, ErrNoCheckpoint) {
			continue
		}
		if err != nil || step != 1 {
			t.Fatalf("first save crashed at operation %d: latest %d, %v", i, step, err)
		}
		if err := loadAll(after, dir); err != nil {
			t.Fatalf("first save crashed at operation %d: %v", i, err)
		}
	}
}

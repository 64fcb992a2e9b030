package checkpoint

import (
	"errors"
	iofs "io/fs"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
)

func writeAll(t *testing.T, fsys FS, name, content string, sync bool) {
	t.Helper()
	f, err := fsys.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, fsys FS, name string) (string, bool) {
	t.Helper()
	b, err := readFile(fsys, name, 1<<20)
	if errors.Is(err, iofs.ErrNotExist) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b), true
}

// fsContract runs the operations this package relies on against fsys.
func fsContract(t *testing.T, fsys FS, root string) {
	p := func(s ...string) string { return filepath.Join(append([]string{root}, s...)...) }
	if err := fsys.MkdirAll(p("a", "b")); err != nil {
		t.Fatal(err)
	}
	writeAll(t, fsys, p("a", "b", "f"), "hello", true)
	if got, ok := readAll(t, fsys, p("a", "b", "f")); !ok || got != "hello" {
		t.Fatalf("read back %q, %v", got, ok)
	}
	st, err := fsys.Stat(p("a", "b", "f"))
	if err != nil || st.Size() != 5 || st.IsDir() {
		t.Fatalf("stat: %v %v", st, err)
	}
	if _, err := fsys.Create(p("missing", "f")); !errors.Is(err, iofs.ErrNotExist) {
		t.Fatalf("create in a missing directory: %v", err)
	}
	if _, err := fsys.Open(p("a", "nope")); !errors.Is(err, iofs.ErrNotExist) {
		t.Fatalf("open of a missing file: %v", err)
	}
	writeAll(t, fsys, p("a", "g"), "x", false)
	if err := fsys.Rename(p("a", "g"), p("a", "b", "f")); err != nil {
		t.Fatal(err)
	}
	if got, _ := readAll(t, fsys, p("a", "b", "f")); got != "x" {
		t.Fatalf("rename did not replace the file: %q", got)
	}
	if err := fsys.Rename(p("a", "b"), p("a", "c")); err != nil {
		t.Fatal(err)
	}
	names, err := fsys.List(p("a"))
	if err != nil || !slices.Equal(names, []string{"c"}) {
		t.Fatalf("list after directory rename: %v %v", names, err)
	}
	if err := fsys.Remove(p("a", "c")); err == nil {
		t.Fatal("removing a non-empty directory succeeded")
	}
	if err := fsys.SyncDir(p("a", "c")); err != nil {
		t.Fatal(err)
	}
	if err := fsys.RemoveAll(p("a", "c")); err != nil {
		t.Fatal(err)
	}
	if err := fsys.RemoveAll(p("a", "c")); err != nil {
		t.Fatalf("RemoveAll of a missing path: %v", err)
	}
	if names, _ := fsys.List(p("a")); len(names) != 0 {
		t.Fatalf("left %v", names)
	}
}

func TestOSFSContract(t *testing.T)  { fsContract(t, OSFS{}, t.TempDir()) }
func TestMemFSContract(t *testing.T) { fsContract(t, NewMemFS(), "root") }

// TestMemFSDurability checks the crash model case by case: what POSIX
// promises survives, nothing else does.
func TestMemFSDurability(t *testing.T) {
	m := NewMemFS()
	if err := m.MkdirAll("d"); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir("."); err != nil {
		t.Fatal(err)
	}
	writeAll(t, m, "d/synced", "data", true)    // file synced, entry not yet
	writeAll(t, m, "d/unsynced", "lost", false) // neither
	if _, ok := readAll(t, m.Crash(), "d/synced"); ok {
		t.Fatal("an entry survived without a directory sync")
	}
	if err := m.SyncDir("d"); err != nil {
		t.Fatal(err)
	}
	c := m.Crash()
	if got, ok := readAll(t, c, "d/synced"); !ok || got != "data" {
		t.Fatalf("synced file after crash: %q %v", got, ok)
	}
	if got, ok := readAll(t, c, "d/unsynced"); !ok || got != "" {
		t.Fatalf("unsynced file after crash: %q %v, want an empty file", got, ok)
	}
	// A rename is durable only once the directory is synced.
	if err := m.Rename("d/synced", "d/renamed"); err != nil {
		t.Fatal(err)
	}
	c = m.Crash()
	if _, ok := readAll(t, c, "d/renamed"); ok {
		t.Fatal("rename survived without a directory sync")
	}
	if got, _ := readAll(t, c, "d/synced"); got != "data" {
		t.Fatal("the old name did not come back")
	}
	if err := m.SyncDir("d"); err != nil {
		t.Fatal(err)
	}
	if got, _ := readAll(t, m.Crash(), "d/renamed"); got != "data" {
		t.Fatal("synced rename lost")
	}
	// Appends after a sync are lost by Crash, kept in part by CrashTorn.
	f, _ := m.Create("d/log")
	f.Write([]byte("abc"))
	f.Sync()
	f.Write([]byte("defgh"))
	f.Close()
	m.SyncDir("d")
	if got, _ := readAll(t, m.Crash(), "d/log"); got != "abc" {
		t.Fatalf("after crash: %q, want the synced %q", got, "abc")
	}
	lengths := map[int]bool{}
	for seed := uint64(0); seed < 64; seed++ {
		got, _ := readAll(t, m.CrashTorn(rand.New(rand.NewPCG(seed, 1))), "d/log")
		if got != "abcdefgh"[:len(got)] || len(got) < 3 {
			t.Fatalf("torn crash left %q, want a prefix of abcdefgh holding abc", got)
		}
		lengths[len(got)] = true
	}
	if len(lengths) < 4 {
		t.Fatalf("torn crashes kept only lengths %v", lengths)
	}
	// The original is untouched by crashes, and a clone is independent.
	cl := m.Clone()
	writeAll(t, cl, "d/new", "n", true)
	if _, ok := readAll(t, m, "d/new"); ok {
		t.Fatal("a write to a clone reached the original")
	}
}

func TestFaultFS(t *testing.T) {
	m := NewMemFS()
	f := NewFaultFS(m, Fault{Op: OpSync, N: 2, Mode: Fail}, Fault{Op: OpRename, N: 1, Mode: Crash})
	writeAll(t, f, "a", "1", true) // sync 1 passes
	g, _ := f.Create("b")
	if err := g.Sync(); !errors.Is(err, ErrInjected) {
		t.Fatalf("second sync: %v, want ErrInjected", err)
	}
	g.Close()
	writeAll(t, f, "c", "3", true) // later syncs pass again
	if err := f.Rename("a", "d"); !errors.Is(err, ErrCrashed) {
		t.Fatalf("rename: %v, want ErrCrashed", err)
	}
	if !f.Crashed() {
		t.Fatal("not crashed")
	}
	if _, err := f.Stat("c"); !errors.Is(err, ErrCrashed) {
		t.Fatalf("stat after the crash: %v", err)
	}
	if _, ok := readAll(t, m, "a"); !ok {
		t.Fatal("the crashing rename happened")
	}
	// create a, write, sync, close; create b, sync, close; create c, write, sync, close; rename.
	if got := f.Ops(); got != 12 {
		t.Fatalf("counted %d changing operations, want 12:\n%v", got, f.Trace())
	}

	// A torn write lands its first Torn bytes.
	m = NewMemFS()
	f = NewFaultFS(m, Fault{Op: OpWrite, N: 1, Mode: Fail, Torn: 2})
	h, _ := f.Create("t")
	if n, err := h.Write([]byte("hello")); n != 2 || !errors.Is(err, ErrInjected) {
		t.Fatalf("torn write: %d, %v", n, err)
	}
	h.Close()
	if got, _ := readAll(t, m, "t"); got != "he" {
		t.Fatalf("file holds %q after a torn write", got)
	}
}

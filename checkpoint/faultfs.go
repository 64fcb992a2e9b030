package checkpoint

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"sync"
)

// Op is a kind of FS operation, as FaultFS counts them.
type Op uint8

// The operations. OpAny matches every operation that changes the file
// system (create, write, sync, close, remove, rename, mkdir, sync-dir) and
// none that only reads, because a crash between two reads is the same crash
// as one after the last change.
const (
	OpAny Op = iota
	OpCreate
	OpWrite
	OpSync
	OpClose
	OpRemove
	OpRename
	OpMkdir
	OpSyncDir
	OpOpen
	OpRead
	OpList
	OpStat
	numOps
)

var opNames = [numOps]string{"any", "create", "write", "sync", "close", "remove", "rename", "mkdir", "syncdir", "open", "read", "list", "stat"}

// String returns the operation's name.
func (o Op) String() string {
	if o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

func (o Op) mutates() bool { return o >= OpCreate && o <= OpSyncDir }

// FaultMode says what an injected fault does.
type FaultMode uint8

const (
	// Fail makes the operation return ErrInjected; later operations go on
	// normally (a full disk, an EIO).
	Fail FaultMode = iota
	// Crash stops the world at the operation: it does not happen (a write
	// may land torn, see Fault.Torn) and every later operation of the FaultFS
	// and its files returns ErrCrashed. Pair it with MemFS.Crash or
	// CrashTorn to get the disk a restarted process would see.
	Crash
)

// String returns "fail" or "crash".
func (m FaultMode) String() string {
	if m == Crash {
		return "crash"
	}
	return "fail"
}

// Fault injects one failure: at the N-th operation (1-based) that matches
// Op, counted from the FaultFS's creation.
type Fault struct {
	Op   Op
	N    int
	Mode FaultMode
	// Torn is, for a write, how many of its bytes reach the file before it
	// fails or crashes (a short or torn write); 0 writes none.
	Torn int
}

// FaultFS wraps an FS and injects faults by operation count. It also counts
// and records every operation, so a test can run a save once to learn how
// many operations it takes and then crash it at each one in turn.
type FaultFS struct {
	inner FS

	mu      sync.Mutex
	faults  []Fault
	counts  [numOps]int
	crashed bool
	trace   []string
}

var _ FS = (*FaultFS)(nil)

// NewFaultFS wraps inner with the given faults.
func NewFaultFS(inner FS, faults ...Fault) *FaultFS {
	return &FaultFS{inner: inner, faults: faults}
}

// Ops returns how many changing operations (OpAny) have been made.
func (f *FaultFS) Ops() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[OpAny]
}

// Crashed reports whether a Crash fault has fired.
func (f *FaultFS) Crashed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.crashed
}

// Trace returns the changing operations made so far, one line each
// ("3 sync dir/step-000001.tmp-…/shard-00000-of-00001.safetensors"), for
// the failure message of a crash test.
func (f *FaultFS) Trace() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.trace...)
}

// before counts an operation and returns the fault that fires at it, if
// any, or ErrCrashed after a crash.
func (f *FaultFS) before(op Op, name string) (*Fault, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed {
		return nil, fmt.Errorf("%w: %s %s", ErrCrashed, op, name)
	}
	f.counts[op]++
	if op.mutates() {
		f.counts[OpAny]++
		f.trace = append(f.trace, fmt.Sprintf("%d %s %s", f.counts[OpAny], op, name))
	}
	for i := range f.faults {
		ft := &f.faults[i]
		match := ft.Op == op || (ft.Op == OpAny && op.mutates())
		if match && f.counts[ft.Op] == ft.N {
			if ft.Mode == Crash {
				f.crashed = true
				return ft, fmt.Errorf("%w at %s %s (operation %d)", ErrCrashed, op, name, f.counts[OpAny])
			}
			return ft, fmt.Errorf("%w: %s %s (operation %d)", ErrInjected, op, name, f.counts[op])
		}
	}
	return nil, nil
}

// Create implements FS.
func (f *FaultFS) Create(name string) (File, error) {
	if _, err := f.before(OpCreate, name); err != nil {
		return nil, err
	}
	file, err := f.inner.Create(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{fs: f, inner: file, name: name, write: true}, nil
}

// Open implements FS.
func (f *FaultFS) Open(name string) (File, error) {
	if _, err := f.before(OpOpen, name); err != nil {
		return nil, err
	}
	file, err := f.inner.Open(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{fs: f, inner: file, name: name}, nil
}

// Remove implements FS.
func (f *FaultFS) Remove(name string) error {
	if _, err := f.before(OpRemove, name); err != nil {
		return err
	}
	return f.inner.Remove(name)
}

// RemoveAll implements FS the way os.RemoveAll does it: one remove per
// file and directory, children first, so that a crash or failure can stop
// it halfway through a tree.
func (f *FaultFS) RemoveAll(name string) error {
	st, err := f.inner.Stat(name)
	if errors.Is(err, iofs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.IsDir() {
		names, err := f.inner.List(name)
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := f.RemoveAll(filepath.Join(name, n)); err != nil {
				return err
			}
		}
	}
	return f.Remove(name)
}

// Rename implements FS.
func (f *FaultFS) Rename(oldname, newname string) error {
	if _, err := f.before(OpRename, oldname+" -> "+newname); err != nil {
		return err
	}
	return f.inner.Rename(oldname, newname)
}

// MkdirAll implements FS.
func (f *FaultFS) MkdirAll(name string) error {
	if _, err := f.before(OpMkdir, name); err != nil {
		return err
	}
	return f.inner.MkdirAll(name)
}

// SyncDir implements FS.
func (f *FaultFS) SyncDir(name string) error {
	if _, err := f.before(OpSyncDir, name); err != nil {
		return err
	}
	return f.inner.SyncDir(name)
}

// List implements FS.
func (f *FaultFS) List(dir string) ([]string, error) {
	if _, err := f.before(OpList, dir); err != nil {
		return nil, err
	}
	return f.inner.List(dir)
}

// Stat implements FS.
func (f *FaultFS) Stat(name string) (os.FileInfo, error) {
	if _, err := f.before(OpStat, name); err != nil {
		return nil, err
	}
	return f.inner.Stat(name)
}

type faultFile struct {
	fs    *FaultFS
	inner File
	name  string
	write bool
}

func (f *faultFile) Write(p []byte) (int, error) {
	ft, err := f.fs.before(OpWrite, f.name)
	if err != nil {
		if ft != nil && ft.Torn > 0 {
			n, _ := f.inner.Write(p[:min(ft.Torn, len(p))])
			return n, err
		}
		return 0, err
	}
	return f.inner.Write(p)
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	if _, err := f.fs.before(OpRead, f.name); err != nil {
		return 0, err
	}
	return f.inner.ReadAt(p, off)
}

func (f *faultFile) Sync() error {
	if _, err := f.fs.before(OpSync, f.name); err != nil {
		return err
	}
	return f.inner.Sync()
}

// Close of a file opened for writing is an OpClose; closing a file opened
// for reading changes nothing on disk and is neither counted nor failed.
func (f *faultFile) Close() error {
	if !f.write {
		return f.inner.Close()
	}
	if _, err := f.fs.before(OpClose, f.name); err != nil {
		// Release the inner handle either way; the fault is what the
		// caller sees.
		f.inner.Close()
		return err
	}
	return f.inner.Close()
}

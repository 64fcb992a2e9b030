package checkpoint

import (
	"fmt"
	"io"
	iofs "io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// MemFS is an in-memory FS that models durability the way POSIX promises
// it and no further: a file's bytes survive a crash only up to its last
// Sync, and a directory entry (a creation, rename or removal) only once the
// directory itself was synced. Crash returns the file system a machine
// would find after losing power at that moment; CrashTorn returns one of the
// states a real file system may also leave (some unsynced bytes and entries
// made it to disk), so crash tests can check both bounds exactly.
//
// Paths are cleaned with filepath.Clean and resolved from a root that
// always exists; "" and "." name the root. MemFS is safe for concurrent use.
type MemFS struct {
	mu   sync.Mutex
	root *memNode
}

var _ FS = (*MemFS)(nil)

// memNode is an inode: a file (data, of which the first synced bytes are
// durable) or a directory (its live entries, the entries as of its last
// SyncDir, and the operations on it since). Files are only ever appended
// to, because Create makes a new inode, so the durable bytes are always a
// prefix of data.
type memNode struct {
	dir     bool
	data    []byte
	synced  int
	entries map[string]*memNode
	durable map[string]*memNode
	pending []dirOp
	mtime   time.Time
}

// dirOp is one change to a directory's entries: name now refers to node
// (nil: removed), and for a rename within the directory, from is removed
// in the same atomic step.
type dirOp struct {
	name string
	node *memNode
	from string
}

// set changes an entry and logs the change until the next SyncDir.
func (d *memNode) set(name string, n *memNode) {
	if n == nil {
		delete(d.entries, name)
	} else {
		d.entries[name] = n
	}
	d.pending = append(d.pending, dirOp{name: name, node: n})
}

func (op dirOp) apply(m map[string]*memNode) {
	if op.from != "" {
		delete(m, op.from)
	}
	if op.node == nil {
		delete(m, op.name)
	} else {
		m[op.name] = op.node
	}
}

func newDirNode() *memNode {
	return &memNode{dir: true, entries: map[string]*memNode{}, durable: map[string]*memNode{}}
}

// NewMemFS returns an empty MemFS.
func NewMemFS() *MemFS { return &MemFS{root: newDirNode()} }

func split(name string) []string {
	c := filepath.Clean(name)
	if c == "." || c == string(filepath.Separator) {
		return nil
	}
	c = strings.TrimPrefix(c, string(filepath.Separator))
	return strings.Split(c, string(filepath.Separator))
}

func pathErr(op, name string, err error) error { return &iofs.PathError{Op: op, Path: name, Err: err} }

// lookup returns the node at name. Callers hold mu.
func (m *MemFS) lookup(op, name string) (*memNode, error) {
	n := m.root
	for _, part := range split(name) {
		if !n.dir {
			return nil, pathErr(op, name, iofs.ErrNotExist)
		}
		c, ok := n.entries[part]
		if !ok {
			return nil, pathErr(op, name, iofs.ErrNotExist)
		}
		n = c
	}
	return n, nil
}

// parent returns the directory that holds name and name's last element.
func (m *MemFS) parent(op, name string) (*memNode, string, error) {
	parts := split(name)
	if len(parts) == 0 {
		return nil, "", pathErr(op, name, iofs.ErrInvalid)
	}
	d, err := m.lookup(op, filepath.Join(parts[:len(parts)-1]...))
	if err != nil {
		return nil, "", err
	}
	if !d.dir {
		return nil, "", pathErr(op, name, iofs.ErrNotExist)
	}
	return d, parts[len(parts)-1], nil
}

// Create implements FS.
func (m *MemFS) Create(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.parent("create", name)
	if err != nil {
		return nil, err
	}
	if old, ok := d.entries[base]; ok && old.dir {
		return nil, pathErr("create", name, fmt.Errorf("is a directory"))
	}
	n := &memNode{mtime: time.Now()}
	d.set(base, n)
	return &memFile{fs: m, node: n, name: name, write: true}, nil
}

// Open implements FS.
func (m *MemFS) Open(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup("open", name)
	if err != nil {
		return nil, err
	}
	if n.dir {
		return nil, pathErr("open", name, fmt.Errorf("is a directory"))
	}
	return &memFile{fs: m, node: n, name: name}, nil
}

// Remove implements FS.
func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.parent("remove", name)
	if err != nil {
		return err
	}
	n, ok := d.entries[base]
	if !ok {
		return pathErr("remove", name, iofs.ErrNotExist)
	}
	if n.dir && len(n.entries) > 0 {
		return pathErr("remove", name, fmt.Errorf("directory not empty"))
	}
	d.set(base, nil)
	return nil
}

// RemoveAll implements FS.
func (m *MemFS) RemoveAll(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.parent("removeall", name)
	if err != nil {
		return nil // the parent is missing, so is name
	}
	if _, ok := d.entries[base]; ok {
		d.set(base, nil)
	}
	return nil
}

// Rename implements FS.
func (m *MemFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	od, obase, err := m.parent("rename", oldname)
	if err != nil {
		return err
	}
	n, ok := od.entries[obase]
	if !ok {
		return pathErr("rename", oldname, iofs.ErrNotExist)
	}
	nd, nbase, err := m.parent("rename", newname)
	if err != nil {
		return err
	}
	if n.dir {
		on, nn := filepath.Clean(oldname), filepath.Clean(newname)
		if strings.HasPrefix(nn, on+string(filepath.Separator)) {
			return pathErr("rename", newname, fmt.Errorf("inside the directory being renamed"))
		}
	}
	if old, ok := nd.entries[nbase]; ok && old != n {
		switch {
		case old.dir && !n.dir:
			return pathErr("rename", newname, fmt.Errorf("is a directory"))
		case !old.dir && n.dir:
			return pathErr("rename", newname, fmt.Errorf("not a directory"))
		case old.dir && len(old.entries) > 0:
			return pathErr("rename", newname, fmt.Errorf("directory not empty"))
		}
	}
	if od == nd {
		if obase != nbase {
			delete(od.entries, obase)
			od.entries[nbase] = n
			od.pending = append(od.pending, dirOp{name: nbase, node: n, from: obase})
		}
		return nil
	}
	od.set(obase, nil)
	nd.set(nbase, n)
	return nil
}

// MkdirAll implements FS.
func (m *MemFS) MkdirAll(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.root
	for _, part := range split(name) {
		c, ok := n.entries[part]
		if !ok {
			c = newDirNode()
			c.mtime = time.Now()
			n.set(part, c)
		} else if !c.dir {
			return pathErr("mkdir", name, fmt.Errorf("not a directory"))
		}
		n = c
	}
	return nil
}

// SyncDir implements FS.
func (m *MemFS) SyncDir(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup("syncdir", name)
	if err != nil {
		return err
	}
	if !n.dir {
		return pathErr("syncdir", name, fmt.Errorf("not a directory"))
	}
	n.durable = make(map[string]*memNode, len(n.entries))
	for k, v := range n.entries {
		n.durable[k] = v
	}
	n.pending = nil
	return nil
}

// List implements FS.
func (m *MemFS) List(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup("list", dir)
	if err != nil {
		return nil, err
	}
	if !n.dir {
		return nil, pathErr("list", dir, fmt.Errorf("not a directory"))
	}
	names := make([]string, 0, len(n.entries))
	for k := range n.entries {
		names = append(names, k)
	}
	slices.Sort(names)
	return names, nil
}

// Stat implements FS.
func (m *MemFS) Stat(name string) (os.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup("stat", name)
	if err != nil {
		return nil, err
	}
	return memInfo{name: filepath.Base(name), size: int64(len(n.data)), dir: n.dir, mtime: n.mtime}, nil
}

// Clone returns an independent copy of the file system, live and durable
// state alike: a fixture that each case of a crash test starts from.
func (m *MemFS) Clone() *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[*memNode]*memNode{}
	var rec func(n *memNode) *memNode
	rec = func(n *memNode) *memNode {
		if c, ok := seen[n]; ok {
			return c
		}
		c := &memNode{dir: n.dir, data: slices.Clone(n.data), synced: n.synced, mtime: n.mtime}
		seen[n] = c
		if n.dir {
			c.entries = make(map[string]*memNode, len(n.entries))
			c.durable = make(map[string]*memNode, len(n.durable))
			for k, v := range n.entries {
				c.entries[k] = rec(v)
			}
			for k, v := range n.durable {
				c.durable[k] = rec(v)
			}
			for _, op := range n.pending {
				if op.node != nil {
					op.node = rec(op.node)
				}
				c.pending = append(c.pending, op)
			}
		}
		return c
	}
	return &MemFS{root: rec(m.root)}
}

// Crash returns the file system as it would be found after a power loss
// now, under the strictest reading of POSIX: only synced bytes and synced
// directory entries survive. The receiver is left as it is.
func (m *MemFS) Crash() *MemFS { return m.crash(nil) }

// CrashTorn is Crash where the disk got further than it had to: each file
// keeps a random prefix of its unsynced bytes (a torn write), and each
// directory operation since the directory's last sync (a create, a remove,
// a rename as one atomic step) made it to disk or not, at random and
// independently of the others, since POSIX orders none of them before a
// directory fsync. Every such state is one a real file system may leave,
// so a commit protocol must survive all of them.
func (m *MemFS) CrashTorn(r *rand.Rand) *MemFS { return m.crash(r) }

func (m *MemFS) crash(r *rand.Rand) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	// An inode reachable twice (a rename across directories, seen in the
	// old directory's durable entries and the new one's live ones) comes
	// back once, as a hard link would.
	seen := map[*memNode]*memNode{}
	var rec func(n *memNode) *memNode
	rec = func(n *memNode) *memNode {
		if c, ok := seen[n]; ok {
			return c
		}
		var c *memNode
		if !n.dir {
			keep := n.synced
			if r != nil && len(n.data) > n.synced {
				keep += r.IntN(len(n.data) - n.synced + 1)
			}
			c = &memNode{data: slices.Clone(n.data[:keep]), synced: keep, mtime: n.mtime}
		} else {
			src := make(map[string]*memNode, len(n.durable))
			for k, v := range n.durable {
				src[k] = v
			}
			if r != nil {
				for _, op := range n.pending {
					if r.IntN(2) == 0 {
						op.apply(src)
					}
				}
			}
			c = newDirNode()
			c.mtime = n.mtime
			seen[n] = c
			// In name order: the random tears are drawn file by file, so a
			// seeded r gives one disk.
			for _, k := range slices.Sorted(maps.Keys(src)) {
				c.entries[k] = rec(src[k])
				c.durable[k] = c.entries[k]
			}
		}
		seen[n] = c
		return c
	}
	return &MemFS{root: rec(m.root)}
}

// memFile is an open MemFS file.
type memFile struct {
	fs     *MemFS
	node   *memNode
	name   string
	write  bool
	closed bool
}

func (f *memFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, pathErr("write", f.name, iofs.ErrClosed)
	}
	if !f.write {
		return 0, pathErr("write", f.name, fmt.Errorf("file opened read-only"))
	}
	f.node.data = append(f.node.data, p...)
	f.node.mtime = time.Now()
	return len(p), nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, pathErr("read", f.name, iofs.ErrClosed)
	}
	if off < 0 {
		return 0, pathErr("read", f.name, iofs.ErrInvalid)
	}
	if off >= int64(len(f.node.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.node.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathErr("sync", f.name, iofs.ErrClosed)
	}
	f.node.synced = len(f.node.data)
	return nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathErr("close", f.name, iofs.ErrClosed)
	}
	f.closed = true
	return nil
}

type memInfo struct {
	name  string
	size  int64
	dir   bool
	mtime time.Time
}

func (i memInfo) Name() string { return i.name }
func (i memInfo) Size() int64  { return i.size }
func (i memInfo) Mode() os.FileMode {
	if i.dir {
		return os.ModeDir | 0o755
	}
	return 0o644
}
func (i memInfo) ModTime() time.Time { return i.mtime }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }

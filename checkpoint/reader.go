package checkpoint

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	iofs "io/fs"
	"path/filepath"
	"slices"
	"sync"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/safetensors"
)

// Checkpoint is an opened checkpoint: its validated manifest and its
// shard files, each checked on open for presence, size, header CRC and
// agreement with the manifest. Tensor reads verify the CRC-32C of every
// slice they touch (each slice once); Verify checks them all. Its methods
// are safe for concurrent use.
type Checkpoint struct {
	// Manifest is the decoded manifest.json.
	Manifest *Manifest
	// Dir is the checkpoint's directory (…/step-000123).
	Dir string

	fsys  FS
	files map[string]*shardFile

	mu       sync.Mutex
	verified map[sliceKey]bool
}

type shardFile struct {
	f    File
	path string
	err  error // why the file is unusable, nil when it is fine
}

type sliceKey struct {
	tensor string
	slice  int
}

// Open opens the checkpoint of step in the checkpoint root dir.
func Open(fsys FS, dir string, step int64) (*Checkpoint, error) {
	return OpenDir(fsys, filepath.Join(dir, StepDirName(step)))
}

// OpenLatest opens the checkpoint the latest pointer of dir names. With no
// checkpoint in dir the error wraps ErrNoCheckpoint.
func OpenLatest(fsys FS, dir string) (*Checkpoint, error) {
	step, err := Latest(fsys, dir)
	if err != nil {
		return nil, err
	}
	return Open(fsys, dir, step)
}

// OpenDir opens the checkpoint in directory stepDir. Any problem with the
// manifest or a shard file is an error naming the file.
func OpenDir(fsys FS, stepDir string) (*Checkpoint, error) {
	c, err := openDir(fsys, stepDir)
	if err != nil {
		return nil, err
	}
	for _, f := range c.Manifest.Files {
		if sf := c.files[f.Name]; sf.err != nil {
			c.Close()
			return nil, sf.err
		}
	}
	return c, nil
}

// openDir opens the manifest and every shard file, recording a file's
// problem in its shardFile instead of failing, so Inspect can report every
// bad file.
func openDir(fsys FS, stepDir string) (*Checkpoint, error) {
	mpath := filepath.Join(stepDir, ManifestFile)
	b, err := readFile(fsys, mpath, MaxManifestSize)
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) {
			if _, serr := fsys.Stat(stepDir); serr != nil {
				return nil, fmt.Errorf("%w: %s does not exist", ErrNoCheckpoint, stepDir)
			}
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, mpath, err)
	}
	m, err := DecodeManifest(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", mpath, err)
	}
	if step, ok := ParseStepDir(filepath.Base(stepDir)); ok && step != m.Step {
		return nil, fmt.Errorf("%w: %s says step %d, its directory is %s", ErrCorrupt, mpath, m.Step, filepath.Base(stepDir))
	}
	c := &Checkpoint{Manifest: m, Dir: stepDir, fsys: fsys, files: map[string]*shardFile{}, verified: map[sliceKey]bool{}}
	held := map[string][]heldSlice{}
	for _, t := range m.Tensors {
		for _, s := range t.Slices {
			held[s.File] = append(held[s.File], heldSlice{t, s})
		}
	}
	for _, fe := range m.Files {
		c.files[fe.Name] = openShard(fsys, filepath.Join(stepDir, fe.Name), fe, held[fe.Name])
	}
	return c, nil
}

type heldSlice struct {
	t TensorEntry
	s SliceEntry
}

// openShard opens one shard file and checks it against the manifest: size,
// header CRC, a valid safetensors header, and exactly the slices the
// manifest puts there, at the offsets it says.
func openShard(fsys FS, path string, fe FileEntry, held []heldSlice) *shardFile {
	sf := &shardFile{path: path}
	fail := func(format string, args ...any) *shardFile {
		sf.err = fmt.Errorf("%w: %s: %s", ErrCorrupt, path, fmt.Sprintf(format, args...))
		if sf.f != nil {
			sf.f.Close()
			sf.f = nil
		}
		return sf
	}
	st, err := fsys.Stat(path)
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) {
			return fail("shard file is missing")
		}
		return fail("%v", err)
	}
	if st.Size() != fe.Bytes {
		return fail("%d bytes, the manifest says %d (truncated or overwritten)", st.Size(), fe.Bytes)
	}
	if sf.f, err = fsys.Open(path); err != nil {
		return fail("%v", err)
	}
	h, err := safetensors.Read(sf.f, fe.Bytes)
	if err != nil {
		return fail("%v", err)
	}
	hdr := make([]byte, h.DataStart())
	if _, err := sf.f.ReadAt(hdr, 0); err != nil {
		return fail("reading header: %v", err)
	}
	if got := crc32c(hdr); got != fe.HeaderCRC32C {
		return fail("header CRC-32C %08x, the manifest says %08x", got, fe.HeaderCRC32C)
	}
	if len(h.Tensors) != len(held) {
		return fail("holds %d tensors, the manifest puts %d slices there", len(h.Tensors), len(held))
	}
	for _, hs := range held {
		key := hs.s.key(hs.t.Name)
		info, ok := h.Lookup(key)
		if !ok {
			return fail("has no tensor %q", key)
		}
		if info.DType != hs.t.DType || !slices.Equal(info.Shape, hs.s.Sizes) || info.Offset != hs.s.Offset || info.Size() != hs.s.Bytes {
			return fail("tensor %q is %v %v at offset %d, the manifest says %v %v at offset %d",
				key, info.DType, info.Shape, info.Offset, hs.t.DType, hs.s.Sizes, hs.s.Offset)
		}
	}
	return sf
}

// Close closes the shard files.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, sf := range c.files {
		if sf.f != nil {
			errs = append(errs, sf.f.Close())
			sf.f = nil
		}
	}
	return errors.Join(errs...)
}

// Step returns the checkpoint's step.
func (c *Checkpoint) Step() int64 { return c.Manifest.Step }

// readSlice copies the bytes [off, off+len(dst)) of slice i of t into dst,
// verifying the slice's CRC-32C the first time any of it is read.
func (c *Checkpoint) readSlice(t *TensorEntry, i int, off int64, dst []byte) error {
	s := t.Slices[i]
	sf := c.files[s.File]
	if sf.err != nil {
		return sf.err
	}
	if off < 0 || off > s.Bytes || int64(len(dst)) > s.Bytes-off {
		return fmt.Errorf("%w: bytes [%d, %d) outside slice %d of %q (%d bytes)", ErrMismatch, off, off+int64(len(dst)), i, t.Name, s.Bytes)
	}
	key := sliceKey{t.Name, i}
	c.mu.Lock()
	done := c.verified[key]
	c.mu.Unlock()
	if done {
		return c.readAt(sf, t, dst, s.Offset+off)
	}
	direct := off == 0 && int64(len(dst)) == s.Bytes
	whole := dst
	if !direct {
		whole = make([]byte, s.Bytes)
	}
	if err := c.readAt(sf, t, whole, s.Offset); err != nil {
		return err
	}
	if got := crc32c(whole); got != s.CRC32C {
		return c.crcError(sf, t, s, got)
	}
	if !direct {
		copy(dst, whole[off:])
	}
	c.mu.Lock()
	c.verified[key] = true
	c.mu.Unlock()
	return nil
}

func (c *Checkpoint) readAt(sf *shardFile, t *TensorEntry, p []byte, off int64) error {
	n, err := sf.f.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %s: tensor %q: file ends before byte %d", ErrCorrupt, sf.path, t.Name, off+int64(len(p)))
	}
	return fmt.Errorf("%s: tensor %q: %w", sf.path, t.Name, err)
}

func (c *Checkpoint) crcError(sf *shardFile, t *TensorEntry, s SliceEntry, got uint32) error {
	rows := ""
	switch {
	case len(t.Shape) > 0 && wholeRows(s, t.Shape):
		rows = fmt.Sprintf(" rows [%d, %d) of %v", s.Offsets[0], s.Offsets[0]+s.Sizes[0], t.Shape)
	case len(t.Shape) > 0:
		rows = fmt.Sprintf(" block %v + %v of %v", s.Offsets, s.Sizes, t.Shape)
	}
	return fmt.Errorf("%w: %s: tensor %q%s: CRC-32C %08x, the manifest says %08x",
		ErrCorrupt, sf.path, t.Name, rows, got, s.CRC32C)
}

// Execute runs reads (from Manifest.PlanRead or PlanRank) into dst.
func (c *Checkpoint) Execute(reads []Read, dst []byte) error {
	for _, r := range reads {
		t, ok := c.Manifest.Lookup(r.Tensor)
		if !ok || r.Slice < 0 || r.Slice >= len(t.Slices) {
			return fmt.Errorf("%w: read of slice %d of %q, which the checkpoint lacks", ErrMismatch, r.Slice, r.Tensor)
		}
		if r.DstOff < 0 || r.Len < 0 || r.DstOff > int64(len(dst)) || r.Len > int64(len(dst))-r.DstOff {
			return fmt.Errorf("%w: read of %q into bytes [%d, %d) of a %d-byte buffer", ErrMismatch, r.Tensor, r.DstOff, r.DstOff+r.Len, len(dst))
		}
		if err := c.readSlice(t, r.Slice, r.SrcOff, dst[r.DstOff:r.DstOff+r.Len]); err != nil {
			return err
		}
	}
	return nil
}

// ReadElements fills dst with elements [start, stop) of tensor name
// (row-major), from whichever slices hold them.
func (c *Checkpoint) ReadElements(name string, start, stop int64, dst []byte) error {
	reads, err := c.Manifest.PlanRead(name, start, stop)
	if err != nil {
		return err
	}
	t, _ := c.Manifest.Lookup(name)
	if want := (stop - start) * int64(t.DType.Size()); int64(len(dst)) != want {
		return fmt.Errorf("%w: %d-byte buffer for %d elements of %q (%d bytes)", ErrMismatch, len(dst), stop-start, name, want)
	}
	return c.Execute(reads, dst)
}

// ReadTensor returns the whole logical tensor name.
func (c *Checkpoint) ReadTensor(name string) (safetensors.Tensor, error) {
	t, ok := c.Manifest.Lookup(name)
	if !ok {
		return safetensors.Tensor{}, fmt.Errorf("%w: checkpoint has no tensor %q", ErrMismatch, name)
	}
	b, _ := TensorSpec{DType: t.DType, Shape: t.Shape}.Bytes()
	data := make([]byte, b)
	if err := c.readWhole(t, data); err != nil {
		return safetensors.Tensor{}, err
	}
	return safetensors.Tensor{Name: name, DType: t.DType, Shape: slices.Clone(t.Shape), Data: data}, nil
}

// Weights returns every parameter (no optimizer state) as a whole tensor,
// in model order, by its PyTorch name and shape: what `troupe ckpt
// convert` writes to a plain safetensors file.
func (c *Checkpoint) Weights() ([]safetensors.Tensor, error) {
	var out []safetensors.Tensor
	for _, name := range c.Manifest.Params() {
		t, err := c.ReadTensor(name)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// paramTensor is the checkpoint's tensor name for parameter p (or its
// optimizer state), checked to be the F32 whole tensor p is or is a
// tensor-parallel shard of; whole is that tensor's shape.
func (c *Checkpoint) paramTensor(name string, p *nn.Param) (t *TensorEntry, whole []int, err error) {
	t, ok := c.Manifest.Lookup(name)
	if !ok {
		return t, nil, fmt.Errorf("%w: checkpoint has no tensor %q", ErrMismatch, name)
	}
	whole = p.Shape
	if p.Split != nil {
		whole = p.Split.Full
	}
	if t.DType != safetensors.F32 || !slices.Equal(t.Shape, whole) {
		return t, nil, fmt.Errorf("%w: %q is %v %v in the checkpoint, the model wants F32 %v", ErrMismatch, name, t.DType, t.Shape, whole)
	}
	return t, whole, nil
}

// readF32Into fills dst with the F32 parameter (or optimizer state of) p,
// checking its shape: the whole tensor, or a tensor-parallel shard's part
// of it (its blocks read and put in the shard's layout, its padding zero).
func (c *Checkpoint) readF32Into(name string, p *nn.Param, dst []float32) error {
	t, whole, err := c.paramTensor(name, p)
	if err != nil {
		return err
	}
	if p.Split == nil {
		return c.readF32Box(t, make([]int, len(whole)), slices.Clone(whole), dst)
	}
	clear(dst)
	sp := p.Split
	local := sp.Shape()
	out := f32Bytes(dst) // a view on little-endian hosts
	if !littleEndian {
		defer decodeF32(dst, out)
	}
	for _, b := range sp.Boxes() {
		if b.Len == 0 {
			continue
		}
		off, size := make([]int, len(whole)), slices.Clone(whole)
		off[sp.Dim], size[sp.Dim] = b.Lo, b.Len
		buf := make([]float32, boxVolume(size))
		if err := c.readF32Box(t, off, size, buf); err != nil {
			return err
		}
		// In the shard the block sits at b.At along the cut dimension.
		at := slices.Clone(off)
		at[sp.Dim] = b.At
		copyBox(out, make([]int, len(whole)), local, f32Bytes(buf), at, size, at, size, 4)
	}
	return nil
}

// readStateShard reads a ZeRO shard of optimizer state st: its flat
// ranges of set, each parameter's elements read by block.
func (c *Checkpoint) readStateShard(set *nn.ParamSet, st optim.State) ([]float32, error) {
	out := make([]float32, st.Buf.Len())
	off := 0
	for _, r := range st.Ranges {
		for _, p := range set.Params() {
			lo, hi := max(r.Lo, p.Offset), min(r.Hi, p.Offset+p.Size())
			if lo >= hi {
				continue
			}
			if err := c.readParamElems(OptimName(st.Name, p.Name), p, lo-p.Offset, hi-p.Offset, out[off+lo-r.Lo:off+hi-r.Lo]); err != nil {
				return nil, err
			}
		}
		off += r.Len()
	}
	return out, nil
}

// readParamElems fills dst with the elements [lo, hi) of the part of F32
// tensor name that p holds (row-major in p's shape), read by block; the
// padding of a tensor-parallel shard reads as zeros.
func (c *Checkpoint) readParamElems(name string, p *nn.Param, lo, hi int, dst []float32) error {
	t, _, err := c.paramTensor(name, p)
	if err != nil {
		return err
	}
	clear(dst)
	for _, pl := range elementBlocks(p.Shape, p.Split, lo, hi) {
		n := int(boxVolume(pl.Size))
		if err := c.readF32Box(t, pl.Off, pl.Size, dst[pl.At:pl.At+n]); err != nil {
			return err
		}
	}
	return nil
}

// readF32Box reads a block of F32 tensor t into dst.
func (c *Checkpoint) readF32Box(t *TensorEntry, off, size []int, dst []float32) error {
	if littleEndian {
		return c.ReadBox(t.Name, off, size, f32Bytes(dst))
	}
	b := make([]byte, 4*len(dst))
	if err := c.ReadBox(t.Name, off, size, b); err != nil {
		return err
	}
	decodeF32(dst, b)
	return nil
}

// Restore loads a model part and its optimizer from the checkpoint: every
// parameter of set by name (whatever stage or rank wrote it, so a part of
// any pipeline split or tensor-parallel cut, of a world of any size, loads
// from a checkpoint of any other), and, when opt is not nil, the
// optimizer's state buffers and update count. The optimizer must be of the
// checkpoint's kind; its hyper-parameters are the caller's (compare with
// Manifest.Optimizer to warn). Nothing is changed when an error is
// returned.
func (c *Checkpoint) Restore(set *nn.ParamSet, opt optim.Optimizer) error {
	w := make([]float32, set.Len())
	for _, p := range set.Params() {
		if err := c.readF32Into(p.Name, p, w[p.Offset:p.Offset+p.Size()]); err != nil {
			return err
		}
	}
	var states [][]float32
	if opt != nil {
		mo := c.Manifest.Optimizer
		if mo == nil {
			return fmt.Errorf("%w: the checkpoint has no optimizer state", ErrMismatch)
		}
		var names []string
		for _, st := range opt.States() {
			names = append(names, st.Name)
		}
		if mo.Name != opt.Config().Name || !slices.Equal(names, mo.States) {
			return fmt.Errorf("%w: the checkpoint's optimizer is %s with states %v, this one %s with %v",
				ErrMismatch, mo.Name, mo.States, opt.Config().Name, names)
		}
		for _, st := range opt.States() {
			if st.Ranges != nil {
				b, err := c.readStateShard(set, st)
				if err != nil {
					return err
				}
				states = append(states, b)
				continue
			}
			b := make([]float32, set.Len())
			for _, p := range set.Params() {
				if err := c.readF32Into(OptimName(st.Name, p.Name), p, b[p.Offset:p.Offset+p.Size()]); err != nil {
					return err
				}
			}
			states = append(states, b)
		}
	}
	be := set.Backend()
	be.Upload(set.Weights(), w)
	if opt != nil {
		for i, st := range opt.States() {
			be.Upload(st.Buf, states[i])
		}
		opt.SetSteps(int(c.Manifest.Optimizer.Steps))
	}
	return nil
}

// FileStatus is the verification result of one shard file.
type FileStatus struct {
	FileEntry
	// Err is nil when the file and every slice in it check out.
	Err error
}

// VerifyFiles checks every shard file: presence, size, header and the
// CRC-32C of every slice, reading each file once in bounded chunks.
func (c *Checkpoint) VerifyFiles() []FileStatus {
	out := make([]FileStatus, len(c.Manifest.Files))
	bySlice := map[string][]heldSlice{}
	for _, t := range c.Manifest.Tensors {
		for _, s := range t.Slices {
			bySlice[s.File] = append(bySlice[s.File], heldSlice{t, s})
		}
	}
	var largest int64
	for _, t := range c.Manifest.Tensors {
		for _, s := range t.Slices {
			largest = max(largest, s.Bytes)
		}
	}
	buf := make([]byte, min(4<<20, largest))
	for i, fe := range c.Manifest.Files {
		out[i].FileEntry = fe
		sf := c.files[fe.Name]
		if sf.err != nil {
			out[i].Err = sf.err
			continue
		}
		for _, hs := range bySlice[fe.Name] {
			h := crc32.New(castagnoli)
			for off := int64(0); off < hs.s.Bytes; {
				n := min(int64(len(buf)), hs.s.Bytes-off)
				if err := c.readAt(sf, &hs.t, buf[:n], hs.s.Offset+off); err != nil {
					out[i].Err = err
					break
				}
				h.Write(buf[:n])
				off += n
			}
			if out[i].Err != nil {
				break
			}
			if got := h.Sum32(); got != hs.s.CRC32C {
				out[i].Err = c.crcError(sf, &hs.t, hs.s, got)
				break
			}
		}
	}
	return out
}

// Verify checks every byte of every shard file against the manifest and
// returns an error naming each file that fails (nil when all pass).
func (c *Checkpoint) Verify() error {
	var errs []error
	for _, st := range c.VerifyFiles() {
		if st.Err != nil {
			errs = append(errs, st.Err)
		}
	}
	return errors.Join(errs...)
}

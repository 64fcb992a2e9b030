package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/troupe-ml/troupe/safetensors"
)

// RankShard is what one rank writes: its slices of its stage's tensors.
type RankShard struct {
	World                 World
	Step                  int64
	Stage, DPRank, TPRank int
	// Specs are all the tensors of the stage, whole (as the manifest
	// lists them), in order; Slices index them.
	Specs  []TensorSpec
	Slices []ShardSlice
}

// ShardSlice is one block of a tensor that a rank writes, with its bytes
// (row-major in the block's shape, a view of the snapshot's memory).
type ShardSlice struct {
	Tensor  int
	Offsets []int
	Sizes   []int
	// Key names the block in the file when the rank writes several blocks
	// of one tensor (empty: the tensor's name).
	Key  string
	Data []byte
}

// Rank returns the shard's rank in its world.
func (r RankShard) Rank() int { return r.World.Rank(r.Stage, r.DPRank, r.TPRank) }

// ShardFileName names the shard file of rank in a world of size ranks:
// "shard-00001-of-00004.safetensors".
func ShardFileName(rank, size int) string {
	return fmt.Sprintf("shard-%05d-of-%05d.safetensors", rank, size)
}

// partFileName names a rank's part manifest in the temporary directory.
func partFileName(rank int) string { return fmt.Sprintf("part-%05d.json", rank) }

// maxPartSize bounds a part manifest on read.
const maxPartSize = MaxManifestSize

// Part is what a rank reports after writing its shard file: the file, the
// slices in it, and the specs of all its stage's tensors, so that the
// leader can merge every rank's part into the manifest and check that
// nothing is missing. In one process parts pass in memory; across processes
// each rank writes its part next to its shard (WritePart) or sends it to
// the leader as JSON.
type Part struct {
	Step   int64        `json:"step"`
	World  World        `json:"world"`
	File   FileEntry    `json:"file"`
	Specs  []TensorSpec `json:"specs"`
	Slices []PartSlice  `json:"slices"`
}

// PartSlice is a slice of tensor Tensor in the part's file.
type PartSlice struct {
	Tensor string `json:"tensor"`
	SliceEntry
}

// WriteShard writes rank r's shard file into the temporary directory
// tmpDir: a plain safetensors file holding each of its slices as a tensor
// of the logical name (or the slice's key) and the slice's shape, then
// fsyncs and closes it. It returns the rank's Part. The directory entry
// becomes durable when the leader syncs tmpDir in Commit.
func WriteShard(fsys FS, tmpDir string, r RankShard) (*Part, error) {
	name := ShardFileName(r.Rank(), r.World.Size)
	ts := make([]safetensors.Tensor, len(r.Slices))
	part := &Part{Step: r.Step, World: r.World, Specs: r.Specs, Slices: make([]PartSlice, len(r.Slices))}
	for i, sl := range r.Slices {
		if sl.Tensor < 0 || sl.Tensor >= len(r.Specs) {
			return nil, fmt.Errorf("%w: slice %d names tensor %d of %d", ErrSnapshot, i, sl.Tensor, len(r.Specs))
		}
		spec := r.Specs[sl.Tensor]
		entry := SliceEntry{Offsets: slices.Clone(sl.Offsets), Sizes: slices.Clone(sl.Sizes), Key: sl.Key, File: name}
		if entry.Offsets == nil {
			entry.Offsets, entry.Sizes = []int{}, []int{}
		}
		ts[i] = safetensors.Tensor{Name: entry.key(spec.Name), DType: spec.DType, Shape: entry.Sizes, Data: sl.Data}
		part.Slices[i] = PartSlice{Tensor: spec.Name, SliceEntry: entry}
	}
	meta := map[string]string{
		"format":       "pt",
		"troupe_step":  strconv.FormatInt(r.Step, 10),
		"troupe_rank":  strconv.Itoa(r.Rank()),
		"troupe_world": r.World.String(),
	}
	h, err := safetensors.Layout(ts, meta)
	if err != nil {
		return nil, fmt.Errorf("%w: rank %d: %v", ErrSnapshot, r.Rank(), err)
	}
	for i := range part.Slices {
		info, _ := h.Lookup(ts[i].Name)
		part.Slices[i].Offset, part.Slices[i].Bytes = info.Offset, info.Size()
	}
	// The CRC-32C of the header and of every slice is taken from the bytes
	// on their way to the file, a chunk at a time, so each chunk is read
	// from memory once and is still in cache when the kernel copies it.
	cw := &crcWriter{ranges: []crcRange{{start: 0, end: h.DataStart()}}}
	for i := range part.Slices {
		sl := part.Slices[i]
		cw.ranges = append(cw.ranges, crcRange{start: sl.Offset, end: sl.Offset + sl.Bytes, slice: i})
	}
	slices.SortFunc(cw.ranges[1:], func(a, b crcRange) int { return int(a.start - b.start) })
	path := filepath.Join(tmpDir, name)
	f, err := fsys.Create(path)
	if err != nil {
		return nil, err
	}
	cw.w = f
	err = safetensors.Write(cw, ts, meta)
	if err == nil {
		err = cw.flush()
	}
	if size := h.DataStart() + dataBytes(ts); err == nil && cw.pos != size {
		err = fmt.Errorf("wrote %d bytes, the layout has %d", cw.pos, size)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	for _, rg := range cw.ranges[1:] {
		part.Slices[rg.slice].CRC32C = rg.crc
	}
	part.File = FileEntry{Name: name, Rank: r.Rank(), Stage: r.Stage, DPRank: r.DPRank, TPRank: r.TPRank, Bytes: cw.pos, HeaderCRC32C: cw.ranges[0].crc}
	return part, nil
}

func dataBytes(ts []safetensors.Tensor) int64 {
	var n int64
	for _, t := range ts {
		n += int64(len(t.Data))
	}
	return n
}

// crcRange is a byte range of a file being written and its CRC-32C so far.
type crcRange struct {
	start, end int64
	crc        uint32
	slice      int
}

// crcWriter writes a file sequentially in chunks of at most crcChunk
// bytes, taking the CRC-32C of each range (the header, each slice) on the
// way; writes smaller than directWrite are gathered into one buffer, larger
// ones go straight to the file without a copy.
type crcWriter struct {
	w      io.Writer
	pos    int64
	ranges []crcRange // sorted by start, not overlapping
	next   int        // first range not yet complete
	buf    []byte
}

const (
	crcChunk    = 1 << 20
	directWrite = 256 << 10
	gatherSize  = 1 << 20
)

func (c *crcWriter) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		chunk := p[:min(len(p), crcChunk)]
		end := c.pos + int64(len(chunk))
		for c.next < len(c.ranges) && c.ranges[c.next].end <= c.pos {
			c.next++
		}
		for j := c.next; j < len(c.ranges) && c.ranges[j].start < end; j++ {
			rg := &c.ranges[j]
			lo, hi := max(rg.start, c.pos), min(rg.end, end)
			if lo < hi {
				rg.crc = crc32.Update(rg.crc, castagnoli, chunk[lo-c.pos:hi-c.pos])
			}
		}
		if len(chunk) >= directWrite {
			if err := c.flush(); err != nil {
				return total - len(p), err
			}
			if _, err := c.w.Write(chunk); err != nil {
				return total - len(p), err
			}
		} else {
			c.buf = append(c.buf, chunk...)
			if len(c.buf) >= gatherSize {
				if err := c.flush(); err != nil {
					return total - len(p), err
				}
			}
		}
		c.pos = end
		p = p[len(chunk):]
	}
	return total, nil
}

func (c *crcWriter) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.w.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}

// WritePart writes a rank's part manifest into tmpDir and fsyncs it, for a
// leader in another process to read with ReadParts.
func WritePart(fsys FS, tmpDir string, p *Part) error {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrManifest, err)
	}
	return writeFileSync(fsys, filepath.Join(tmpDir, partFileName(p.File.Rank)), b)
}

// ReadParts reads the part manifests of every rank from tmpDir, sorted by
// rank.
func ReadParts(fsys FS, tmpDir string) ([]*Part, error) {
	names, err := fsys.List(tmpDir)
	if err != nil {
		return nil, err
	}
	var parts []*Part
	for _, n := range names {
		if !strings.HasPrefix(n, "part-") || !strings.HasSuffix(n, ".json") {
			continue
		}
		path := filepath.Join(tmpDir, n)
		b, err := readFile(fsys, path, maxPartSize)
		if err != nil {
			return nil, err
		}
		p, err := DecodePart(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		parts = append(parts, p)
	}
	slices.SortFunc(parts, func(a, b *Part) int { return a.File.Rank - b.File.Rank })
	return parts, nil
}

// DecodePart parses a part manifest strictly (unknown fields and trailing
// data are errors). BuildManifest validates its content against the
// others'.
func DecodePart(b []byte) (*Part, error) {
	if len(b) > maxPartSize {
		return nil, fmt.Errorf("%w: part manifest of %d bytes, over the %d-byte limit", ErrManifest, len(b), maxPartSize)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	p := &Part{}
	if err := dec.Decode(p); err != nil {
		return nil, fmt.Errorf("%w: part manifest: %v", ErrManifest, jsonError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: part manifest: data after the JSON object", ErrManifest)
	}
	return p, nil
}

// BuildManifest merges the parts of every rank of meta.World into the
// checkpoint's manifest and validates it: a part for each rank, all ranks
// of a stage agreeing on its tensors, and the slices tiling every tensor.
func BuildManifest(meta Meta, parts []*Part) (*Manifest, error) {
	w := meta.World
	if w.Size == 0 {
		w.Size = w.size()
		meta.World = w
	}
	if err := w.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	if len(parts) != w.Size {
		return nil, fmt.Errorf("%w: %d rank parts for a world of %d ranks", ErrManifest, len(parts), w.Size)
	}
	sorted := slices.Clone(parts)
	slices.SortFunc(sorted, func(a, b *Part) int { return a.File.Rank - b.File.Rank })
	m := &Manifest{Format: FormatName, Version: FormatVersion, Meta: meta}
	for i, p := range sorted {
		if p.File.Rank != i {
			return nil, fmt.Errorf("%w: no part from rank %d (or two from rank %d)", ErrManifest, i, p.File.Rank)
		}
		if p.World != w || p.Step != meta.Step {
			return nil, fmt.Errorf("%w: rank %d wrote step %d of world %v, the checkpoint is step %d of world %v",
				ErrManifest, i, p.Step, p.World, meta.Step, w)
		}
		m.Files = append(m.Files, p.File)
	}
	for st := 0; st < w.PP; st++ {
		first := sorted[w.Rank(st, 0, 0)]
		bySlice := map[string][]SliceEntry{}
		for r := w.Rank(st, 0, 0); r < w.Rank(st+1, 0, 0); r++ {
			p := sorted[r]
			if !slices.EqualFunc(p.Specs, first.Specs, specEqual) {
				return nil, fmt.Errorf("%w: ranks %d and %d of stage %d list different tensors",
					ErrManifest, first.File.Rank, p.File.Rank, st)
			}
			for _, s := range p.Slices {
				if s.File != p.File.Name {
					return nil, fmt.Errorf("%w: rank %d reports a slice of %q in file %q, its file is %q",
						ErrManifest, p.File.Rank, s.Tensor, s.File, p.File.Name)
				}
				bySlice[s.Tensor] = append(bySlice[s.Tensor], s.SliceEntry)
			}
		}
		for _, spec := range first.Specs {
			if spec.Stage != st {
				return nil, fmt.Errorf("%w: tensor %q of stage %d reported by a rank of stage %d", ErrManifest, spec.Name, spec.Stage, st)
			}
			ss := bySlice[spec.Name]
			delete(bySlice, spec.Name)
			slices.SortFunc(ss, func(a, b SliceEntry) int { return slices.Compare(a.Offsets, b.Offsets) })
			m.Tensors = append(m.Tensors, TensorEntry{Name: spec.Name, DType: spec.DType, Shape: spec.Shape, Stage: st, Slices: ss})
		}
		for name := range bySlice {
			return nil, fmt.Errorf("%w: stage %d has a slice of %q, which its tensor list lacks", ErrManifest, st, name)
		}
	}
	m.normalize()
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	return m, nil
}

func specEqual(a, b TensorSpec) bool {
	return a.Name == b.Name && a.DType == b.DType && a.Stage == b.Stage && slices.Equal(a.Shape, b.Shape)
}

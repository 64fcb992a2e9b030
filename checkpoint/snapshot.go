package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"unsafe"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/safetensors"
)

// Tensor is a logical tensor of a snapshot with its host bytes (row-major,
// little-endian). A tensor-parallel shard's Tensor holds its part of the
// whole tensor TensorSpec describes: Split says which, Data has the
// shard's shape (Split.Shape()), and TPRank is the shard; otherwise
// len(Data) == Bytes().
type Tensor struct {
	TensorSpec
	TPRank int
	Split  *nn.Split
	Data   []byte
	// A ZeRO shard of optimizer state: Elems are the element ranges of the
	// part's tensor (row-major, Split's shape) that Data holds, one after
	// the other, and data-parallel rank Owner writes them (Owned). Without
	// Owned a tensor's rows are split among the part's data-parallel
	// ranks (Partition).
	Owned bool
	Owner int
	Elems []optim.Range
	// SpecOnly lists the tensor without data: another rank writes it (a
	// ZeRO shard that a shard group other than the first also holds).
	SpecOnly bool
}

// localShape is the shape of t's data.
func (t Tensor) localShape() []int {
	if t.Split != nil {
		return t.Split.Shape()
	}
	return t.Shape
}

// Snapshot is a training run's state at a step boundary, in host memory:
// what Save writes. Taking one is the whole pause a checkpoint costs the
// training loop; writing it happens after, in the background with
// AsyncSaver.
//
// A Snapshot keeps its host buffers between Reset calls, so a loop that
// saves every N steps downloads into the same memory each time instead of
// allocating the model's size again.
type Snapshot struct {
	Meta    Meta
	Tensors []Tensor

	bufs map[bufKey][]float32
}

type bufKey struct {
	stage, tp int
	state     string // "" for the weights
}

// PartOptions says what a rank adds of its model part to a snapshot.
type PartOptions struct {
	// Weights adds the parameters (one replica of the part does; the
	// others list them only).
	Weights bool
	// Owner is the data-parallel rank that writes this rank's ZeRO shard
	// of the optimizer state; −1 lists it only (another shard group's
	// copy of the shard is written). Unsharded state goes with Weights.
	Owner int
	// OwnedWeights, with ZeRO-3, are the part's weights this rank holds:
	// Buf the flat ranges Ranges end to end. They are written as the
	// optimizer state's shard is (by Owner); Weights must be false.
	OwnedWeights *optim.State
}

// Reset empties the snapshot for the next save and keeps its buffers.
func (s *Snapshot) Reset() {
	s.Meta = Meta{}
	clear(s.Tensors)
	s.Tensors = s.Tensors[:0]
}

// Add appends a tensor. The snapshot refers to t.Data until it is reset or
// written; the caller must not change it before.
func (s *Snapshot) Add(t Tensor) { s.Tensors = append(s.Tensors, t) }

// Bytes returns the size of the snapshot's tensors.
func (s *Snapshot) Bytes() int64 {
	var n int64
	for _, t := range s.Tensors {
		n += int64(len(t.Data))
	}
	return n
}

func (s *Snapshot) buffer(k bufKey, n int) []float32 {
	if s.bufs == nil {
		s.bufs = map[bufKey][]float32{}
	}
	b := s.bufs[k]
	if len(b) != n {
		b = make([]float32, n)
		s.bufs[k] = b
	}
	return b
}

// AddModel adds a model part's parameters (by their PyTorch names and
// shapes, F32) and, when opt is not nil, its optimizer's state buffers
// ("optim.<state>.<param>") as tensors of pipeline stage stage, and records
// the optimizer in Meta.Optimizer. It downloads each flat buffer once into
// a buffer the snapshot keeps, and the tensors are views of it. Call it
// once per stage, stages in order; in data parallelism, with one replica
// of each stage (all replicas hold the same state).
func (s *Snapshot) AddModel(stage int, set *nn.ParamSet, opt optim.Optimizer) error {
	return s.addParams(bufKey{stage: stage}, set, opt, "")
}

// AddStage is AddModel for a pipeline stage built by nn.Build, or a
// tensor-parallel shard of one (nn.BuildShard; its tensors are its parts
// of the whole ones, Tensor.Split): when the stage holds a tied token
// embedding that an earlier stage holds too (Model.Tied on a stage that is
// not the first), that copy is left out, so the checkpoint stores the
// tensor once, under the first stage. Restore loads it into every stage
// that has it, by name.
func (s *Snapshot) AddStage(stage int, m *nn.Model, opt optim.Optimizer) error {
	return s.AddPart(stage, m, opt, PartOptions{Weights: true})
}

// AddPart is AddStage for one rank of a part's data-parallel group (its
// weights, or its ZeRO shard of the optimizer state, as o says).
func (s *Snapshot) AddPart(stage int, m *nn.Model, opt optim.Optimizer, o PartOptions) error {
	skip := ""
	if m.Tied != nil && !m.First() {
		skip = m.Tied.Name
	}
	return s.addParamsAs(bufKey{stage: stage, tp: m.TP.Rank}, m.Set, opt, skip, o)
}

func (s *Snapshot) addParams(k bufKey, set *nn.ParamSet, opt optim.Optimizer, skip string) error {
	return s.addParamsAs(k, set, opt, skip, PartOptions{Weights: true})
}

func (s *Snapshot) addParamsAs(k bufKey, set *nn.ParamSet, opt optim.Optimizer, skip string, o PartOptions) error {
	stage := k.stage
	be := set.Backend()
	var params []*nn.Param
	for _, p := range set.Params() {
		if p.Name != skip {
			params = append(params, p)
		}
	}
	spec := func(name string, p *nn.Param) Tensor {
		t := Tensor{TensorSpec: TensorSpec{Name: name, DType: safetensors.F32, Shape: slices.Clone(p.Shape), Stage: stage}, TPRank: k.tp}
		if p.Split != nil {
			t.Shape, t.Split = slices.Clone(p.Split.Full), p.Split
		}
		return t
	}
	tensor := func(name string, p *nn.Param, data []float32) Tensor {
		t := spec(name, p)
		t.Data = f32Bytes(data[p.Offset : p.Offset+p.Size()])
		return t
	}
	var w []float32
	if o.Weights {
		w = s.buffer(k, set.Len())
		be.Download(w, set.Weights())
	}
	switch {
	case o.OwnedWeights != nil:
		ow := *o.OwnedWeights
		ow.Name = ""
		if err := s.addStateShard(be, k, params, ow, o.Owner, spec); err != nil {
			return err
		}
	default:
		for _, p := range params {
			if o.Weights {
				s.Add(tensor(p.Name, p, w))
			} else {
				t := spec(p.Name, p)
				t.SpecOnly = true
				s.Add(t)
			}
		}
	}
	if opt == nil {
		return nil
	}
	st := OptimizerStateOf(opt)
	if prev := s.Meta.Optimizer; prev != nil && (prev.Config() != st.Config() || prev.Steps != st.Steps || !slices.Equal(prev.States, st.States)) {
		return fmt.Errorf("%w: stage %d's optimizer (%s, %d steps) differs from an earlier stage's (%s, %d steps)",
			ErrSnapshot, stage, st.Name, st.Steps, prev.Name, prev.Steps)
	}
	s.Meta.Optimizer = st
	for _, ost := range opt.States() {
		if ost.Ranges != nil {
			if err := s.addStateShard(be, k, params, ost, o.Owner, spec); err != nil {
				return err
			}
			continue
		}
		if ost.Buf.Len() != set.Len() {
			return fmt.Errorf("%w: optimizer state %s has %d elements, the parameters %d", ErrSnapshot, ost.Name, ost.Buf.Len(), set.Len())
		}
		if !o.Weights {
			for _, p := range params {
				t := spec(OptimName(ost.Name, p.Name), p)
				t.SpecOnly = true
				s.Add(t)
			}
			continue
		}
		b := s.buffer(bufKey{stage, k.tp, ost.Name}, set.Len())
		be.Download(b, ost.Buf)
		for _, p := range params {
			s.Add(tensor(OptimName(ost.Name, p.Name), p, b))
		}
	}
	return nil
}

// addStateShard adds a ZeRO shard of optimizer state (ost holds the flat
// ranges ost.Ranges of the part): per parameter, the element ranges it
// holds of it, written by data-parallel rank owner (−1: listed only).
func (s *Snapshot) addStateShard(be kernels.Backend, k bufKey, params []*nn.Param, ost optim.State, owner int, spec func(string, *nn.Param) Tensor) error {
	n := 0
	for _, r := range ost.Ranges {
		n += r.Len()
	}
	if ost.Buf.Len() != n {
		return fmt.Errorf("%w: optimizer state %s holds %d elements, its ranges %d", ErrSnapshot, ost.Name, ost.Buf.Len(), n)
	}
	var b []float32
	if owner >= 0 {
		b = s.buffer(bufKey{k.stage, k.tp, ost.Name}, n)
		be.Download(b, ost.Buf)
	}
	for _, p := range params {
		name := p.Name // the weights themselves (ZeRO-3)
		if ost.Name != "" {
			name = OptimName(ost.Name, p.Name)
		}
		t := spec(name, p)
		if owner < 0 || p.Split == nil && k.tp > 0 {
			// Another rank writes it: another shard group's copy, or a
			// parameter every tensor-parallel shard holds whole (shard 0's
			// owners write it).
			t.SpecOnly = true
			s.Add(t)
			continue
		}
		t.Owned, t.Owner = true, owner
		var data []float32
		off := 0
		for _, r := range ost.Ranges {
			lo, hi := max(r.Lo, p.Offset), min(r.Hi, p.Offset+p.Size())
			if lo < hi {
				t.Elems = append(t.Elems, optim.Range{Lo: lo - p.Offset, Hi: hi - p.Offset})
				data = append(data, b[off+lo-r.Lo:off+hi-r.Lo]...)
			}
			off += r.Len()
		}
		t.Data = f32Bytes(data)
		if t.Data == nil {
			t.Data = []byte{}
		}
		s.Add(t)
	}
	return nil
}

// validate checks the snapshot as Save needs it: the tensors (listed once
// each, whatever shards hold them) and every shard's data.
func (s *Snapshot) validate() error {
	m := s.Meta
	if m.World.Size == 0 {
		m.World.Size = m.World.size()
	}
	if err := m.validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	if err := validateSpecs(s.specs(), m.World.PP, m.Optimizer); err != nil {
		return fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	for _, t := range s.Tensors {
		if t.TPRank < 0 || t.TPRank >= m.World.TPSize() {
			return fmt.Errorf("%w: tensor %q of tensor-parallel shard %d in world %v", ErrSnapshot, t.Name, t.TPRank, m.World)
		}
		if t.Split != nil && (!slices.Equal(t.Split.Full, t.Shape) || t.Split.Parts != m.World.TPSize() || t.Split.Index != t.TPRank || t.Split.Validate() != nil) {
			return fmt.Errorf("%w: tensor %q: shard %d's split %+v is not a part of %v in world %v", ErrSnapshot, t.Name, t.TPRank, *t.Split, t.Shape, m.World)
		}
		if t.Split != nil && t.Split.Dim > 0 && t.Split.Piece()*t.Split.Parts != t.Shape[t.Split.Dim] {
			return fmt.Errorf("%w: tensor %q: only dimension 0 may be padded, not %d", ErrSnapshot, t.Name, t.Split.Dim)
		}
		b, _ := TensorSpec{DType: t.DType, Shape: t.localShape()}.Bytes()
		switch {
		case t.SpecOnly:
			continue
		case t.Owned:
			if t.Owner < 0 || t.Owner >= m.World.DP {
				return fmt.Errorf("%w: tensor %q: owner %d outside %d data-parallel ranks", ErrSnapshot, t.Name, t.Owner, m.World.DP)
			}
			n := int64(0)
			for _, e := range t.Elems {
				if e.Lo < 0 || e.Lo > e.Hi || int64(e.Hi)*int64(t.DType.Size()) > b {
					return fmt.Errorf("%w: tensor %q: elements [%d, %d) outside %v", ErrSnapshot, t.Name, e.Lo, e.Hi, t.localShape())
				}
				n += int64(e.Len())
			}
			b = n * int64(t.DType.Size())
		}
		if int64(len(t.Data)) != b {
			return fmt.Errorf("%w: tensor %q has %d bytes of data, %v × %v needs %d", ErrSnapshot, t.Name, len(t.Data), t.DType, t.localShape(), b)
		}
	}
	return nil
}

// specs lists the snapshot's tensors once each, in order.
func (s *Snapshot) specs() []TensorSpec {
	var out []TensorSpec
	seen := map[string]bool{}
	for _, t := range s.Tensors {
		if !seen[t.Name] {
			seen[t.Name] = true
			out = append(out, t.TensorSpec)
		}
	}
	return out
}

// Shards splits the snapshot among the ranks of Meta.World, as each rank
// of that world would write it (see Partition): one RankShard per rank, in
// rank order. The shards refer to the snapshot's data.
func (s *Snapshot) Shards() ([]RankShard, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	w := s.Meta.World
	out := make([]RankShard, 0, w.DP*w.PP*w.TPSize())
	for st := 0; st < w.PP; st++ {
		for d := 0; d < w.DP; d++ {
			for tp := range w.TPSize() {
				r, err := s.shard(st, d, tp)
				if err != nil {
					return nil, err
				}
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// Shard returns what rank (stage, dpRank, tpRank) writes. In a
// multi-process world each rank's snapshot holds only its own part, and
// each calls Shard with its own coordinates.
func (s *Snapshot) Shard(stage, dpRank, tpRank int) (RankShard, error) {
	if err := s.validate(); err != nil {
		return RankShard{}, err
	}
	w := s.Meta.World
	if stage < 0 || stage >= w.PP || dpRank < 0 || dpRank >= w.DP || tpRank < 0 || tpRank >= w.TPSize() {
		return RankShard{}, fmt.Errorf("%w: stage %d, dp rank %d, tp rank %d outside world %v", ErrSnapshot, stage, dpRank, tpRank, w)
	}
	return s.shard(stage, dpRank, tpRank)
}

// shard splits the tensors of part (stage, tpRank) among the part's
// data-parallel ranks by rows of the part's data (Partition), those every
// shard holds whole among all the stage's ranks, and returns the rank's
// blocks, placed in the whole tensors: a shard's rows map to one
// block of whole rows, a row range of a column block (a cut along a later
// dimension), or one block per q, k and v (a fused qkv weight); padding
// rows map to nothing and are not written.
func (s *Snapshot) shard(stage, dpRank, tpRank int) (RankShard, error) {
	w := s.Meta.World
	w.Size = w.size()
	r := RankShard{World: w, Step: s.Meta.Step, Stage: stage, DPRank: dpRank, TPRank: tpRank}
	index := map[string]int{}
	for _, spec := range s.specs() {
		if spec.Stage == stage {
			index[spec.Name] = len(r.Specs)
			r.Specs = append(r.Specs, spec)
		}
	}
	// The shard's own parts of cut tensors go to the part's data-parallel
	// ranks; the tensors every shard holds whole, to all the stage's ranks
	// (each rank writes from its own, identical, copy).
	var cut, whole []Tensor
	for _, t := range s.Tensors {
		switch {
		case t.Stage != stage || t.TPRank != tpRank || t.SpecOnly:
		case t.Owned:
			if t.Owner == dpRank {
				r.Slices = append(r.Slices, ownedSlices(t, index[t.Name])...)
			}
		case t.Split != nil:
			cut = append(cut, t)
		default:
			whole = append(whole, t)
		}
	}
	add := func(ts []Tensor, ranks, rank int) error {
		local := make([]TensorSpec, len(ts))
		for i, t := range ts {
			local[i] = TensorSpec{Name: t.Name, DType: t.DType, Shape: t.localShape(), Stage: stage}
		}
		parts, err := Partition(local, ranks)
		if err != nil {
			return err
		}
		for _, p := range parts[rank] {
			t := ts[p.Tensor]
			rb := RowElems(local[p.Tensor].Shape) * int64(t.DType.Size())
			for _, sl := range pieceSlices(t, p.Lo, p.Hi) {
				sl.Tensor = index[t.Name]
				sl.Data = t.Data[sl.localLo*rb : sl.localHi*rb]
				r.Slices = append(r.Slices, sl.ShardSlice)
			}
		}
		return nil
	}
	if err := add(cut, w.DP, dpRank); err != nil {
		return RankShard{}, err
	}
	if err := add(whole, w.DP*w.TPSize(), dpRank*w.TPSize()+tpRank); err != nil {
		return RankShard{}, err
	}
	slices.SortStableFunc(r.Slices, func(a, b ShardSlice) int { return a.Tensor - b.Tensor })
	// A file names a second block of one tensor by its offsets.
	count := map[int]int{}
	for _, sl := range r.Slices {
		count[sl.Tensor]++
	}
	for i, sl := range r.Slices {
		if count[sl.Tensor] > 1 {
			r.Slices[i].Key = fmt.Sprintf("%s@%s", r.Specs[sl.Tensor].Name, joinOffsets(sl.Offsets))
		}
	}
	return r, nil
}

// ownedSlices places a ZeRO shard's element ranges in the whole tensor.
func ownedSlices(t Tensor, tensor int) []ShardSlice {
	es := t.DType.Size()
	var out []ShardSlice
	at := 0
	for _, e := range t.Elems {
		for _, pl := range elementBlocks(t.localShape(), t.Split, e.Lo, e.Hi) {
			n := int(boxVolume(pl.Size))
			out = append(out, ShardSlice{Tensor: tensor, Offsets: pl.Off, Sizes: pl.Size, Data: t.Data[(at+pl.At)*es : (at+pl.At+n)*es]})
		}
		at += e.Len()
	}
	return out
}

// localSlice is a block of the whole tensor with the rows of the shard's
// data that hold it.
type localSlice struct {
	ShardSlice
	localLo, localHi int64
}

// pieceSlices places rows [lo, hi) of t's data in the whole tensor.
func pieceSlices(t Tensor, lo, hi int64) []localSlice {
	shape := t.Shape
	whole := func(off0, n int64) ([]int, []int) {
		off, size := make([]int, len(shape)), slices.Clone(shape)
		if size == nil {
			size = []int{}
		}
		if len(shape) > 0 {
			off[0], size[0] = int(off0), int(n)
		}
		return off, size
	}
	if t.Split == nil {
		off, size := whole(lo, hi-lo)
		return []localSlice{{ShardSlice: ShardSlice{Offsets: off, Sizes: size}, localLo: lo, localHi: hi}}
	}
	var out []localSlice
	for _, b := range t.Split.Boxes() {
		if b.Len == 0 {
			continue
		}
		if t.Split.Dim > 0 {
			// Rows are the whole tensor's rows; the block is a range of
			// the cut dimension.
			off, size := whole(lo, hi-lo)
			off[t.Split.Dim], size[t.Split.Dim] = b.Lo, b.Len
			out = append(out, localSlice{ShardSlice: ShardSlice{Offsets: off, Sizes: size}, localLo: lo, localHi: hi})
			continue
		}
		a, z := max(lo, int64(b.At)), min(hi, int64(b.At+b.Len))
		if a >= z {
			continue
		}
		off, size := whole(int64(b.Lo)+a-int64(b.At), z-a)
		out = append(out, localSlice{ShardSlice: ShardSlice{Offsets: off, Sizes: size}, localLo: a, localHi: z})
	}
	return out
}

func joinOffsets(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// littleEndian is true on the hosts troupe runs on (amd64, arm64); a
// big-endian host converts instead of viewing float32 memory as bytes.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// f32Bytes returns v's little-endian bytes: a view of v's memory on a
// little-endian host (no copy: the snapshot's pause is the download only),
// a converted copy otherwise.
func f32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return []byte{}
	}
	if littleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
	}
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// decodeF32 fills dst from little-endian bytes.
func decodeF32(dst []float32, b []byte) {
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
}

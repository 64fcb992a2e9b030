package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/safetensors"
)

// Tensor is a logical tensor of a snapshot with its host bytes (row-major,
// little-endian, len(Data) == Bytes()).
type Tensor struct {
	TensorSpec
	Data []byte
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
	stage int
	state string // "" for the weights
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
	return s.addParams(stage, set, opt, "")
}

// AddStage is AddModel for a pipeline stage built by nn.Build: when the
// stage holds a tied token embedding that an earlier stage holds too
// (Model.Tied on a stage that is not the first), that copy is left out, so
// the checkpoint stores the tensor once, under the first stage. Restore
// loads it into every stage that has it, by name.
func (s *Snapshot) AddStage(stage int, m *nn.Model, opt optim.Optimizer) error {
	skip := ""
	if m.Tied != nil && !m.First() {
		skip = m.Tied.Name
	}
	return s.addParams(stage, m.Set, opt, skip)
}

func (s *Snapshot) addParams(stage int, set *nn.ParamSet, opt optim.Optimizer, skip string) error {
	be := set.Backend()
	w := s.buffer(bufKey{stage, ""}, set.Len())
	be.Download(w, set.Weights())
	var params []*nn.Param
	for _, p := range set.Params() {
		if p.Name != skip {
			params = append(params, p)
		}
	}
	for _, p := range params {
		s.Add(Tensor{
			TensorSpec: TensorSpec{Name: p.Name, DType: safetensors.F32, Shape: slices.Clone(p.Shape), Stage: stage},
			Data:       f32Bytes(w[p.Offset : p.Offset+p.Size()]),
		})
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
		if ost.Buf.Len() != set.Len() {
			return fmt.Errorf("%w: optimizer state %s has %d elements, the parameters %d", ErrSnapshot, ost.Name, ost.Buf.Len(), set.Len())
		}
		b := s.buffer(bufKey{stage, ost.Name}, set.Len())
		be.Download(b, ost.Buf)
		for _, p := range params {
			s.Add(Tensor{
				TensorSpec: TensorSpec{Name: OptimName(ost.Name, p.Name), DType: safetensors.F32, Shape: slices.Clone(p.Shape), Stage: stage},
				Data:       f32Bytes(b[p.Offset : p.Offset+p.Size()]),
			})
		}
	}
	return nil
}

// validate checks the snapshot as Save needs it.
func (s *Snapshot) validate() error {
	m := s.Meta
	if m.World.Size == 0 {
		m.World.Size = m.World.DP * m.World.PP
	}
	if err := m.validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	specs := make([]TensorSpec, len(s.Tensors))
	for i, t := range s.Tensors {
		specs[i] = t.TensorSpec
	}
	if err := validateSpecs(specs, m.World.PP, m.Optimizer); err != nil {
		return fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	for _, t := range s.Tensors {
		if b, _ := t.Bytes(); int64(len(t.Data)) != b {
			return fmt.Errorf("%w: tensor %q has %d bytes of data, %v × %v needs %d", ErrSnapshot, t.Name, len(t.Data), t.DType, t.Shape, b)
		}
	}
	return nil
}

// Shards splits the snapshot among the ranks of Meta.World, as each rank
// of that world would write it (see Partition): one RankShard per rank, in
// rank order. The shards refer to the snapshot's data.
func (s *Snapshot) Shards() ([]RankShard, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	w := s.Meta.World
	out := make([]RankShard, 0, w.DP*w.PP)
	for st := 0; st < w.PP; st++ {
		for d := 0; d < w.DP; d++ {
			r, err := s.shard(st, d)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// Shard returns what rank (stage, dpRank) writes. In a multi-process world
// each rank's snapshot holds only its own stage, and each calls Shard with
// its own coordinates.
func (s *Snapshot) Shard(stage, dpRank int) (RankShard, error) {
	if err := s.validate(); err != nil {
		return RankShard{}, err
	}
	w := s.Meta.World
	if stage < 0 || stage >= w.PP || dpRank < 0 || dpRank >= w.DP {
		return RankShard{}, fmt.Errorf("%w: stage %d, dp rank %d outside world %v", ErrSnapshot, stage, dpRank, w)
	}
	return s.shard(stage, dpRank)
}

func (s *Snapshot) shard(stage, dpRank int) (RankShard, error) {
	w := s.Meta.World
	w.Size = w.DP * w.PP
	r := RankShard{World: w, Step: s.Meta.Step, Stage: stage, DPRank: dpRank}
	var data [][]byte
	for _, t := range s.Tensors {
		if t.Stage == stage {
			r.Specs = append(r.Specs, t.TensorSpec)
			data = append(data, t.Data)
		}
	}
	parts, err := Partition(r.Specs, w.DP)
	if err != nil {
		return RankShard{}, err
	}
	r.Pieces = parts[dpRank]
	r.Data = make([][]byte, len(r.Pieces))
	for i, p := range r.Pieces {
		spec := r.Specs[p.Tensor]
		rb := RowElems(spec.Shape) * int64(spec.DType.Size())
		r.Data[i] = data[p.Tensor][p.Lo*rb : p.Hi*rb]
	}
	return r, nil
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

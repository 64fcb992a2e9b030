package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/nn/optim"
	"github.com/troupe-ml/troupe/safetensors"
)

// Format constants.
const (
	// FormatName is the manifest's "format" field.
	FormatName = "troupe-checkpoint"
	// FormatVersion is the manifest version this build writes; it reads
	// it and version 1 (no tensor parallelism: every slice a block of
	// whole rows).
	FormatVersion = 2
	// ManifestFile is the manifest's name in a checkpoint directory.
	ManifestFile = "manifest.json"
	// LatestFile is the pointer to the newest committed checkpoint, in the
	// checkpoint root: one line naming its directory ("step-000300").
	LatestFile = "latest"
	// MaxManifestSize bounds manifest.json on read: a real one is a few
	// hundred bytes per tensor slice.
	MaxManifestSize = 64 << 20
	// OptimPrefix starts the name of every optimizer-state tensor:
	// "optim.<state>.<parameter>", e.g. "optim.exp_avg.blocks.0.qkv.weight".
	OptimPrefix = "optim."
	// maxWorld bounds dp and pp in a manifest (and so the number of shard
	// files) far above any real run, so a hostile manifest cannot make a
	// reader loop or allocate for billions of ranks.
	maxWorld = 1 << 16
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crc32c is the CRC-32C (Castagnoli) of b, the checksum in every manifest.
func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Manifest is a checkpoint's manifest.json: the step's state beside the
// weights (Meta), the shard files, and where each tensor's slices are.
type Manifest struct {
	// Format is FormatName; Version is FormatVersion.
	Format  string `json:"format"`
	Version int    `json:"version"`
	Meta
	// Files are the shard files, one per rank of the world that wrote the
	// checkpoint, in rank order.
	Files []FileEntry `json:"files"`
	// Tensors are the logical tensors: parameters in model order, stage by
	// stage, each stage's optimizer states after its parameters.
	Tensors []TensorEntry `json:"tensors"`
	// Checksum is the CRC-32C of the manifest's compact JSON encoding with
	// Checksum set to 0, so that a flipped byte in a step, cursor or
	// offset is caught rather than trusted.
	Checksum uint32 `json:"checksum"`

	index map[string]int
}

// Meta is the training state a checkpoint carries beside the tensors:
// everything a resumed run needs to continue as if it had not stopped.
type Meta struct {
	// Step is the number of optimizer steps done: a resumed run's first
	// step is Step (0-based), and its LR schedule continues from there.
	Step int64 `json:"step"`
	// Generation is the elastic world generation that wrote it.
	Generation uint64 `json:"generation"`
	// World is the layout of the ranks that wrote it.
	World World `json:"world"`
	// Sampler is the data sampler's cursor and settings.
	Sampler *data.SamplerState `json:"sampler,omitempty"`
	// RNG holds named random-generator states (e.g. a math/rand/v2 PCG's
	// MarshalBinary), for generators that are not a pure function of the
	// seed and the step.
	RNG map[string][]byte `json:"rng,omitempty"`
	// Optimizer is the optimizer's kind, hyper-parameters and step count.
	Optimizer *OptimizerState `json:"optimizer,omitempty"`
	// Schedule is the learning-rate schedule and its position.
	Schedule *ScheduleState `json:"schedule,omitempty"`
	// LossScaler is the fp16 dynamic loss scaler's state (PyTorch
	// GradScaler's state_dict), absent without one.
	LossScaler *ScalerState `json:"loss_scaler,omitempty"`
	// Config is the run's configuration as a JSON object, for a resumed
	// run to compare with its own; this package does not interpret it.
	Config json.RawMessage `json:"config,omitempty"`
}

// ScalerState is a dynamic loss scaler's state, named as PyTorch's
// GradScaler.state_dict() names it.
type ScalerState struct {
	Scale          float64 `json:"scale"`
	GrowthFactor   float64 `json:"growth_factor"`
	BackoffFactor  float64 `json:"backoff_factor"`
	GrowthInterval int     `json:"growth_interval"`
	GrowthTracker  int     `json:"_growth_tracker"`
}

// World is the layout of the ranks that wrote a checkpoint. Ranks are
// numbered stage-major with the tensor-parallel shard innermost, as
// Megatron-LM (and troupe's mesh) orders them: rank = (stage·DP +
// dpRank)·TP + tpRank.
type World struct {
	// Size is DP·PP·TP (filled in by Save when 0).
	Size int `json:"size"`
	// DP is the number of data-parallel replicas of each stage.
	DP int `json:"dp"`
	// PP is the number of pipeline stages.
	PP int `json:"pp"`
	// TP is the number of tensor-parallel shards of each stage (0: 1).
	TP int `json:"tp,omitempty"`
}

// TPSize is the number of tensor-parallel shards of each stage: TP, 0
// read as 1.
func (w World) TPSize() int { return max(1, w.TP) }

// Rank returns the rank of (stage, dpRank, tpRank).
func (w World) Rank(stage, dpRank, tpRank int) int { return (stage*w.DP+dpRank)*w.TPSize() + tpRank }

// String is "dp=2 pp=2" (and " tp=2" with tensor parallelism).
func (w World) String() string {
	if w.TPSize() > 1 {
		return fmt.Sprintf("dp=%d pp=%d tp=%d", w.DP, w.PP, w.TP)
	}
	return fmt.Sprintf("dp=%d pp=%d", w.DP, w.PP)
}

// size is DP·PP·TP.
func (w World) size() int { return w.DP * w.PP * w.TPSize() }

func (w World) validate() error {
	if w.DP < 1 || w.PP < 1 || w.DP > maxWorld || w.PP > maxWorld || w.TP < 0 || w.TP > maxWorld {
		return fmt.Errorf("world dp=%d pp=%d tp=%d: each must be in [1, %d]", w.DP, w.PP, w.TP, maxWorld)
	}
	if w.Size != w.size() {
		return fmt.Errorf("world size %d is not dp×pp×tp = %d", w.Size, w.size())
	}
	return nil
}

// OptimizerState is the optimizer of a checkpoint: its configuration (the
// fields of optim.Config), its update count, and the names of its state
// buffers, each stored per parameter as "optim.<state>.<parameter>".
type OptimizerState struct {
	Name        string  `json:"name"`
	Steps       int64   `json:"steps"`
	Momentum    float32 `json:"momentum"`
	Dampening   float32 `json:"dampening"`
	Nesterov    bool    `json:"nesterov"`
	Beta1       float32 `json:"beta1"`
	Beta2       float32 `json:"beta2"`
	Eps         float32 `json:"eps"`
	WeightDecay float32 `json:"weight_decay"`
	// States are the buffer names, in the optimizer's order (momentum_buffer;
	// exp_avg, exp_avg_sq).
	States []string `json:"states"`
}

// OptimizerStateOf describes opt for a manifest.
func OptimizerStateOf(opt optim.Optimizer) *OptimizerState {
	c := opt.Config()
	s := &OptimizerState{
		Name: c.Name, Steps: int64(opt.Steps()),
		Momentum: c.Momentum, Dampening: c.Dampening, Nesterov: c.Nesterov,
		Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, WeightDecay: c.WeightDecay,
		States: []string{},
	}
	for _, st := range opt.States() {
		s.States = append(s.States, st.Name)
	}
	return s
}

// Config returns the optimizer configuration.
func (s *OptimizerState) Config() optim.Config {
	return optim.Config{Name: s.Name, Momentum: s.Momentum, Dampening: s.Dampening, Nesterov: s.Nesterov,
		Beta1: s.Beta1, Beta2: s.Beta2, Eps: s.Eps, WeightDecay: s.WeightDecay}
}

func (s *OptimizerState) validate() error {
	if err := s.Config().Validate(); err != nil {
		return fmt.Errorf("optimizer: %v", err)
	}
	if s.Steps < 0 {
		return fmt.Errorf("optimizer steps %d < 0", s.Steps)
	}
	if s.States == nil {
		return fmt.Errorf("optimizer states missing")
	}
	for i, n := range s.States {
		if !validStateName(n) {
			return fmt.Errorf("optimizer state %q: want letters, digits and '_'", n)
		}
		if slices.Contains(s.States[:i], n) {
			return fmt.Errorf("optimizer state %q listed twice", n)
		}
	}
	return nil
}

func validStateName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for _, c := range n {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// ScheduleState is the learning-rate schedule (optim.Schedule) and the
// optimizer step it is at.
type ScheduleState struct {
	Kind      string  `json:"kind"`
	BaseLR    float64 `json:"base_lr"`
	Warmup    int     `json:"warmup"`
	Total     int     `json:"total"`
	MinFactor float64 `json:"min_factor"`
	// Position is the 0-based step whose rate comes next.
	Position int64 `json:"position"`
}

// ScheduleStateOf describes s at position for a manifest.
func ScheduleStateOf(s optim.Schedule, position int64) *ScheduleState {
	return &ScheduleState{Kind: s.Kind, BaseLR: s.Base, Warmup: s.Warmup, Total: s.Total, MinFactor: s.MinFactor, Position: position}
}

// Schedule returns the schedule.
func (s *ScheduleState) Schedule() optim.Schedule {
	return optim.Schedule{Base: s.BaseLR, Kind: s.Kind, Warmup: s.Warmup, Total: s.Total, MinFactor: s.MinFactor}
}

func (s *ScheduleState) validate() error {
	if err := s.Schedule().Validate(); err != nil {
		return fmt.Errorf("schedule: %v", err)
	}
	if s.Total < 0 || s.Position < 0 {
		return fmt.Errorf("schedule total %d and position %d must be ≥ 0", s.Total, s.Position)
	}
	return nil
}

// FileEntry is one shard file: the rank that wrote it and how to check it.
type FileEntry struct {
	// Name is the file's name in the checkpoint directory.
	Name   string `json:"name"`
	Rank   int    `json:"rank"`
	Stage  int    `json:"stage"`
	DPRank int    `json:"dp_rank"`
	TPRank int    `json:"tp_rank,omitempty"`
	// Bytes is the file size.
	Bytes int64 `json:"bytes"`
	// HeaderCRC32C covers the file's first 8 + N bytes (length and JSON
	// header); the slices' CRCs cover the rest, so every byte is checked.
	HeaderCRC32C uint32 `json:"header_crc32c"`
}

// TensorEntry is one logical tensor and the slices that hold it.
type TensorEntry struct {
	Name  string            `json:"name"`
	DType safetensors.DType `json:"dtype"`
	// Shape is the logical shape (PyTorch's layout); [] for a scalar.
	Shape []int `json:"shape"`
	// Stage is the pipeline stage that held it.
	Stage int `json:"stage"`
	// Slices tile the tensor: sorted by Offsets[0], without gaps or
	// overlaps.
	Slices []SliceEntry `json:"slices"`
}

// SliceEntry is a block of a tensor, stored in a shard file as a tensor of
// shape Sizes named Key (the tensor's own name when Key is empty). Offsets
// and Sizes follow torch.distributed.checkpoint's chunk metadata: the
// block is [Offsets[d], Offsets[d]+Sizes[d]) along each dimension d. The
// slices a data-parallel rank writes are blocks of whole rows (only
// dimension 0 partial), so such a slice is also the contiguous element
// range [Offsets[0]·R, (Offsets[0]+Sizes[0])·R) of the row-major tensor, R
// being the product of the other dimensions; a tensor-parallel shard's are
// blocks of its rows of a column range (a row-parallel weight) or several
// row blocks in one file (a fused qkv weight: its q, k and v rows, named
// "<tensor>@<offsets>"). A scalar has one slice with empty Offsets and
// Sizes.
type SliceEntry struct {
	Offsets []int `json:"offsets"`
	Sizes   []int `json:"sizes"`
	// Key is the slice's tensor name in its file, when it is not the
	// tensor's name (a file holding several slices of one tensor).
	Key string `json:"key,omitempty"`
	// File is the shard file holding it.
	File string `json:"file"`
	// Offset is the absolute file offset of its first byte, Bytes its
	// length, CRC32C the CRC-32C of those bytes.
	Offset int64  `json:"offset"`
	Bytes  int64  `json:"bytes"`
	CRC32C uint32 `json:"crc32c"`
}

// key is the slice's tensor name in its file.
func (s SliceEntry) key(tensor string) string {
	if s.Key != "" {
		return s.Key
	}
	return tensor
}

// RowElems returns R, the number of elements in one row of dimension 0 (1
// for a scalar or a 1-D tensor).
func RowElems(shape []int) int64 {
	n, _ := safetensors.NumElements(shape[min(1, len(shape)):])
	return n
}

// Rows returns the length of dimension 0 (1 for a scalar).
func Rows(shape []int) int64 {
	if len(shape) == 0 {
		return 1
	}
	return int64(shape[0])
}

// Elements returns the slice's element range [start, stop) in the
// row-major flattening of a tensor of the given shape.
func (s SliceEntry) Elements(shape []int) (start, stop int64) {
	if len(shape) == 0 {
		return 0, 1
	}
	r := RowElems(shape)
	return int64(s.Offsets[0]) * r, int64(s.Offsets[0]+s.Sizes[0]) * r
}

// Lookup returns the tensor called name.
func (m *Manifest) Lookup(name string) (*TensorEntry, bool) {
	if m.index == nil {
		m.buildIndex()
	}
	i, ok := m.index[name]
	if !ok {
		return nil, false
	}
	return &m.Tensors[i], true
}

func (m *Manifest) buildIndex() {
	m.index = make(map[string]int, len(m.Tensors))
	for i, t := range m.Tensors {
		m.index[t.Name] = i
	}
}

// Params returns the names of the parameters (every tensor that is not an
// optimizer state) in model order.
func (m *Manifest) Params() []string {
	var out []string
	for _, t := range m.Tensors {
		if isParam(t.Name) {
			out = append(out, t.Name)
		}
	}
	return out
}

// Bytes returns the total size of the shard files.
func (m *Manifest) Bytes() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Bytes
	}
	return n
}

// OptimName returns the tensor name of optimizer state buffer state for
// parameter param: "optim.<state>.<param>".
func OptimName(state, param string) string { return OptimPrefix + state + "." + param }

// splitOptimName is OptimName's inverse.
func splitOptimName(name string) (state, param string, ok bool) {
	rest, ok := strings.CutPrefix(name, OptimPrefix)
	if !ok {
		return "", "", false
	}
	state, param, ok = strings.Cut(rest, ".")
	return state, param, ok && state != "" && param != ""
}

// EncodeManifest validates m, sets its Checksum and returns manifest.json's
// bytes (indented JSON and a final newline). It normalises nil slices to
// empty ones so that every field is written.
func EncodeManifest(m *Manifest) ([]byte, error) {
	m.normalize()
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	sum, err := m.checksum()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	m.Checksum = sum
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	return append(inlineNumberArrays(b), '\n'), nil
}

// inlineNumberArrays puts every JSON array of numbers on one line
// ("shape": [3, 2]), which MarshalIndent spreads one number per line. The
// checksum covers the compact encoding, so layout is free.
func inlineNumberArrays(b []byte) []byte {
	out := make([]byte, 0, len(b))
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString:
			if c == '\\' && i+1 < len(b) {
				out = append(out, c, b[i+1])
				i++
				continue
			}
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '[':
			j := i + 1
			for j < len(b) && strings.IndexByte("0123456789-+.eE, \n", b[j]) >= 0 {
				j++
			}
			if j < len(b) && b[j] == ']' && j > i+1 {
				out = append(out, '[')
				out = append(out, strings.Join(strings.Fields(strings.ReplaceAll(string(b[i+1:j]), ",", " ")), ", ")...)
				out = append(out, ']')
				i = j
				continue
			}
		}
		out = append(out, c)
	}
	return out
}

func (m *Manifest) normalize() {
	if m.Format == "" {
		m.Format = FormatName
	}
	if m.Version == 0 {
		m.Version = FormatVersion
	}
	if m.World.Size == 0 {
		m.World.Size = m.World.DP * m.World.PP
	}
	if m.Files == nil {
		m.Files = []FileEntry{}
	}
	if m.Tensors == nil {
		m.Tensors = []TensorEntry{}
	}
	if m.Optimizer != nil && m.Optimizer.States == nil {
		m.Optimizer.States = []string{}
	}
	for i := range m.Tensors {
		t := &m.Tensors[i]
		if t.Shape == nil {
			t.Shape = []int{}
		}
		for j := range t.Slices {
			if t.Slices[j].Offsets == nil {
				t.Slices[j].Offsets = []int{}
			}
			if t.Slices[j].Sizes == nil {
				t.Slices[j].Sizes = []int{}
			}
		}
	}
}

// checksum is the CRC-32C of m's compact JSON with Checksum 0.
func (m *Manifest) checksum() (uint32, error) {
	c := *m
	c.Checksum = 0
	c.index = nil
	b, err := json.Marshal(&c)
	if err != nil {
		return 0, err
	}
	return crc32c(b), nil
}

// DecodeManifest parses and validates manifest.json. It rejects anything
// this version would not have written: unknown fields, trailing data, a
// field out of range, slices that do not tile their tensor exactly, file
// references that do not resolve, and a checksum that does not match. The
// error wraps ErrManifest (or ErrVersion) and names the field.
func DecodeManifest(b []byte) (*Manifest, error) {
	if len(b) > MaxManifestSize {
		return nil, fmt.Errorf("%w: %d bytes, over the %d-byte limit", ErrManifest, len(b), MaxManifestSize)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	m := &Manifest{}
	if err := dec.Decode(m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, jsonError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrManifest)
	}
	if m.Format != FormatName {
		return nil, fmt.Errorf("%w: format %q, want %q", ErrManifest, m.Format, FormatName)
	}
	if m.Version != 1 && m.Version != FormatVersion {
		return nil, fmt.Errorf("%w: version %d, this build reads 1 to %d", ErrVersion, m.Version, FormatVersion)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	sum, err := m.checksum()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	if sum != m.Checksum {
		return nil, fmt.Errorf("%w: checksum %d does not match the content (CRC-32C %d): the manifest was changed or damaged",
			ErrManifest, m.Checksum, sum)
	}
	return m, nil
}

func jsonError(err error) string {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return "JSON is empty or truncated"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// validate checks everything but the checksum.
func (m *Manifest) validate() error {
	if m.Format != FormatName || m.Version < 1 || m.Version > FormatVersion {
		return fmt.Errorf("format %q version %d, want %q version 1 to %d", m.Format, m.Version, FormatName, FormatVersion)
	}
	if m.Version == 1 && m.World.TP != 0 {
		return fmt.Errorf("a version-1 manifest has no tensor parallelism (world tp %d)", m.World.TP)
	}
	if err := m.Meta.validate(); err != nil {
		return err
	}
	w := m.World
	if m.Files == nil {
		return fmt.Errorf("files missing")
	}
	if len(m.Files) != w.Size {
		return fmt.Errorf("%d files for a world of %d ranks (one per rank)", len(m.Files), w.Size)
	}
	files := make(map[string]*FileEntry, len(m.Files))
	for i := range m.Files {
		f := &m.Files[i]
		if err := validFileName(f.Name); err != nil {
			return fmt.Errorf("files[%d]: %v", i, err)
		}
		if files[f.Name] != nil {
			return fmt.Errorf("file %q listed twice", f.Name)
		}
		files[f.Name] = f
		if f.Rank != i {
			return fmt.Errorf("file %q: rank %d at position %d (files are in rank order)", f.Name, f.Rank, i)
		}
		if f.Stage < 0 || f.Stage >= w.PP || f.DPRank < 0 || f.DPRank >= w.DP || f.TPRank < 0 || f.TPRank >= w.TPSize() ||
			w.Rank(f.Stage, f.DPRank, f.TPRank) != f.Rank {
			return fmt.Errorf("file %q: rank %d is not stage %d, dp rank %d, tp rank %d of %v", f.Name, f.Rank, f.Stage, f.DPRank, f.TPRank, w)
		}
		if f.Bytes < 8 {
			return fmt.Errorf("file %q: %d bytes, a safetensors file has at least 8", f.Name, f.Bytes)
		}
	}
	if m.Tensors == nil {
		return fmt.Errorf("tensors missing")
	}
	specs := make([]TensorSpec, len(m.Tensors))
	for i, t := range m.Tensors {
		specs[i] = TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape, Stage: t.Stage}
	}
	if err := validateSpecs(specs, w.PP, m.Optimizer); err != nil {
		return err
	}
	type fileTensor struct{ file, tensor string }
	held := map[fileTensor]bool{}
	for _, t := range m.Tensors {
		if err := validateSlices(t, files); err != nil {
			return fmt.Errorf("tensor %q: %v", t.Name, err)
		}
		for _, s := range t.Slices {
			k := fileTensor{s.File, s.key(t.Name)}
			if held[k] {
				return fmt.Errorf("tensor %q: file %q holds two slices named %q", t.Name, s.File, k.tensor)
			}
			held[k] = true
			if f := files[s.File]; f.Stage != t.Stage {
				return fmt.Errorf("tensor %q of stage %d has a slice in file %q of stage %d", t.Name, t.Stage, s.File, f.Stage)
			}
		}
	}
	return nil
}

func (m *Meta) validate() error {
	if m.Step < 0 {
		return fmt.Errorf("step %d < 0", m.Step)
	}
	if err := m.World.validate(); err != nil {
		return err
	}
	if s := m.Sampler; s != nil && (s.N < 1 || int64(s.N) > math.MaxUint32) {
		return fmt.Errorf("sampler n=%d: want 1 to %d samples", s.N, uint32(math.MaxUint32))
	}
	for k := range m.RNG {
		if k == "" || !utf8.ValidString(k) {
			return fmt.Errorf("rng state name %q is empty or not UTF-8", k)
		}
	}
	if m.Optimizer != nil {
		if err := m.Optimizer.validate(); err != nil {
			return err
		}
	}
	if m.Schedule != nil {
		if err := m.Schedule.validate(); err != nil {
			return err
		}
	}
	if len(m.Config) > 0 {
		c := bytes.TrimLeft(m.Config, " \t\r\n")
		if len(c) == 0 || c[0] != '{' || !json.Valid(c) {
			return fmt.Errorf("config is not a JSON object")
		}
	}
	return nil
}

// validFileName admits a plain file name: no directory part, no "..", no
// control characters, ending in .safetensors.
func validFileName(n string) error {
	if n == "" || len(n) > 255 || !utf8.ValidString(n) || strings.ContainsAny(n, "/\\\x00") || n == "." || n == ".." ||
		!strings.HasSuffix(n, ".safetensors") || strings.HasPrefix(n, ".") {
		return fmt.Errorf("file name %q is not a plain *.safetensors name", n)
	}
	for _, c := range n {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("file name %q has a control character", n)
		}
	}
	return nil
}

// TensorSpec is a logical tensor without its data: what a snapshot, a part
// manifest and a manifest all describe.
type TensorSpec struct {
	Name  string            `json:"name"`
	DType safetensors.DType `json:"dtype"`
	Shape []int             `json:"shape"`
	Stage int               `json:"stage"`
}

// Bytes returns the tensor's size in bytes, or false when it overflows.
func (s TensorSpec) Bytes() (int64, bool) {
	n, ok := safetensors.NumElements(s.Shape)
	if !ok {
		return 0, false
	}
	es := int64(s.DType.Size())
	if es == 0 || n > math.MaxInt64/es {
		return 0, false
	}
	return n * es, true
}

// validateSpecs checks a list of logical tensors: names unique and valid,
// dtypes known, shapes sane, stages in [0, pp) and non-decreasing, and every
// optimizer-state tensor "optim.<state>.<param>" naming a state of opt and
// a parameter of the same shape, dtype and stage.
func validateSpecs(specs []TensorSpec, pp int, opt *OptimizerState) error {
	seen := make(map[string]int, len(specs))
	prevStage := 0
	for i, t := range specs {
		if t.Name == "" || len(t.Name) > 1024 || !utf8.ValidString(t.Name) || t.Name == "__metadata__" {
			return fmt.Errorf("tensors[%d]: name %q is empty, too long, reserved or not UTF-8", i, t.Name)
		}
		if _, dup := seen[t.Name]; dup {
			return fmt.Errorf("tensor %q listed twice", t.Name)
		}
		seen[t.Name] = i
		if !t.DType.Valid() {
			return fmt.Errorf("tensor %q: dtype %v", t.Name, t.DType)
		}
		if t.Shape == nil {
			return fmt.Errorf("tensor %q: shape missing", t.Name)
		}
		if len(t.Shape) > 8 {
			return fmt.Errorf("tensor %q: %d dimensions, at most 8", t.Name, len(t.Shape))
		}
		if _, ok := t.Bytes(); !ok {
			return fmt.Errorf("tensor %q: shape %v is negative or overflows", t.Name, t.Shape)
		}
		if t.Stage < 0 || t.Stage >= pp {
			return fmt.Errorf("tensor %q: stage %d outside [0, %d)", t.Name, t.Stage, pp)
		}
		if t.Stage < prevStage {
			return fmt.Errorf("tensor %q: stage %d after stage %d (tensors are listed stage by stage)", t.Name, t.Stage, prevStage)
		}
		prevStage = t.Stage
	}
	optims := 0
	for _, t := range specs {
		if !strings.HasPrefix(t.Name, OptimPrefix) {
			continue
		}
		optims++
		state, param, ok := splitOptimName(t.Name)
		if !ok {
			return fmt.Errorf("tensor %q: optimizer state names are %s<state>.<parameter>", t.Name, OptimPrefix)
		}
		if opt == nil || !slices.Contains(opt.States, state) {
			return fmt.Errorf("tensor %q: %q is not a state of the manifest's optimizer", t.Name, state)
		}
		j, ok := seen[param]
		if !ok || strings.HasPrefix(param, OptimPrefix) {
			return fmt.Errorf("tensor %q: no parameter %q", t.Name, param)
		}
		p := specs[j]
		if p.DType != t.DType || !slices.Equal(p.Shape, t.Shape) || p.Stage != t.Stage {
			return fmt.Errorf("tensor %q is %v %v on stage %d, its parameter %v %v on stage %d",
				t.Name, t.DType, t.Shape, t.Stage, p.DType, p.Shape, p.Stage)
		}
	}
	// Names are unique and each optimizer tensor names a state and a
	// parameter, so the count says whether every pair is there.
	if opt != nil {
		if want := (len(specs) - optims) * len(opt.States); optims != want {
			return fmt.Errorf("%d optimizer-state tensors, want %d (each of %d states for each parameter)",
				optims, want, len(opt.States))
		}
	}
	return nil
}

// validateSlices checks that t's slices are row blocks that tile it and
// that each lies inside its file.
func validateSlices(t TensorEntry, files map[string]*FileEntry) error {
	if len(t.Slices) == 0 {
		return fmt.Errorf("no slices")
	}
	spec := TensorSpec{DType: t.DType, Shape: t.Shape}
	total, _ := spec.Bytes()
	numel, _ := safetensors.NumElements(t.Shape)
	es := int64(t.DType.Size())
	if total == 0 && len(t.Slices) != 1 {
		return fmt.Errorf("%d slices of an empty tensor, want 1", len(t.Slices))
	}
	var covered int64
	for i, s := range t.Slices {
		if len(s.Offsets) != len(t.Shape) || len(s.Sizes) != len(t.Shape) {
			return fmt.Errorf("slices[%d]: offsets %v and sizes %v do not have the tensor's %d dimensions",
				i, s.Offsets, s.Sizes, len(t.Shape))
		}
		for d := range t.Shape {
			if s.Offsets[d] < 0 || s.Sizes[d] < 0 || s.Sizes[d] > t.Shape[d]-s.Offsets[d] || s.Sizes[d] == 0 && total > 0 {
				return fmt.Errorf("slices[%d]: offsets %v sizes %v outside shape %v or empty", i, s.Offsets, s.Sizes, t.Shape)
			}
		}
		if i > 0 && slices.Compare(t.Slices[i-1].Offsets, s.Offsets) >= 0 {
			return fmt.Errorf("slices[%d] at %v after slices[%d] at %v (slices are sorted by offsets)", i, s.Offsets, i-1, t.Slices[i-1].Offsets)
		}
		for j := range i {
			if _, _, overlap := boxIntersect(s.Offsets, s.Sizes, t.Slices[j].Offsets, t.Slices[j].Sizes); overlap && len(t.Shape) > 0 {
				return fmt.Errorf("slices[%d] %v+%v overlaps slices[%d] %v+%v", i, s.Offsets, s.Sizes, j, t.Slices[j].Offsets, t.Slices[j].Sizes)
			}
		}
		n := boxVolume(s.Sizes)
		covered += n
		f := files[s.File]
		if f == nil {
			return fmt.Errorf("slices[%d]: file %q is not in the manifest's files", i, s.File)
		}
		if want := n * es; s.Bytes != want {
			return fmt.Errorf("slices[%d]: %d bytes, but %v elements of %d bytes are %d", i, s.Bytes, s.Sizes, es, want)
		}
		if s.Offset < 8 || s.Offset > f.Bytes || s.Bytes > f.Bytes-s.Offset {
			return fmt.Errorf("slices[%d]: bytes [%d, %d) outside file %q of %d bytes", i, s.Offset, s.Offset+s.Bytes, s.File, f.Bytes)
		}
		if s.Key != "" && (len(s.Key) > 1024 || !utf8.ValidString(s.Key) || s.Key == "__metadata__") {
			return fmt.Errorf("slices[%d]: key %q is too long, reserved or not UTF-8", i, s.Key)
		}
	}
	if covered != numel && total > 0 {
		return fmt.Errorf("slices cover %d of the tensor's %d elements", covered, numel)
	}
	return nil
}

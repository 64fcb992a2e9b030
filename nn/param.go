package nn

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
)

// Param is one named parameter tensor of a model.
type Param struct {
	// Name is the PyTorch state_dict key, e.g. "blocks.0.qkv.weight".
	Name string
	// Shape is the logical shape, PyTorch's layout.
	Shape []int
	// Offset is the parameter's first element in the flat buffers.
	Offset int
	// W and G are views of the set's flat weight and gradient buffers.
	W, G kernels.Buffer
	// Low is W rounded to the compute type of mixed precision (nil
	// without): what the GEMMs read. RefreshLow brings it up to date after
	// W changes.
	Low kernels.Buffer
	// Uses is how many layers contribute to G in one backward pass (2 for a
	// tied embedding); G is final after that many GradDone calls.
	Uses int
	// NoDecay excludes the parameter from weight decay.
	NoDecay bool
	// Split, for a tensor-parallel shard, is its place in the whole
	// parameter (nil: the parameter is whole, replicated on every shard).
	Split *Split
	// PartialGrad marks a parameter every tensor-parallel shard holds
	// whole but whose gradient on a shard is only that shard's part: the
	// sum over the group is the gradient, and the trainer sums it before
	// the update. With sequence parallelism, the parameters that see the
	// shard's rows only (LayerNorm and RMSNorm weights, the row-parallel
	// biases, the position embedding); with or without it, a weight the
	// shards use different parts of (replicated k/v projections, see
	// LlamaAttention).
	PartialGrad bool
	// init draws the initial weights at Finalize.
	init Init
}

// Size is the number of elements.
func (p *Param) Size() int { return numel(p.Shape) }

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// ParamSet owns a model's parameters in two flat buffers (weights and
// gradients), in registration (forward) order.
type ParamSet struct {
	be     kernels.Backend
	seed   uint64
	params []*Param
	byName map[string]*Param
	w, g   kernels.Buffer
	n      int
	ready  bool
}

// NewParamSet starts an empty set on a backend; seed drives the
// initialisers.
func NewParamSet(be kernels.Backend, seed uint64) *ParamSet {
	return &ParamSet{be: be, seed: seed, byName: map[string]*Param{}}
}

// Add registers a parameter drawn from init (PyTorch layout).
// Add panics after Finalize or on a duplicate name: both are programming
// errors in a model's constructor.
func (s *ParamSet) Add(name string, shape []int, init Init) *Param {
	if s.ready {
		panic("nn: ParamSet.Add after Finalize: " + name)
	}
	if _, dup := s.byName[name]; dup {
		panic("nn: duplicate parameter " + name)
	}
	p := &Param{Name: name, Shape: append([]int(nil), shape...), Offset: s.n, Uses: 1, init: init}
	s.n += p.Size()
	s.params = append(s.params, p)
	s.byName[name] = p
	return p
}

// AddShard registers a tensor-parallel shard of a parameter: its shape is
// the split's, and its initial weights are the split's part of the whole
// parameter drawn from init (so that every shard count starts from the
// whole model's weights; Megatron-LM's CPU initialisation does the same).
func (s *ParamSet) AddShard(name string, split Split, init Init) *Param {
	if err := split.Validate(); err != nil {
		panic("nn: " + name + ": " + err.Error())
	}
	p := s.Add(name, split.Shape(), init)
	p.Split = &split
	return p
}

// Finalize allocates the flat buffers, makes every parameter a view and runs
// the initialisers.
func (s *ParamSet) Finalize() {
	if s.ready {
		return
	}
	s.w, s.g = s.be.Alloc(s.n), s.be.Alloc(s.n)
	host := make([]float32, s.n)
	for _, p := range s.params {
		p.W = s.be.View(s.w, p.Offset, p.Size())
		p.G = s.be.View(s.g, p.Offset, p.Size())
		if p.Split == nil {
			p.init.fill(host[p.Offset:p.Offset+p.Size()], s.seed, p.Name)
			continue
		}
		whole := make([]float32, numel(p.Split.Full))
		p.init.fill(whole, s.seed, p.Name)
		p.Split.Extract(host[p.Offset:p.Offset+p.Size()], whole)
	}
	s.be.Upload(s.w, host)
	s.ready = true
}

// Backend is the set's backend.
func (s *ParamSet) Backend() kernels.Backend { return s.be }

// Params lists the parameters in registration order.
func (s *ParamSet) Params() []*Param { return s.params }

// Get returns a parameter by name, or nil.
func (s *ParamSet) Get(name string) *Param { return s.byName[name] }

// Len is the total number of elements.
func (s *ParamSet) Len() int { return s.n }

// Weights is the flat weight buffer.
func (s *ParamSet) Weights() kernels.Buffer { return s.w }

// Grads is the flat gradient buffer.
func (s *ParamSet) Grads() kernels.Buffer { return s.g }

// ZeroGrads clears every gradient (of the flat buffer; none after
// ReleaseGrads).
func (s *ParamSet) ZeroGrads() {
	if s.g != nil {
		s.be.Fill(s.g, 0)
	}
}

// ReleaseWeights frees the flat weight buffer and leaves every Param.W
// nil: the owner binds weights itself (ZeRO-3 gathers a layer's for its
// passes). Weights returns nil afterwards.
func (s *ParamSet) ReleaseWeights() {
	if s.w == nil {
		return
	}
	s.be.Free(s.w)
	s.w = nil
	for _, p := range s.params {
		p.W = nil
	}
}

// AllocWeights gives the set a flat weight buffer again after
// ReleaseWeights, every Param.W a view of it, its values zero until
// filled (a restore, a transfer). It does nothing while the set has one.
func (s *ParamSet) AllocWeights() {
	if s.w != nil {
		return
	}
	s.w = s.be.Alloc(s.n)
	s.be.Fill(s.w, 0)
	for _, p := range s.params {
		p.W = s.be.View(s.w, p.Offset, p.Size())
	}
}

// ReleaseGrads frees the flat gradient buffer and leaves every Param.G
// nil: the owner binds gradient buffers itself (ZeRO-2 keeps only a
// bucket's while it is reduced). Grads returns nil afterwards.
func (s *ParamSet) ReleaseGrads() {
	if s.g == nil {
		return
	}
	s.be.Free(s.g)
	s.g = nil
	for _, p := range s.params {
		p.G = nil
	}
}

// MoveGrads makes g (Len values) the flat gradient buffer: the gradients
// are copied into it, every Param.G becomes a view of it and the old
// buffer is freed (a trainer moves them into registered memory).
func (s *ParamSet) MoveGrads(g kernels.Buffer) error {
	if g.Len() != s.n {
		return fmt.Errorf("nn: a gradient buffer of %d values for %d parameters", g.Len(), s.n)
	}
	if s.g != nil {
		s.be.Copy(g, s.g)
		s.be.Free(s.g)
	}
	s.g = g
	for _, p := range s.params {
		p.G = s.be.View(s.g, p.Offset, p.Size())
	}
	return nil
}

// HostWeights downloads every weight into one host slice (flat order).
func (s *ParamSet) HostWeights() []float32 {
	out := make([]float32, s.n)
	s.be.Download(out, s.w)
	return out
}

// SetHostWeights uploads a flat host copy of every weight.
func (s *ParamSet) SetHostWeights(w []float32) error {
	if len(w) != s.n {
		return fmt.Errorf("nn: %d weights given, model has %d", len(w), s.n)
	}
	s.be.Upload(s.w, w)
	return nil
}

// StateDict returns each parameter's weights on the host, by name.
func (s *ParamSet) StateDict() map[string][]float32 {
	flat := s.HostWeights()
	out := make(map[string][]float32, len(s.params))
	for _, p := range s.params {
		out[p.Name] = flat[p.Offset : p.Offset+p.Size()]
	}
	return out
}

// LoadStateDict sets weights by name (a tensor-parallel shard takes its
// part of the whole tensor). Every parameter must be present with the
// right number of elements; shapes are checked by the caller that knows
// them (see LoadSafetensors). Unknown names are an error, so that a typo or
// a different model is never silently ignored.
func (s *ParamSet) LoadStateDict(sd map[string][]float32, shapes map[string][]int) error {
	flat := s.HostWeights()
	for name := range sd {
		if s.byName[name] == nil {
			return fmt.Errorf("%w: %q is not a parameter of this model", ErrStateDict, name)
		}
	}
	for _, p := range s.params {
		w, ok := sd[p.Name]
		if !ok {
			return fmt.Errorf("%w: missing %q", ErrStateDict, p.Name)
		}
		// A shard loads its part of the whole tensor.
		want := p.Shape
		if p.Split != nil {
			want = p.Split.Full
		}
		if shapes != nil {
			if sh, ok := shapes[p.Name]; ok && !sameShape(sh, want) {
				return fmt.Errorf("%w: %q has shape %v, model wants %v", ErrStateDict, p.Name, sh, want)
			}
		}
		if len(w) != numel(want) {
			return fmt.Errorf("%w: %q has %d elements, model wants %d (shape %v)", ErrStateDict, p.Name, len(w), numel(want), want)
		}
		if p.Split != nil {
			p.Split.Extract(flat[p.Offset:p.Offset+p.Size()], w)
			continue
		}
		copy(flat[p.Offset:], w)
	}
	s.be.Upload(s.w, flat)
	return nil
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// RefreshLow rounds every parameter's weights to its compute copy of type
// dt (kernels.BF16 or F16), allocating the copies the first time: after
// the weights change (an optimizer step, a load, a gather) and before the
// next pass reads them.
func RefreshLow(be kernels.Backend, dt kernels.DType, ps []*Param) error {
	lp, ok := kernels.LowPrecisionOf(be)
	if !ok || !dt.Low() {
		return fmt.Errorf("%w: the %s backend cannot compute in %v", ErrConfig, be.Caps().Device, dt)
	}
	for _, p := range ps {
		if p.Low == nil || p.Low.Len() != p.W.Len() || kernels.DTypeOf(p.Low) != dt {
			p.Low = lp.AllocAs(p.W.Len(), dt)
		}
		lp.Convert(p.Low, p.W)
	}
	return nil
}

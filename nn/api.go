package nn

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Spec is a model architecture: what a model implements to train in every
// world troupe runs (one worker, data-parallel replicas, pipeline stages,
// tensor-parallel shards, ZeRO, elastic agents). The trainer sees models
// through this interface only; the MLP, the GPT and Llama in package models
// implement it as a user's model does.
//
// A model is an ordered list of pipeline units: a pipeline may cut it
// between any two units, and Build makes any contiguous range of them. A
// unit is a Layer (with explicit forward and backward passes; compose the
// package's layers with Seq, Residual and Parallel and no backward needs
// writing). Build registers the units' parameters in the model's ParamSet
// under their PyTorch state_dict names and layouts, marks tensor-parallel
// cuts with AddShard (and the TP layers: ColumnParallel, RowParallel), ties
// parameters by sharing them (or by Model.Tied across stages), and sets the
// model's Objective. A Spec is a value: every worker builds its part from
// the same Spec, so Build must be deterministic.
type Spec interface {
	// Name is the name the model is registered under ("gpt", "llama", a
	// user's).
	Name() string
	// Units is the number of pipeline units.
	Units() int
	// Validate checks the architecture's shape.
	Validate() error
	// CheckTP says whether the architecture can be cut for the
	// tensor-parallel place t (t.Size shards; t.SP: sequence parallel). A
	// model with no tensor-parallel layers refuses every t.On().
	CheckTP(t TP) error
	// Build makes units [m.Lo, m.Hi) of the model for m.TP: it registers
	// their parameters in m.Set (initialised from m.Set's seed so that every
	// part holds what the whole model built with the same seed holds),
	// appends their layers to m.Layers, and sets m's shape fields (Input,
	// InCols, OutCols, Classes and Features or Context, Tied when a tied
	// parameter's other use lives on another stage, Objective, Describe).
	Build(m *Model) error
}

// Objective is a model's loss: the sum of the loss terms of output out
// against targets, and its gradient with respect to out scaled by
// gradScale (the trainer's 1/terms times the loss scale). Targets are class
// ids; a negative id is ignored (no term). CrossEntropy is the default.
type Objective interface {
	Loss(c *Ctx, out Act, targets Targets, gradScale float32) (sum float64, dout Act)
}

// ObjectiveFunc adapts a function to Objective.
type ObjectiveFunc func(c *Ctx, out Act, targets Targets, gradScale float32) (float64, Act)

// Loss implements Objective.
func (f ObjectiveFunc) Loss(c *Ctx, out Act, targets Targets, gradScale float32) (float64, Act) {
	return f(c, out, targets, gradScale)
}

// DataShape is what a registered model learns of the data before it is
// built: dense feature rows or token sequences, and their sizes.
type DataShape struct {
	// Tokens is true for token sequences ([batch, context] ids), false for
	// dense feature rows.
	Tokens bool
	// Features is the width of a dense row; Classes the number of classes
	// (or the vocabulary, for tokens; 0 for real-valued targets); Context
	// the tokens per sequence; Outputs the real-valued targets per row (0:
	// class ids).
	Features, Classes, Context, Outputs int
}

func (d DataShape) String() string {
	if d.Tokens {
		return fmt.Sprintf("token sequences (vocabulary %d, context %d)", d.Classes, d.Context)
	}
	if d.Outputs > 0 {
		return fmt.Sprintf("feature rows (%d features, %d real-valued targets)", d.Features, d.Outputs)
	}
	return fmt.Sprintf("feature rows (%d features, %d classes)", d.Features, d.Classes)
}

// OptionKind is the type of a model option's value.
type OptionKind uint8

const (
	// IntOption is an integer.
	IntOption OptionKind = iota
	// IntsOption is a comma-separated list of integers ("784,256,10").
	IntsOption
	// FloatOption is a real number.
	FloatOption
	// BoolOption is true or false.
	BoolOption
	// StringOption is any text.
	StringOption
)

func (k OptionKind) String() string {
	return [...]string{"int", "ints", "float", "bool", "string"}[k]
}

// Article is the kind with its article, for messages ("an integer").
func (k OptionKind) Article() string {
	return [...]string{"an integer", "a comma-separated list of integers", "a number", "true or false", "a string"}[k]
}

// Option is one setting a registered model takes: the CLI offers it as
// --Name, a --config file as Name, Config.ModelArgs under Name.
type Option struct {
	// Name is the flag's name, lower-case with dashes ("d-model").
	Name string
	Kind OptionKind
	// Default is the value when unset, as text ("" for an IntsOption or
	// StringOption means none; the model decides).
	Default string
	// Usage is the one-line help.
	Usage string
}

// parse checks text against the option's kind.
func (o Option) parse(text string) (any, error) {
	switch o.Kind {
	case IntOption:
		return strconv.Atoi(strings.TrimSpace(text))
	case IntsOption:
		if strings.TrimSpace(text) == "" {
			return []int(nil), nil
		}
		var out []int
		for _, f := range strings.Split(text, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case FloatOption:
		return strconv.ParseFloat(strings.TrimSpace(text), 64)
	case BoolOption:
		return strconv.ParseBool(strings.TrimSpace(text))
	}
	return text, nil
}

// Args are a model's option values as text, by option name: what the user
// set (Config.ModelArgs); the rest take the options' defaults.
type Args map[string]string

// Values are a model's options resolved against its declared Options:
// every option has a value of its kind. The getters panic on a name the
// model did not declare (a programming error in the model).
type Values struct {
	model string
	v     map[string]any
	set   map[string]bool
}

func (v Values) get(name string, k OptionKind) any {
	x, ok := v.v[name]
	if !ok {
		panic(fmt.Sprintf("nn: model %s reads option %q it did not declare", v.model, name))
	}
	_ = k
	return x
}

// Int is option name's value.
func (v Values) Int(name string) int { return v.get(name, IntOption).(int) }

// Ints is option name's value (nil when unset and without default).
func (v Values) Ints(name string) []int { return slices.Clone(v.get(name, IntsOption).([]int)) }

// Float is option name's value.
func (v Values) Float(name string) float64 { return v.get(name, FloatOption).(float64) }

// Bool is option name's value.
func (v Values) Bool(name string) bool { return v.get(name, BoolOption).(bool) }

// String is option name's value.
func (v Values) String(name string) string { return v.get(name, StringOption).(string) }

// IsSet reports whether the user set option name (rather than its default).
func (v Values) IsSet(name string) bool { return v.set[name] }

// ModelDef is a registered model: its name, its options, and how to make
// its Spec for the data it will train on.
type ModelDef struct {
	// Name is what --model takes (lower-case).
	Name string
	// Summary is a one-line description for help texts.
	Summary string
	// Default marks the model trained when none is named (DefaultModel:
	// `troupe train` with no --model). At most one registered model sets
	// it; the GPT in package models does.
	Default bool
	// Options are the settings the model takes (its flags).
	Options []Option
	// Data is the dataset spec the model trains on when none is given
	// ("gospec", "mnist"; see data.Open).
	Data string
	// Recipe, when set, replaces the trainer's defaults for this model
	// (a classifier's SGD, say); unset fields keep the trainer's.
	Recipe *Recipe
	// New makes the model's Spec from its option values, shaped to fit
	// data. It checks the options and that the data suits the model.
	New func(v Values, data DataShape) (Spec, error)
}

// Recipe is a model's training defaults, where it wants others than the
// trainer's (zero fields: the trainer's).
type Recipe struct {
	Batch int
	// Optim is the optimizer's name ("sgd", "adamw"); Momentum its
	// momentum (SGD).
	Optim    string
	Momentum float64
	LR       float64
	// Schedule is "constant" or "cosine".
	Schedule string
	// Warmup, MinLRFactor and ClipNorm: set NoWarmup, NoMinLR or NoClip to
	// turn them off (zero means the trainer's).
	Warmup      int
	MinLRFactor float64
	ClipNorm    float64
	// Epochs replaces the trainer's step count with epochs.
	Epochs int
}

// Off values for a Recipe's fields whose zero means "the trainer's".
const (
	NoWarmup = -1
	NoMinLR  = -1
	NoClip   = -1
)

// modelRegistry holds the registered models; registry is the program's.
type modelRegistry struct {
	sync.RWMutex
	defs map[string]ModelDef
	// def is the name of the model registered with Default set ("": none).
	def string
}

var registry = newModelRegistry()

func newModelRegistry() *modelRegistry { return &modelRegistry{defs: map[string]ModelDef{}} }

// Register adds a model under def.Name. It panics on an empty or taken
// name, a model without New, an option declared twice, or a second model
// with Default set (programming errors, found at init).
func Register(def ModelDef) { registry.register(def) }

func (r *modelRegistry) register(def ModelDef) {
	def.Name = strings.ToLower(def.Name)
	if def.Name == "" || def.New == nil {
		panic("nn: Register needs a name and New")
	}
	seen := map[string]bool{}
	for _, o := range def.Options {
		if o.Name == "" || seen[o.Name] {
			panic(fmt.Sprintf("nn: model %s declares option %q twice or unnamed", def.Name, o.Name))
		}
		seen[o.Name] = true
		if _, err := o.parse(o.Default); err != nil && o.Default != "" {
			panic(fmt.Sprintf("nn: model %s option %s: default %q is not a %v", def.Name, o.Name, o.Default, o.Kind))
		}
	}
	r.Lock()
	defer r.Unlock()
	if _, dup := r.defs[def.Name]; dup {
		panic("nn: model " + def.Name + " registered twice")
	}
	if def.Default {
		if r.def != "" {
			panic("nn: model " + def.Name + " registered as the default, but model " + r.def + " already is (only one model may set ModelDef.Default)")
		}
		r.def = def.Name
	}
	r.defs[def.Name] = def
}

// Lookup returns the model registered under name.
func Lookup(name string) (ModelDef, error) { return registry.lookup(name) }

func (r *modelRegistry) lookup(name string) (ModelDef, error) {
	r.RLock()
	defer r.RUnlock()
	d, ok := r.defs[strings.ToLower(name)]
	if !ok {
		return ModelDef{}, fmt.Errorf("%w: %q is not a registered model (registered: %s)", ErrConfig, name, strings.Join(r.namesLocked(), ", "))
	}
	return d, nil
}

// DefaultModel returns the model registered with Default set: the one
// trained when none is named. It is an error when no registered model
// sets Default (a program that does not import package models and
// registers no default of its own).
func DefaultModel() (ModelDef, error) { return registry.defaultModel() }

func (r *modelRegistry) defaultModel() (ModelDef, error) {
	r.RLock()
	defer r.RUnlock()
	if r.def == "" {
		return ModelDef{}, fmt.Errorf("%w: no registered model is the default (registered: %s); name one", ErrConfig, strings.Join(r.namesLocked(), ", "))
	}
	return r.defs[r.def], nil
}

// Models lists the registered models by name.
func Models() []ModelDef { return registry.models() }

func (r *modelRegistry) models() []ModelDef {
	r.RLock()
	defer r.RUnlock()
	out := make([]ModelDef, 0, len(r.defs))
	for _, n := range r.namesLocked() {
		out = append(out, r.defs[n])
	}
	return out
}

func (r *modelRegistry) namesLocked() []string {
	names := make([]string, 0, len(r.defs))
	for n := range r.defs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Option returns the model's option name.
func (d ModelDef) Option(name string) (Option, bool) {
	for _, o := range d.Options {
		if o.Name == name {
			return o, true
		}
	}
	return Option{}, false
}

// Resolve checks args against the model's options (an unknown name or a
// value not of its kind is an error naming it) and fills the defaults.
func (d ModelDef) Resolve(args Args) (Values, error) {
	v := Values{model: d.Name, v: map[string]any{}, set: map[string]bool{}}
	names := make([]string, 0, len(args))
	for n := range args {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		o, ok := d.Option(n)
		if !ok {
			var have []string
			for _, o := range d.Options {
				have = append(have, o.Name)
			}
			return Values{}, fmt.Errorf("%w: model %s has no option %q (its options: %s)", ErrConfig, d.Name, n, strings.Join(have, ", "))
		}
		x, err := o.parse(args[n])
		if err != nil {
			return Values{}, fmt.Errorf("%w: model %s option %s: %q is not %s", ErrConfig, d.Name, n, args[n], o.Kind.Article())
		}
		v.v[n], v.set[n] = x, true
	}
	for _, o := range d.Options {
		if _, ok := v.v[o.Name]; ok {
			continue
		}
		x, err := o.parse(o.Default)
		if err != nil { // "" for an int or float: zero
			x = reflectZero(o.Kind)
		}
		v.v[o.Name] = x
	}
	return v, nil
}

func reflectZero(k OptionKind) any {
	switch k {
	case IntOption:
		return 0
	case IntsOption:
		return []int(nil)
	case FloatOption:
		return 0.0
	case BoolOption:
		return false
	}
	return ""
}

// NewSpec resolves args for the model registered under name and makes its
// Spec for data.
func NewSpec(name string, args Args, data DataShape) (Spec, error) {
	d, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	v, err := d.Resolve(args)
	if err != nil {
		return nil, err
	}
	s, err := d.New(v, data)
	if err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// CausalLM is implemented by a Spec whose models are causal language
// models troupe can sample from (troupe generate, package generate): the
// opt-in of a model to generation.
type CausalLM interface {
	Spec
	// NewDecoder makes a decoder over m, the whole model built from this
	// Spec (weights loaded, not tensor-parallel), for sequences of up to
	// capacity tokens.
	NewDecoder(m *Model, capacity int) (Decoder, error)
}

// Decoder runs a causal language model over one sequence a few tokens at
// a time, keeping what attention needs of the earlier ones (a KV cache),
// so that each new token costs one row's work.
type Decoder interface {
	// Feed runs tokens ids at positions [Len(), Len()+len(ids)) and
	// returns the logits (the whole vocabulary, on the host) that follow
	// the last of them. It fails when the sequence would pass the
	// decoder's capacity.
	Feed(c *Ctx, ids []int32) ([]float32, error)
	// Len is the number of tokens fed since the last Reset.
	Len() int
	// Reset starts a new sequence.
	Reset()
	// Close releases the decoder's buffers.
	Close()
}

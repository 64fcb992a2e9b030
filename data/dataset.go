package data

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// Kind says what a dataset's samples are.
type Kind int

const (
	// Dense samples are a feature vector and a class label.
	Dense Kind = iota
	// Tokens samples are a window of Context token ids and the Context
	// next-token targets (the window shifted by one).
	Tokens
)

func (k Kind) String() string {
	switch k {
	case Dense:
		return "dense"
	case Tokens:
		return "tokens"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Batch holds the rows of a mini-batch, row-major. Fill reuses its slices
// when their capacity suffices, so a trainer keeps one Batch per worker and
// allocates nothing per step.
type Batch struct {
	// X holds Dense features: Rows × Features. Empty for Tokens.
	X []float32
	// Tokens holds token windows: Rows × Context. Empty for Dense.
	Tokens []int32
	// Y holds targets: Rows class labels (Dense) or Rows × Context
	// next-token ids (Tokens); empty when V holds the targets.
	Y []int32
	// V holds real-valued targets: Rows × Outputs (a Regression
	// dataset's); empty for class targets.
	V []float32
	// Rows is the number of samples in the batch.
	Rows int
}

// reset sizes b for rows samples with the given per-row lengths.
func (b *Batch) reset(rows, xPer, tokPer, yPer int) {
	b.Rows = rows
	b.X = grow(b.X, rows*xPer)
	b.Tokens = grow(b.Tokens, rows*tokPer)
	b.Y = grow(b.Y, rows*yPer)
	b.V = b.V[:0]
}

// Terms is the number of loss terms in rows [lo, hi) of b: its class
// targets that are not ignored (negative), or its real-valued targets.
func (b *Batch) Terms(lo, hi int) int {
	if b.Rows == 0 {
		return 0
	}
	if len(b.V) > 0 {
		per := len(b.V) / b.Rows
		return (hi - lo) * per
	}
	per := len(b.Y) / b.Rows
	n := 0
	for _, y := range b.Y[lo*per : hi*per] {
		if y >= 0 {
			n++
		}
	}
	return n
}

// Regression is implemented by Dense datasets whose targets are real
// vectors (Batch.V, Outputs per row) rather than class ids; their
// Classes is 0.
type Regression interface {
	Dataset
	Outputs() int
}

func grow[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}

// Dataset is a fixed, read-only collection of samples indexed 0 … Len()-1.
// All methods are safe for concurrent use; concurrent Fills must use
// different Batches.
type Dataset interface {
	// Name says where the data came from, e.g. "mnist/train".
	Name() string
	// Len is the number of samples.
	Len() int
	Kind() Kind
	// Features is the length of a Dense feature vector (0 for Tokens).
	Features() int
	// Classes is the number of classes (Dense) or the vocabulary size
	// (Tokens); every target is in [0, Classes).
	Classes() int
	// Context is the number of tokens per Tokens sample (0 for Dense).
	Context() int
	// Fill overwrites b with the samples idx, in that order (duplicates
	// allowed). It panics if an index is outside [0, Len()): indices come
	// from a Sampler sized by Len, so a bad one is a programming error.
	Fill(idx []int, b *Batch)
}

// TextDataset is implemented by Tokens datasets whose ids decode to text
// (the text corpora), for printing samples of a language model.
type TextDataset interface {
	Dataset
	Vocab() *Vocab
}

// Vocab names accepted in Options.Vocab.
const (
	VocabChar = "char"
	VocabByte = "byte"
	VocabGPT2 = "gpt2"
)

// textVocabs are the tokenizations of a text file, for errors.
var textVocabs = []string{VocabChar, VocabByte, VocabGPT2}

// Options are the settings Open needs beyond the spec. Spec parameters
// (synthetic-mlp:features=…) override the matching fields.
type Options struct {
	// Seed drives the synthetic datasets. Real datasets ignore it.
	Seed uint64
	// Vocab picks the text tokenization: VocabChar (ids index the sorted
	// distinct characters of the corpus), VocabByte (ids are bytes,
	// vocabulary 256) or VocabGPT2 (GPT-2's BPE, vocabulary 50,257).
	// Default VocabChar. Token shards carry their own (meta.json).
	Vocab string
	// VocabSize is the vocabulary of token shards without meta.json (or a
	// larger one than theirs, to pad it); 0: meta.json's, else the
	// largest id + 1. Every id must be below it.
	VocabSize int
	// Context is the number of tokens per sample of Tokens datasets; it
	// must equal the model's context. Default 64.
	Context int
	// Samples is the number of training samples of synthetic datasets
	// (default 2048 for synthetic-mlp, 1024 windows for synthetic-tokens).
	Samples int
	// TestSamples is the number of held-out synthetic samples (default
	// Samples/4).
	TestSamples int
	// Features is the feature count of synthetic-mlp (default 784).
	Features int
	// Classes is the class count of synthetic-mlp (default 10) or the
	// vocabulary size of synthetic-tokens (default 65).
	Classes int
}

// DefaultOptions returns the defaults listed on Options.
func DefaultOptions() Options {
	return Options{Vocab: VocabChar, Context: 64}
}

// Validate checks o and fills the defaults of zero fields (Vocab, Context).
// The synthetic sizes stay 0 when unset: their defaults depend on the
// dataset and are applied by Open.
func (o *Options) Validate() error {
	if o.Vocab == "" {
		o.Vocab = VocabChar
	}
	if !slices.Contains(textVocabs, o.Vocab) {
		return fmt.Errorf("%w: vocab %q, want one of %s", ErrOptions, o.Vocab, strings.Join(textVocabs, ", "))
	}
	if o.Context == 0 {
		o.Context = 64
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"context", o.Context}, {"samples", o.Samples}, {"test samples", o.TestSamples}, {"features", o.Features}, {"classes", o.Classes}, {"vocab size", o.VocabSize}} {
		if f.v < 0 {
			return fmt.Errorf("%w: %s = %d is negative", ErrOptions, f.name, f.v)
		}
	}
	return nil
}

// Builtin dataset names, in the order the error messages list them.
var builtins = []string{"gospec", "mnist", "synthetic-mlp", "synthetic-tokens", "text", "safetensors"}

// Open resolves spec (the --data flag) and returns the training set and the
// held-out test set. test is nil when the source has no held-out split (a
// safetensors file without x_test/y_test or tokens_test). Specs:
//
//	gospec[:vocab=char|byte,context=C]      the Go spec (Go 1.26.8's, in the binary), as text
//	mnist                                   MNIST from $TROUPE_MNIST_DIR, the Go
//	                                        module cache or /usr/share/troupe/mnist
//	mnist:DIR                               the four MNIST IDX files in DIR
//	synthetic-mlp[:features=F,classes=K,n=N,test=M]
//	synthetic-tokens[:vocab=V,context=C,n=N,test=M]
//	text:PATH, safetensors:PATH             a file of that kind
//	DIR, GLOB, FILE.bin                     token shards (llm.c's, nanoGPT's
//	                                        train.bin/val.bin): a directory
//	                                        with meta.json or *.bin files
//	PATH                                    a directory: MNIST IDX files;
//	                                        *.safetensors: tensors; else text
//
// A builtin name wins over a relative path of the same name (write ./mnist
// for a directory called mnist).
func Open(spec string, o Options) (train, test Dataset, err error) {
	if err := o.Validate(); err != nil {
		return nil, nil, err
	}
	if spec == "" {
		return nil, nil, fmt.Errorf("%w: empty; want one of %s or a path", ErrSpec, strings.Join(builtins, ", "))
	}
	name, rest, hasRest := strings.Cut(spec, ":")
	switch name {
	case "gospec":
		if err := applyParams(spec, rest, textParams(&o)); err != nil {
			return nil, nil, err
		}
		raw, err := goSpec()
		if err != nil {
			return nil, nil, err
		}
		return textFromBytes("gospec", raw, o)
	case "mnist":
		if hasRest {
			return openMNIST(rest)
		}
		dir, err := findMNIST()
		if err != nil {
			return nil, nil, err
		}
		if train, test, err = openMNIST(dir); err != nil && os.Getenv(MNISTDirEnv) != "" {
			err = fmt.Errorf("%w (the directory $%s names)", err, MNISTDirEnv)
		}
		return train, test, err
	case "synthetic-mlp":
		if err := applyParams(spec, rest, map[string]any{
			"features": &o.Features, "classes": &o.Classes, "n": &o.Samples, "test": &o.TestSamples,
		}); err != nil {
			return nil, nil, err
		}
		return syntheticMLP(o)
	case "synthetic-tokens":
		if err := applyParams(spec, rest, map[string]any{
			"vocab": &o.Classes, "context": &o.Context, "n": &o.Samples, "test": &o.TestSamples,
		}); err != nil {
			return nil, nil, err
		}
		return syntheticTokens(o)
	case "text":
		return openText(baseName(rest), rest, o)
	case "safetensors":
		return openTensors(rest, o)
	}
	return openPath(spec, o)
}

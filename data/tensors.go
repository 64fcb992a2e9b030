package data

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/troupe-ml/troupe/safetensors"
)

// openTensors loads a safetensors dataset. Two layouts are accepted:
//
// Dense: "x" of shape [N, …] (F32, F16, BF16 or F64; the trailing
// dimensions are flattened into the features) and "y" of shape [N] (any
// integer dtype), optionally "x_test" and "y_test" (both or neither).
// Classes is metadata "classes" if present, else the largest label + 1.
//
// Tokens: "tokens" of shape [T] (any integer dtype), optionally
// "tokens_test", served as windows of Options.Context. The vocabulary is
// metadata "vocab" (the character list of a char-level vocabulary, id i =
// i-th character) and/or "vocab_size"; without either it is the largest
// id + 1.
//
// Any other tensor name is an error, so that a misspelt "X" is not ignored.
func openTensors(path string, o Options) (Dataset, Dataset, error) {
	if path == "" {
		return nil, nil, fmt.Errorf("%w: safetensors: no path given", ErrSpec)
	}
	f, err := safetensors.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	defer f.Close()
	train, test, err := tensorDataset(f, baseName(path), o)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return train, test, nil
}

// maxClasses bounds the class count or vocabulary a file may imply, so a
// stray huge label is reported instead of sizing a model from it.
const maxClasses = 1 << 24

// tensorDataset builds the datasets of an open safetensors file.
func tensorDataset(f *safetensors.File, name string, o Options) (Dataset, Dataset, error) {
	has := map[string]bool{}
	for _, n := range f.Names() {
		has[n] = true
	}
	switch {
	case has["tokens"]:
		return tensorTokens(f, name, o, has)
	case has["x"]:
		return tensorDense(f, name, has)
	}
	return nil, nil, fmt.Errorf("%w: has neither x and y nor tokens (tensors: %s)", ErrFormat, strings.Join(f.Names(), ", "))
}

// onlyTensors rejects names outside allowed.
func onlyTensors(has map[string]bool, allowed ...string) error {
	for n := range has {
		if !slices.Contains(allowed, n) {
			return fmt.Errorf("%w: unexpected tensor %q (this layout has only %s)", ErrFormat, n, strings.Join(allowed, ", "))
		}
	}
	return nil
}

func tensorDense(f *safetensors.File, name string, has map[string]bool) (Dataset, Dataset, error) {
	if err := onlyTensors(has, "x", "y", "x_test", "y_test"); err != nil {
		return nil, nil, err
	}
	if !has["y"] {
		return nil, nil, fmt.Errorf("%w: has x but no y", ErrFormat)
	}
	if has["x_test"] != has["y_test"] {
		return nil, nil, fmt.Errorf("%w: x_test and y_test must come together", ErrFormat)
	}
	train, err := denseTensors(f, name+"/train", "x", "y")
	if err != nil {
		return nil, nil, err
	}
	var test *denseSet
	if has["x_test"] {
		if test, err = denseTensors(f, name+"/test", "x_test", "y_test"); err != nil {
			return nil, nil, err
		}
		if test.features != train.features {
			return nil, nil, fmt.Errorf("%w: x_test has %d features per sample, x has %d", ErrFormat, test.features, train.features)
		}
	}
	classes, err := metaInt(f, "classes")
	if err != nil {
		return nil, nil, err
	}
	if classes == 0 {
		classes = int(max(slices.Max(train.y), 0)) + 1
		if test != nil {
			classes = max(classes, int(slices.Max(test.y))+1)
		}
	}
	if classes > maxClasses {
		return nil, nil, fmt.Errorf("%w: labels imply %d classes, over the limit of %d", ErrFormat, classes, maxClasses)
	}
	for _, s := range []*denseSet{train, test} {
		if s == nil {
			continue
		}
		s.classes = classes
		for i, l := range s.y {
			if l < 0 || int(l) >= classes {
				return nil, nil, fmt.Errorf("%w: %s label %d is %d, outside [0, %d)", ErrFormat, s.name, i, l, classes)
			}
		}
	}
	if test == nil {
		return train, nil, nil
	}
	return train, test, nil
}

func denseTensors(f *safetensors.File, name, xName, yName string) (*denseSet, error) {
	x, xs, err := f.Float32(xName)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if len(xs) == 0 || xs[0] == 0 {
		return nil, fmt.Errorf("%w: %s has shape %v, want [N, features…] with N > 0", ErrFormat, xName, xs)
	}
	n := xs[0]
	features := len(x) / n
	if features == 0 {
		return nil, fmt.Errorf("%w: %s has shape %v: no features", ErrFormat, xName, xs)
	}
	for i, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("%w: %s[%d] (sample %d) is %v", ErrFormat, xName, i, i/features, v)
		}
	}
	y, ys, err := f.Int32s(yName)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if len(ys) != 1 || ys[0] != n {
		return nil, fmt.Errorf("%w: %s has shape %v, want [%d] to match %s", ErrFormat, yName, ys, n, xName)
	}
	return &denseSet{name: name, n: n, features: features, x: x, y: y}, nil
}

func tensorTokens(f *safetensors.File, name string, o Options, has map[string]bool) (Dataset, Dataset, error) {
	if err := onlyTensors(has, "tokens", "tokens_test"); err != nil {
		return nil, nil, err
	}
	var v *Vocab
	if chars, ok := f.Metadata["vocab"]; ok {
		var err error
		if v, err = NewCharVocab(chars); err != nil {
			return nil, nil, fmt.Errorf("metadata vocab: %w", err)
		}
	}
	size, err := metaInt(f, "vocab_size")
	if err != nil {
		return nil, nil, err
	}
	if v != nil && size != 0 && size != v.Size() {
		return nil, nil, fmt.Errorf("%w: metadata vocab_size %d, but vocab has %d characters", ErrFormat, size, v.Size())
	}
	if v != nil {
		size = v.Size()
	}
	streams := map[string][]int32{}
	for _, t := range []string{"tokens", "tokens_test"} {
		if !has[t] {
			continue
		}
		toks, shape, err := f.Int32s(t)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrFormat, err)
		}
		if len(shape) != 1 {
			return nil, nil, fmt.Errorf("%w: %s has shape %v, want a 1-D token stream", ErrFormat, t, shape)
		}
		streams[t] = toks
	}
	if size == 0 {
		for _, toks := range streams {
			if len(toks) > 0 {
				size = max(size, int(slices.Max(toks))+1)
			}
		}
	}
	if size > maxClasses {
		return nil, nil, fmt.Errorf("%w: vocabulary of %d ids is over the limit of %d", ErrFormat, size, maxClasses)
	}
	for _, t := range []string{"tokens", "tokens_test"} {
		toks := streams[t]
		for i, id := range toks {
			if id < 0 || int(id) >= size {
				return nil, nil, fmt.Errorf("%w: %s[%d] = %d, outside the vocabulary [0, %d)", ErrFormat, t, i, id, size)
			}
		}
	}
	train, err := newTokenSet(name+"/train", streams["tokens"], o.Context, size, v)
	if err != nil {
		return nil, nil, err
	}
	var test *tokenSet
	if has["tokens_test"] {
		if test, err = newTokenSet(name+"/test", streams["tokens_test"], o.Context, size, v); err != nil {
			return nil, nil, err
		}
	}
	tr, te := tokenPair(train, test)
	return tr, te, nil
}

// metaInt reads a positive integer from the file's metadata; 0 if absent.
func metaInt(f *safetensors.File, key string) (int, error) {
	s, ok := f.Metadata[key]
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: metadata %s = %q is not a positive integer", ErrFormat, key, s)
	}
	return n, nil
}

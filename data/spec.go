package data

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// textParams are the spec parameters of the text datasets.
func textParams(o *Options) map[string]any {
	return map[string]any{"vocab": &o.Vocab, "context": &o.Context}
}

// applyParams parses rest ("k=v,k=v", the spec after its first ':') into
// params, whose values are *int (positive integers) or *string fields of
// an Options, and re-validates the Options they belong to.
func applyParams(spec, rest string, params map[string]any) error {
	if rest == "" {
		return nil
	}
	names := make([]string, 0, len(params))
	for k := range params {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, kv := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(kv, "=")
		p, known := params[k]
		if !ok || !known {
			return fmt.Errorf("%w %q: parameter %q, want key=value with key one of %s",
				ErrSpec, spec, kv, strings.Join(names, ", "))
		}
		switch f := p.(type) {
		case *int:
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return fmt.Errorf("%w %q: %s=%q is not a positive integer", ErrSpec, spec, k, v)
			}
			*f = n
		case *string:
			if !slices.Contains(textVocabs, v) {
				return fmt.Errorf("%w %q: %s=%q, want one of %s", ErrSpec, spec, k, v, strings.Join(textVocabs, ", "))
			}
			*f = v
		}
	}
	return nil
}

// openPath opens a spec that is a plain path: token shards (a glob, a
// .bin file, a directory with meta.json or .bin files), a directory of
// MNIST IDX files, a .safetensors file, or any other file as text.
func openPath(path string, o Options) (Dataset, Dataset, error) {
	if isShardSpec(path) {
		return openShards(path, o)
	}
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w %q: not one of %s, and no such file or directory",
			ErrSpec, path, strings.Join(builtins, ", "))
	}
	if err != nil {
		return nil, nil, err
	}
	switch {
	case st.IsDir():
		return openMNIST(path)
	case strings.EqualFold(filepath.Ext(path), ".safetensors"):
		return openTensors(path, o)
	default:
		return openText(baseName(path), path, o)
	}
}

// baseName is the file name without directory and extension, for Name().
func baseName(path string) string {
	b := filepath.Base(path)
	return strings.TrimSuffix(b, filepath.Ext(b))
}

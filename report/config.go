package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/train"
)

// ReadConfig reads a run's configuration from path: a checkpoint
// directory (--ckpt-dir: its latest checkpoint's manifest), one
// checkpoint's directory or its manifest.json (troupe train writes its
// configuration into every manifest), or a JSON or YAML file of
// train.Config's fields (ParseConfig). It returns the configuration and
// where it came from: the file, and the settings of a manifest that this
// troupe does not know, left out, if there were any.
func ReadConfig(path string) (*train.Config, string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, "", err
	}
	file := path
	if fi.IsDir() {
		file = filepath.Join(path, checkpoint.ManifestFile)
		if _, err := os.Stat(file); errors.Is(err, iofs.ErrNotExist) {
			step, lerr := checkpoint.Latest(checkpoint.OSFS{}, path)
			if lerr != nil {
				return nil, "", fmt.Errorf("%w: %s is neither a checkpoint directory nor a checkpoint: %w", ErrInput, path, lerr)
			}
			file = filepath.Join(path, checkpoint.StepDirName(step), checkpoint.ManifestFile)
		}
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, checkpoint.MaxManifestSize+1))
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", file, err)
	}
	if len(b) > checkpoint.MaxManifestSize {
		return nil, "", fmt.Errorf("%w: %s is over %d bytes: not a configuration", ErrInput, file, checkpoint.MaxManifestSize)
	}
	c, unknown, err := ParseConfig(b)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", file, err)
	}
	if len(unknown) > 0 {
		return c, fmt.Sprintf("%s (left out, unknown to this troupe: %s)", file, strings.Join(unknown, ", ")), nil
	}
	return c, file, nil
}

// ParseConfig reads a configuration: a checkpoint manifest's "config"
// object, or a JSON or YAML object of train.Config's fields (named as
// the Go fields are, in any case: model, mlpsizes, batch, lr,
// optim: {name, momentum}, dp, pp…). In a file of settings a field
// train.Config lacks is an error, so that a misspelt setting is not
// silently dropped; a manifest was written by troupe, maybe another
// version of it, and its settings that train.Config lacks are left out
// and named (unknown).
func ParseConfig(b []byte) (c *train.Config, unknown []string, err error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, nil, fmt.Errorf("%w: an empty configuration", ErrInput)
	}
	if !json.Valid(b) {
		j, err := yaml.YAMLToJSON(b)
		if err != nil {
			if b[0] == '{' {
				var v any
				err = json.Unmarshal(b, &v)
			}
			return nil, nil, fmt.Errorf("%w: neither JSON nor YAML: %v", ErrInput, err)
		}
		b = bytes.TrimSpace(j)
	}
	if len(b) == 0 || b[0] != '{' {
		return nil, nil, fmt.Errorf("%w: a configuration is a mapping of settings, not %s", ErrInput, describe(b))
	}
	var probe struct{ Format any }
	_ = json.Unmarshal(b, &probe) // b is a valid JSON object
	if probe.Format == checkpoint.FormatName {
		m, err := checkpoint.DecodeManifest(b)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrInput, err)
		}
		if len(m.Config) == 0 {
			return nil, nil, fmt.Errorf("%w: the checkpoint's manifest carries no configuration", ErrInput)
		}
		c = &train.Config{}
		if err := json.Unmarshal(m.Config, c); err != nil {
			return nil, nil, fmt.Errorf("%w: the checkpoint's configuration: %v", ErrInput, err)
		}
		return c, unknownFields(m.Config, reflect.TypeFor[train.Config](), ""), nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	c = &train.Config{}
	if err := dec.Decode(c); err != nil {
		return nil, nil, fmt.Errorf("%w: not a troupe train configuration: %v", ErrInput, err)
	}
	return c, nil, nil
}

// unknownFields names the keys of the JSON object b, and of the objects
// in it that fill a struct, that the struct type t has no field for, as
// encoding/json matches names (in any case).
func unknownFields(b []byte, t reflect.Type, prefix string) []string {
	var obj map[string]json.RawMessage
	if json.Unmarshal(b, &obj) != nil {
		return nil
	}
	var out []string
	for k, v := range obj {
		f, ok := fieldNamed(t, k)
		switch {
		case !ok:
			out = append(out, prefix+k)
		case f.Type.Kind() == reflect.Struct:
			out = append(out, unknownFields(v, f.Type, prefix+f.Name+".")...)
		}
	}
	slices.Sort(out)
	return out
}

// fieldNamed is t's field that encoding/json fills from the key name: its
// own or one promoted from an embedded struct (train.Config's groups),
// whose fields are keys of the object itself.
func fieldNamed(t reflect.Type, name string) (reflect.StructField, bool) {
	for _, f := range reflect.VisibleFields(t) {
		if f.IsExported() && !f.Anonymous && strings.EqualFold(f.Name, name) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// describe names a JSON value's kind for an error.
func describe(j []byte) string {
	if len(j) == 0 {
		return "nothing"
	}
	switch j[0] {
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	}
	return "a number"
}

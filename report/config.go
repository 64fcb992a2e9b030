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

	"sigs.k8s.io/yaml"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/train"
)

// ReadConfig reads a run's configuration from path: a checkpoint
// directory (--ckpt-dir: its latest checkpoint's manifest), one
// checkpoint's directory or its manifest.json (troupe train writes its
// configuration into every manifest), or a JSON or YAML file of
// train.Config's fields (ParseConfig). It returns the configuration and
// the file it came from.
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
	c, err := ParseConfig(b)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", file, err)
	}
	return c, file, nil
}

// ParseConfig reads a configuration: a checkpoint manifest's "config"
// object, or a JSON or YAML object of train.Config's fields (named as
// the Go fields are, in any case: model, mlpsizes, batch, lr,
// optim: {name, momentum}, dp, pp…). A field train.Config lacks is an
// error, so that a misspelt setting is not silently dropped.
func ParseConfig(b []byte) (*train.Config, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: an empty configuration", ErrInput)
	}
	if !json.Valid(b) {
		j, err := yaml.YAMLToJSON(b)
		if err != nil {
			if b[0] == '{' {
				var v any
				err = json.Unmarshal(b, &v)
			}
			return nil, fmt.Errorf("%w: neither JSON nor YAML: %v", ErrInput, err)
		}
		b = bytes.TrimSpace(j)
	}
	if len(b) == 0 || b[0] != '{' {
		return nil, fmt.Errorf("%w: a configuration is a mapping of settings, not %s", ErrInput, describe(b))
	}
	var probe struct{ Format any }
	_ = json.Unmarshal(b, &probe) // b is a valid JSON object
	if probe.Format == checkpoint.FormatName {
		m, err := checkpoint.DecodeManifest(b)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInput, err)
		}
		if len(m.Config) == 0 {
			return nil, fmt.Errorf("%w: the checkpoint's manifest carries no configuration", ErrInput)
		}
		b = m.Config
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	c := &train.Config{}
	if err := dec.Decode(c); err != nil {
		return nil, fmt.Errorf("%w: not a troupe train configuration: %v", ErrInput, err)
	}
	return c, nil
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

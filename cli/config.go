package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// notInConfig are the flags a configuration file cannot set, and
// --print-config does not write.
var notInConfig = map[string]bool{"config": true, "print-config": true, "help": true, "version": true}

// oneChoice are flags that make one choice together: a file's value for
// one of them does not apply when the command line gave another.
var oneChoice = [][]string{{"steps", "epochs"}}

// applyConfigFile sets the flags of fl that path (YAML, or TOML by its
// extension) names and the command line did not set, each through the
// flag's own parsing, so that a key means exactly what its flag means.
func applyConfigFile(fl *pflag.FlagSet, command, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: --config: %w", errUsage, err)
	}
	values, err := decodeConfig(path, data)
	if err != nil {
		return fmt.Errorf("%w: --config %s: %w", errUsage, path, err)
	}
	given := map[string]bool{}
	fl.Visit(func(f *pflag.Flag) { given[f.Name] = true })
	for _, key := range slices.Sorted(maps.Keys(values)) {
		bad := func(format string, a ...any) error {
			return fmt.Errorf("%w: --config %s: %s: %s", errUsage, path, key, fmt.Sprintf(format, a...))
		}
		f := fl.Lookup(key)
		switch {
		case f == nil:
			return bad("%s has no such flag%s", command, didYouMean(fl, key))
		case notInConfig[key]:
			return bad("cannot be set in a configuration file")
		}
		text, err := configText(values[key])
		if err != nil {
			return bad("%v", err)
		}
		if givenAs(fl, given, key) {
			continue // the command line wins
		}
		if err := fl.Set(key, text); err != nil {
			return bad("%v", err)
		}
		setAnnotation(fl, key, annFromConfig, path)
	}
	return nil
}

// givenAs reports whether the command line set the flag key, or another
// name of it, or another flag of its choice.
func givenAs(fl *pflag.FlagSet, given map[string]bool, key string) bool {
	same := []string{key}
	for _, c := range oneChoice {
		if slices.Contains(c, key) {
			same = append(same, c...)
		}
	}
	fl.VisitAll(func(f *pflag.Flag) {
		if a := f.Annotations[annAliasOf]; len(a) > 0 && (a[0] == key || f.Name == key) {
			same = append(same, f.Name, a[0])
		}
	})
	for _, n := range same {
		if given[n] {
			return true
		}
	}
	return false
}

// didYouMean suggests the flag a mistyped key meant, if one is close.
func didYouMean(fl *pflag.FlagSet, key string) string {
	for _, k := range []string{strings.TrimLeft(key, "-"), strings.ReplaceAll(strings.TrimLeft(key, "-"), "_", "-")} {
		if k != key && fl.Lookup(k) != nil {
			return fmt.Sprintf(" (did you mean %s?)", k)
		}
	}
	return " (the keys are the names of its flags: see --help)"
}

// decodeConfig reads a configuration file's keys and values: YAML for
// .yaml and .yml, TOML for .toml.
func decodeConfig(path string, data []byte) (map[string]any, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".yaml", ".yml":
		j, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.UseNumber() // numbers go to the flags as written
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if v == nil {
			return nil, nil // an empty file
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("want a mapping of flag names to values (lr: 0.001), got %s", describe(v))
		}
		return m, nil
	case ".toml":
		var m map[string]any
		if err := toml.Unmarshal(data, &m); err != nil {
			var de *toml.DecodeError
			if errors.As(err, &de) {
				row, col := de.Position()
				return nil, fmt.Errorf("line %d, column %d: %v", row, col, de)
			}
			return nil, err
		}
		return m, nil
	default:
		return nil, fmt.Errorf("want a .yaml, .yml or .toml file, by its extension (got %q)", ext)
	}
}

// configText is a file's value as a command line would give it: lists
// joined by commas (layers: [784, 256, 10] is --layers 784,256,10).
func configText(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		return strconv.FormatBool(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			if _, nested := e.([]any); nested {
				return "", fmt.Errorf("a list in a list: want a value or a list of values")
			}
			var err error
			if parts[i], err = configText(e); err != nil {
				return "", err
			}
		}
		return strings.Join(parts, ","), nil
	case nil:
		return "", fmt.Errorf("has no value")
	default:
		return "", fmt.Errorf("%s: want a string, a number, a boolean or a list of them", describe(v))
	}
}

func describe(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	}
	return fmt.Sprintf("a %T", v)
}

// writeConfig writes the flags cmd's run set (on the command line or in
// --config) as a --config file, under their headings.
func writeConfig(w io.Writer, cmd *cobra.Command) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s --config FILE: the flags this run set; every other flag has its default (%s --help).\n", cmd.CommandPath(), cmd.CommandPath())
	keep := func(f *pflag.Flag) bool { return f.Changed && f.Deprecated == "" && !notInConfig[f.Name] }
	for _, s := range sections(cmd.Flags(), keep) {
		fmt.Fprintf(&b, "\n# %s\n", strings.ToLower(s.title))
		for _, f := range s.flags {
			if f.Value.Type() != "string" {
				// A number, a boolean or a duration, as the flag writes it:
				// YAML reads each back as it was.
				fmt.Fprintf(&b, "%s: %s\n", f.Name, f.Value.String())
				continue
			}
			line, err := yaml.Marshal(map[string]string{f.Name: f.Value.String()})
			if err != nil {
				return err
			}
			b.Write(line)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

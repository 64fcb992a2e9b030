package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// losses reads the per-step losses of a --metrics-out file.
func losses(t *testing.T, path string) []float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m struct {
			Step int     `json:"step"`
			Loss float64 `json:"loss"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if m.Step != len(out)+1 {
			t.Fatalf("%s: step %d after %d steps", path, m.Step, len(out))
		}
		out = append(out, m.Loss)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// What --print-config writes, fed back with --config, is the same run:
// the same losses step by step. Flags on the command line win over the
// file's (--ckpt-dir, --metrics-out here).
func TestPrintConfigRoundTrip(t *testing.T) {
	dir := t.TempDir()
	run := []string{"train", "--model", "mlp", "--data", "synthetic-mlp:features=12,classes=3,n=64,test=16", "--layers", "12,8,3",
		"--steps", "4", "--batch", "16", "--lr", "0.1", "--momentum", "0.5", "--weight-decay", "0.001", "--lr-warmup", "1",
		"--seed", "7", "--shuffle=false", "--threads", "1", "--step-timeout", "90s",
		"--ckpt-dir", filepath.Join(dir, "ck1"), "--ckpt-every", "2", "--resume", "--metrics-out", filepath.Join(dir, "m1.jsonl")}
	if _, err := runTree(t, run...); err != nil {
		t.Fatal(err)
	}
	printed, err := runTree(t, append(run, "--print-config")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("--print-config:\n%s", printed)
	var keys []string
	for _, line := range strings.Split(printed, "\n") {
		if k, _, ok := strings.Cut(line, ": "); ok && !strings.HasPrefix(line, "#") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	want := []string{"batch", "ckpt-dir", "ckpt-every", "data", "layers", "lr", "lr-warmup", "metrics-out", "model", "momentum",
		"resume", "seed", "shuffle", "step-timeout", "steps", "threads", "weight-decay"}
	if !slices.Equal(keys, want) {
		t.Errorf("--print-config wrote the keys %q, want the flags set: %q", keys, want)
	}
	for _, line := range []string{"weight-decay: 0.001", "momentum: 0.5", "resume: auto", "layers: 12,8,3", "step-timeout: 1m30s", "shuffle: false"} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(line) + `$`).MatchString(printed) {
			t.Errorf("--print-config has no line %q", line)
		}
	}
	cfg := writeFile(t, dir, "run.yaml", printed)
	if _, err := runTree(t, "train", "--config", cfg, "--ckpt-dir", filepath.Join(dir, "ck2"), "--metrics-out", filepath.Join(dir, "m2.jsonl")); err != nil {
		t.Fatal(err)
	}
	first, second := losses(t, filepath.Join(dir, "m1.jsonl")), losses(t, filepath.Join(dir, "m2.jsonl"))
	// The same flags, seed and threads: the same arithmetic, bit for bit.
	if len(first) != 4 || !slices.Equal(first, second) {
		t.Errorf("losses %v from the command line, %v from its --print-config", first, second)
	}
	if _, err := os.Stat(filepath.Join(dir, "ck2", "latest")); err != nil {
		t.Errorf("the command line's --ckpt-dir was not used: %v", err)
	}
}

// A TOML file sets the flags as the same YAML file does, each through the
// flag's own parsing.
func TestConfigTOMLAsYAML(t *testing.T) {
	dir := t.TempDir()
	yml := writeFile(t, dir, "c.yml", `model: mlp
layers: [12, 8, 3]
lr: 0.001
weight-decay: 0.01
eps: 1e-7
steps: 4
shuffle: false
step-timeout: 90s
resume: require
seed: 42
`)
	tml := writeFile(t, dir, "c.toml", `model = "mlp"
layers = "12,8,3"
lr = 0.001
weight-decay = 0.01
eps = 1e-7
steps = 4
shuffle = false
step-timeout = "90s"
resume = "require"
seed = 42
`)
	apply := func(path string) *pflag.FlagSet {
		fl := pflag.NewFlagSet("train", pflag.ContinueOnError)
		(&trainFlags{}).register(fl)
		if err := applyConfigFile(fl, "troupe train", path); err != nil {
			t.Fatal(err)
		}
		return fl
	}
	a, b := apply(yml), apply(tml)
	a.VisitAll(func(f *pflag.Flag) {
		g := b.Lookup(f.Name)
		if f.Changed != g.Changed || f.Value.String() != g.Value.String() {
			t.Errorf("--%s: %q (set %v) from YAML, %q (set %v) from TOML", f.Name, f.Value, f.Changed, g.Value, g.Changed)
		}
	})
	for name, want := range map[string]string{"layers": "12,8,3", "weight-decay": "0.01", "eps": "1e-07", "step-timeout": "1m30s", "resume": "require", "shuffle": "false"} {
		if got := a.Lookup(name).Value.String(); got != want {
			t.Errorf("--%s is %q, want %q", name, got, want)
		}
	}
}

// The command line wins over the file, also for another flag of the same
// choice (--epochs over the file's steps) and a flag's old name.
func TestConfigCommandLineWins(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "c.yaml", "model: mlp\nsteps: 100\nwarmup: 3\nlr: 0.2\n")
	out, err := runTree(t, "train", "--config", cfg, "--epochs", "1", "--lr-warmup", "5", "--print-config")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"epochs: 1", "lr-warmup: 5", "lr: 0.2", "model: mlp"} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want) + `$`).MatchString(out) {
			t.Errorf("no line %q in\n%s", want, out)
		}
	}
	if regexp.MustCompile(`(?m)^(steps|warmup):`).MatchString(out) {
		t.Errorf("the file's steps or warmup applied over the command line:\n%s", out)
	}
}

// A file that cannot be used is a usage error (exit status 2) naming the
// file, the key and what is wrong with it.
func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, text string
		want       []string
	}{
		{"unknown.yaml", "model: mlp\nlearning-rate: 0.1\n", []string{"learning-rate: troupe train has no such flag"}},
		{"underscore.yaml", "ckpt_dir: ck\n", []string{"ckpt_dir:", "did you mean ckpt-dir?"}},
		{"dashes.yaml", "--lr: 0.1\n", []string{"did you mean lr?"}},
		{"value.yaml", "lr: fast\n", []string{"lr: invalid argument \"fast\" for \"--lr\" flag"}},
		{"duration.yaml", "step-timeout: 10\n", []string{"step-timeout:", "missing unit"}},
		{"int.toml", "batch = 1.5\n", []string{"batch:", "\"1.5\""}},
		{"mapping.yaml", "model:\n  name: mlp\n", []string{"model: a mapping: want a string, a number, a boolean or a list of them"}},
		{"empty.yaml", "lr:\n", []string{"lr: has no value"}},
		{"nested.yaml", "config: other.yaml\n", []string{"config: cannot be set in a configuration file"}},
		{"list.yaml", "- lr\n- 0.1\n", []string{"want a mapping of flag names to values"}},
		{"syntax.toml", "lr = = 1\n", []string{"line 1, column"}},
		{"syntax.yaml", "lr: [1\n", []string{"yaml"}},
		{"c.ini", "lr=1\n", []string{"want a .yaml, .yml or .toml file"}},
		{"resume.yaml", "resume: sometimes\n", []string{"--resume=sometimes: want auto"}},
	} {
		path := writeFile(t, dir, c.name, c.text)
		_, err := runTree(t, "train", "--config", path, "--print-config")
		if !errors.Is(err, errUsage) {
			t.Errorf("%s: %v, want a usage error", c.name, err)
			continue
		}
		want := append([]string{path}, c.want...)
		if c.name == "resume.yaml" {
			want = c.want // a value the flag takes, refused with the run's configuration
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.name, err, w)
			}
		}
	}
	_, err := runTree(t, "train", "--config", filepath.Join(dir, "missing.yaml"))
	if !errors.Is(err, errUsage) || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("a missing file: %v", err)
	}
}

// troupe agent and troupe bench train read --config too; the agent's own
// flags (--name, --listen…) are keys like the training ones.
func TestConfigAgentAndBench(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "agent.yaml", "name: n1\nlisten: 127.0.0.1:7946\nmin-nodes: 2\nmodel: mlp\nsteps: 50\n")
	out, err := runTree(t, "agent", "--config", cfg, "--print-config")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"name: n1", "listen: 127.0.0.1:7946", "min-nodes: 2", "model: mlp", "steps: 50"} {
		if !strings.Contains(out, "\n"+want+"\n") {
			t.Errorf("agent --print-config: no line %q in\n%s", want, out)
		}
	}
	if !strings.Contains(out, "\n# cluster\n") {
		t.Errorf("agent --print-config: no cluster heading in\n%s", out)
	}
	// A flag the agent refuses is refused from a file as on the command line.
	cfg = writeFile(t, dir, "dp.yaml", "name: n1\nlisten: 127.0.0.1:7946\ndp: 2\n")
	if _, err := runTree(t, "agent", "--config", cfg, "--print-config"); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--dp") {
		t.Errorf("agent with dp: 2 in its file: %v", err)
	}
	cfg = writeFile(t, dir, "bench.yaml", "worlds: dp1\nwarmup-steps: 2\nsteps: 6\n")
	out, err = runTree(t, "bench", "train", "--config", cfg, "--print-config")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "\nworlds: dp1\nwarmup-steps: 2\n") {
		t.Errorf("bench train --print-config:\n%s", out)
	}
}

// A value the file sets that the run's configuration refuses is a usage
// error naming the flag and the file that set it.
func TestConfigInvalidValueNamesTheFile(t *testing.T) {
	path := writeFile(t, t.TempDir(), "run.yaml", "batch: 0\n")
	_, err := runTree(t, "train", "--config", path)
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--batch") || !strings.Contains(err.Error(), "--batch is set in "+path) {
		t.Fatalf("%v: want a usage error naming --batch and %s", err, path)
	}
	// Set on the command line, the file is not named.
	_, err = runTree(t, "train", "--batch", "0")
	if err == nil || strings.Contains(err.Error(), "is set in") {
		t.Fatalf("--batch 0 on the command line: %v", err)
	}
}

// A --config file is outside bytes: whatever it holds, decoding it and
// turning its values into flag text returns an error or values, never a
// panic, in either format.
func FuzzDecodeConfig(f *testing.F) {
	for _, s := range []string{"lr: 0.001\nd-model: 256\nlayers: [784, 256, 10]\n", "lr = 0.001\nresume = \"auto\"\n",
		"model:\n  name: mlp\n", "- a\n", "lr: [1\n", "", "a: !!binary AAAA\n", "x = [[1], {a = 2}]\n"} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, yamlFile bool) {
		name := "c.toml"
		if yamlFile {
			name = "c.yaml"
		}
		values, err := decodeConfig(name, data)
		if err != nil {
			return
		}
		for _, v := range values {
			_, _ = configText(v)
		}
	})
}

// The test hooks are not in troupe's own build: their environment
// variables, even malformed, change nothing (a binary built with -tags
// troupetesthooks would refuse these values).
func TestTestHooksAreNotInTheProduct(t *testing.T) {
	t.Setenv("TROUPE_TEST_STRAGGLER", "one:slow")
	t.Setenv("TROUPE_TEST_OVERFLOW", "zero")
	if _, err := runTree(t, "train", "--model", "mlp", "--data", "synthetic-mlp:features=12,classes=3,n=64,test=16", "--layers", "12,8,3",
		"--steps", "2", "--batch", "16", "--dp", "2", "--threads", "1"); err != nil {
		t.Fatalf("a run with the test hooks' variables set: %v", err)
	}
}

package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/report"
	"github.com/troupe-ml/troupe/train"
)

// metricsFile writes steps 1…n of a run whose loss starts at loss0 and
// whose rate is lr, as troupe train --metrics-out does.
func metricsFile(t *testing.T, path string, n int, loss0, lr float64) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for s := 1; s <= n; s++ {
		l, _ := json.Marshal(train.StepMetrics{Step: s, Loss: loss0 / float64(s), LR: lr, GradNorm: 1 + float64(s), SamplesPerS: 100,
			World: 2, DP: 2, PP: 1, Batch: 64})
		b.Write(append(l, '\n'))
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// reportHTML is a written report: its title, its runs' names and
// steps, and the page.
type reportHTML struct {
	title string
	runs  []struct {
		Name  string              `json:"name"`
		Steps []train.StepMetrics `json:"steps"`
	}
	page string
}

func readReport(t *testing.T, path string) reportHTML {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := reportHTML{page: string(b)}
	m := regexp.MustCompile(`(?m)^const D = (.*);$`).FindStringSubmatch(r.page)
	if m == nil {
		t.Fatalf("%s holds no data", path)
	}
	var d struct {
		Runs []struct {
			Name  string              `json:"name"`
			Steps []train.StepMetrics `json:"steps"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(m[1]), &d); err != nil {
		t.Fatalf("%s: its data: %v", path, err)
	}
	r.runs = d.Runs
	if t := regexp.MustCompile(`<title>([^<]*)</title>`).FindStringSubmatch(r.page); t != nil {
		r.title = t[1]
	}
	return r
}

func (r reportHTML) names() []string {
	var n []string
	for _, run := range r.runs {
		n = append(n, run.Name)
	}
	return n
}

// Several inputs make one report comparing them: a series each, named by
// the file (by its path where two files share a name) or by --label.
func TestReportComparesRuns(t *testing.T) {
	dir := t.TempDir()
	a := metricsFile(t, filepath.Join(dir, "a", "m.jsonl"), 5, 2.3, 0.05)
	b := metricsFile(t, filepath.Join(dir, "b", "m.jsonl"), 8, 2.4, 0.1)
	c := metricsFile(t, filepath.Join(dir, "c.jsonl"), 3, 2.5, 0.2)
	out := filepath.Join(dir, "cmp.html")
	if _, err := execute(newReportCmd(), a, b, c, "-o", out); err != nil {
		t.Fatal(err)
	}
	r := readReport(t, out)
	if want := []string{a, b, "c.jsonl"}; strings.Join(r.names(), "|") != strings.Join(want, "|") {
		t.Fatalf("runs %q, want %q", r.names(), want)
	}
	if len(r.runs[0].Steps) != 5 || len(r.runs[1].Steps) != 8 || r.runs[1].Steps[7].LR != 0.1 || r.runs[2].Steps[2].GradNorm != 4 {
		t.Errorf("the runs' steps: %+v", r.runs)
	}
	if r.title != a+" vs "+b+" vs c.jsonl" {
		t.Errorf("title %q", r.title)
	}

	if _, err := execute(newReportCmd(), a, b, "--label", "lr 0.05", "--label", "lr 0.1", "--title", "lr sweep", "-o", out); err != nil {
		t.Fatal(err)
	}
	if r := readReport(t, out); strings.Join(r.names(), "|") != "lr 0.05|lr 0.1" || r.title != "lr sweep" {
		t.Errorf("labelled runs %q titled %q", r.names(), r.title)
	}
}

// One input reports as it always did: a file, or an elastic job's
// directory merged by step.
func TestReportOneInput(t *testing.T) {
	dir := t.TempDir()
	job := filepath.Join(dir, "job")
	metricsFile(t, filepath.Join(job, "n1.jsonl"), 4, 2, 0.01)
	metricsFile(t, filepath.Join(job, "n2.jsonl"), 6, 2, 0.01)
	out := filepath.Join(dir, "job.html")
	if _, err := execute(newReportCmd(), job, "-o", out); err != nil {
		t.Fatal(err)
	}
	r := readReport(t, out)
	if len(r.runs) != 1 || r.runs[0].Name != "job" || len(r.runs[0].Steps) != 6 || r.title != "job" {
		t.Fatalf("the job's report: %q titled %q, %d steps", r.names(), r.title, len(r.runs[0].Steps))
	}
}

// --config gives a run's configuration: from its checkpoint directory
// (every manifest carries it) or a file; "" skips an input.
func TestReportConfig(t *testing.T) {
	dir := t.TempDir()
	a := metricsFile(t, filepath.Join(dir, "a.jsonl"), 5, 2.3, 0.05)
	b := metricsFile(t, filepath.Join(dir, "b.jsonl"), 5, 2.3, 0.1)
	cfg := mlpConfig()
	cfg.Data, cfg.DP, cfg.LR = "synthetic-mlp", 2, 0.05
	cfg.SetModelArg("layers", []int{784, 64, 10})
	conf, _ := json.Marshal(cfg)
	ck := filepath.Join(dir, "ckpt")
	snap := &checkpoint.Snapshot{Meta: checkpoint.Meta{Step: 5, World: checkpoint.World{DP: 2, PP: 1}, Config: conf}}
	if _, err := checkpoint.Save(checkpoint.OSFS{}, ck, snap, 0); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "r.html")
	// Through the root command, whose --config handling (a file of flags,
	// for the training commands) must leave report's alone.
	root := &cobra.Command{Use: "troupe", SilenceUsage: true, SilenceErrors: true, PersistentPreRunE: prepare}
	root.PersistentFlags().AddFlagSet(rootCmd.PersistentFlags())
	root.AddCommand(newReportCmd())
	if _, err := execute(root, "report", a, b, "--config", ck, "--config", "", "-o", out); err != nil {
		t.Fatal(err)
	}
	page := readReport(t, out).page
	for _, want := range []string{
		`<th scope="row">model</th><td>mlp: layers 784,64,10</td><td>—</td>`,
		`<th scope="row">learning rate</th><td>0.05</td><td>—</td>`,
		`<th scope="row">parallelism</th><td>dp 2 × pp 1 × tp 1</td><td>—</td>`,
		filepath.Join(ck, checkpoint.StepDirName(5), checkpoint.ManifestFile),
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the report lacks %q", want)
		}
	}

	yml := filepath.Join(dir, "run.yaml")
	os.WriteFile(yml, []byte("model: mlp\nmodelargs:\n  layers: 784,32,10\nlr: 0.1\n"), 0o644)
	if _, err := execute(newReportCmd(), b, "--config", yml, "-o", out); err != nil {
		t.Fatal(err)
	}
	if page := readReport(t, out).page; !strings.Contains(page, `<th scope="row">model</th><td>mlp: layers 784,32,10</td>`) {
		t.Error("the YAML file's model is not in the report")
	}
}

// troupe train passes its configuration to the report it writes.
func TestWriteReportOfTrain(t *testing.T) {
	dir := t.TempDir()
	steps, err := report.ReadMetrics(metricsFile(t, filepath.Join(dir, "m.jsonl"), 3, 2, 0.05))
	if err != nil {
		t.Fatal(err)
	}
	cfg := mlpConfig()
	cfg.DP = 2
	cfg.SetModelArg("layers", []int{784, 64, 10})
	out := filepath.Join(dir, "run.html")
	if err := writeReport(out, "troupe train: mlp", steps, "", &cfg, nil); err != nil {
		t.Fatal(err)
	}
	page := readReport(t, out).page
	for _, want := range []string{`<th scope="row">read from</th><td>troupe train</td>`, `<td>mlp: layers 784,64,10</td>`, `<td>dp 2 × pp 1 × tp 1</td>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	// Without it, the report says the configuration is not known.
	if err := writeReport(out, "troupe train: mlp", steps, "", nil, nil); err != nil {
		t.Fatal(err)
	}
	if page := readReport(t, out).page; strings.Contains(page, "read from") || !strings.Contains(page, "do not carry the run") {
		t.Error("a report without a configuration does not say so")
	}
}

// A command line that cannot make a report is a usage error saying why,
// and writes nothing.
func TestReportBadArguments(t *testing.T) {
	dir := t.TempDir()
	a := metricsFile(t, filepath.Join(dir, "a.jsonl"), 3, 2, 0.05)
	b := metricsFile(t, filepath.Join(dir, "b.jsonl"), 3, 2, 0.1)
	torn := filepath.Join(dir, "torn.jsonl")
	os.WriteFile(torn, []byte("{\"step\":1,\"loss\":2}\n{\"step\":2,\"lo\n"), 0o644)
	empty := filepath.Join(dir, "empty.jsonl")
	os.WriteFile(empty, nil, 0o644)
	typo := filepath.Join(dir, "typo.yaml")
	os.WriteFile(typo, []byte("model: mlp\nlearning_rate: 0.1\n"), 0o644)
	out := filepath.Join(dir, "r.html")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "requires at least 1 arg"},
		{[]string{a, b, "--label", "x"}, "1 --label for 2 inputs"},
		{[]string{a, b, "--config", typo}, "1 --config for 2 inputs"},
		{[]string{a, b, "--label", "x", "--label", "x"}, `two runs named "x"`},
		{[]string{a, a}, `two runs named "` + a + `"`},
		{[]string{a, b, "--trace", "t.json"}, "--trace draws one run's pipeline"},
		{[]string{a, torn}, "torn.jsonl line 2: report: bad input: not a metrics line"},
		{[]string{empty}, "empty.jsonl holds no metrics lines"},
		{[]string{filepath.Join(dir, "missing.jsonl")}, "missing.jsonl: no such file"},
		{[]string{a, "--config", typo}, `typo.yaml: report: bad input: not a troupe train configuration: json: unknown field "learning_rate"`},
		{[]string{a, "--config", dir}, "is neither a checkpoint directory nor a checkpoint"},
	} {
		_, err := execute(newReportCmd(), append(c.args, "-o", out)...)
		if c.args == nil {
			_, err = execute(newReportCmd(), "-o", out)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("troupe report %q: %v, want an error saying %q", c.args, err, c.want)
			continue
		}
		if c.args != nil && !errors.Is(err, errUsage) {
			t.Errorf("troupe report %q: %v is not a usage error", c.args, err)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("troupe report %q wrote %s", c.args, out)
		}
	}
}

// The help says how to compare runs and where a configuration comes from.
func TestReportHelp(t *testing.T) {
	out, err := execute(newReportCmd(), "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"METRICS.jsonl|DIR [METRICS.jsonl|DIR…]", "--label", "--config", "Several inputs are compared",
		"troupe report a.jsonl b.jsonl --label", "every\ncheckpoint's manifest carries the configuration"} {
		if !strings.Contains(out, want) {
			t.Errorf("the help lacks %q", want)
		}
	}
}

// mlpConfig is train.DefaultConfigFor("mlp").
func mlpConfig() train.Config {
	c, err := train.DefaultConfigFor("mlp")
	if err != nil {
		panic(err)
	}
	return c
}

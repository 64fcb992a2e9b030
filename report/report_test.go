package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"html"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/train"
)

func writeLines(t *testing.T, path string, ms ...train.StepMetrics) {
	t.Helper()
	var b bytes.Buffer
	for _, m := range ms {
		l, _ := json.Marshal(m)
		b.Write(append(l, '\n'))
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// An elastic job's nodes each log the steps they led: a directory's files
// merge by step, in step order, a step logged twice (replayed after a
// restore) keeping the line read last.
func TestReadMetricsMergesNodes(t *testing.T) {
	dir := t.TempDir()
	writeLines(t, filepath.Join(dir, "n1.jsonl"), train.StepMetrics{Step: 1, Loss: 3}, train.StepMetrics{Step: 2, Loss: 2.5})
	writeLines(t, filepath.Join(dir, "n2.jsonl"), train.StepMetrics{Step: 2, Loss: 2.4}, train.StepMetrics{Step: 3, Loss: 2})
	got, err := ReadMetrics(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Step != 1 || got[1].Loss != 2.4 || got[2].Step != 3 {
		t.Fatalf("merged %+v", got)
	}
	one, err := ReadMetrics(filepath.Join(dir, "n1.jsonl"))
	if err != nil || len(one) != 2 {
		t.Fatalf("one file: %v, %v", one, err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte("{\"step\":1}\nnot json\n"), 0o644)
	if _, err := ReadMetrics(bad); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "bad.jsonl line 2") {
		t.Fatalf("a bad line: %v, want ErrInput naming the file and line", err)
	}
	if _, err := ReadMetrics(t.TempDir()); !errors.Is(err, ErrInput) {
		t.Fatalf("an empty directory: %v", err)
	}
}

// A trace's complete spans are read on the rows their metadata names.
func TestReadTrace(t *testing.T) {
	doc := `{"traceEvents":[{"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"replica 0"}},
{"name":"thread_name","ph":"M","pid":1,"tid":2,"args":{"name":"stage 1"}},
{"name":"F0","cat":"forward","ph":"X","ts":10,"dur":5,"pid":1,"tid":2},
{"name":"B0","cat":"backward","ph":"X","ts":20,"dur":7,"pid":3,"tid":4},
{"name":"mark","ph":"i","ts":30,"pid":1,"tid":2}]}`
	spans, err := ReadTrace(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 2 || spans[0].Row != "replica 0 / stage 1" || spans[0].Dur != 5 || spans[1].Row != "pid 3 tid 4" || spans[1].Cat != "backward" {
		t.Fatalf("spans %+v", spans)
	}
	if _, err := ReadTrace(strings.NewReader("[")); !errors.Is(err, ErrInput) {
		t.Fatalf("a broken trace: %v", err)
	}
}

// The report is one self-contained file: the chart library and the data
// inline, nothing fetched from anywhere; the data cannot close its script
// element.
func TestWriteIsSelfContained(t *testing.T) {
	var b bytes.Buffer
	steps := []train.StepMetrics{{Step: 1, Loss: 2, Batch: 8}, {Step: 2, Loss: 1.5, Batch: 8, EvalLoss: 1.6}}
	if err := Write(&b, Input{Title: "run </script><b>", Runs: []Run{{Name: "m.jsonl", Steps: steps}}, Trace: []Span{{Name: "F0", Cat: "forward", Row: "stage 0", Ts: 1, Dur: 2}}}); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, bad := range []string{`src="http`, `href="http`, "url(http", "<script src", `<link rel="stylesheet" href`} {
		if strings.Contains(html, bad) {
			t.Errorf("the report refers outside itself: %q", bad)
		}
	}
	for _, want := range []string{"uPlot", `"eval_loss":1.6`, `"row":"stage 0"`, "run &lt;/script&gt;&lt;b&gt;"} {
		if !strings.Contains(html, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if strings.Count(html, "</script>") != 2 {
		t.Errorf("%d script ends, want the library's and the report's", strings.Count(html, "</script>"))
	}
	if err := Write(&b, Input{}); !errors.Is(err, ErrInput) {
		t.Fatalf("a report of no steps: %v", err)
	}
}

func FuzzParseLine(f *testing.F) {
	f.Add([]byte(`{"step":3,"loss":2.5,"samples_per_s":100}`))
	f.Add([]byte(`{"step":0}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseLine(b)
		if err == nil && m.Step < 1 {
			t.Fatalf("accepted a line without a step: %q", b)
		}
		if err != nil && !errors.Is(err, ErrInput) {
			t.Fatalf("error %v is not ErrInput", err)
		}
	})
}

func FuzzReadTrace(f *testing.F) {
	f.Add([]byte(`{"traceEvents":[{"name":"F0","ph":"X","ts":1,"dur":2,"pid":0,"tid":0}]}`))
	f.Add([]byte(`{"traceEvents":[{"name":"thread_name","ph":"M","pid":0,"tid":0,"args":{"name":5}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		spans, err := ReadTrace(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrInput) {
				t.Fatalf("error %v is not ErrInput", err)
			}
			return
		}
		var out bytes.Buffer
		if err := Write(&out, Input{Runs: []Run{{Name: "r", Steps: []train.StepMetrics{{Step: 1}}}}, Trace: spans}); err != nil {
			t.Fatalf("a trace that read cannot be reported: %v", err)
		}
	})
}

// page is what a report's page holds: the data its script draws from
// and its settings table, row by row.
type reportPage struct {
	Runs []struct {
		Name  string              `json:"name"`
		Steps []train.StepMetrics `json:"steps"`
	} `json:"runs"`
	heads []string
	rows  map[string]pageRow
	html  string
}

type pageRow struct {
	values  []string
	differs bool
}

func readPage(t *testing.T, in Input) reportPage {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, in); err != nil {
		t.Fatal(err)
	}
	p := reportPage{html: b.String(), rows: map[string]pageRow{}}
	m := regexp.MustCompile(`(?m)^const D = (.*);$`).FindStringSubmatch(p.html)
	if m == nil {
		t.Fatal("the report holds no data")
	}
	if err := json.Unmarshal([]byte(m[1]), &p); err != nil {
		t.Fatalf("the report's data: %v", err)
	}
	for _, h := range regexp.MustCompile(`<th scope="col">([^<]*)</th>`).FindAllStringSubmatch(p.html, -1) {
		p.heads = append(p.heads, h[1])
	}
	cell := regexp.MustCompile(`<td>([^<]*)</td>`)
	for _, g := range strings.Split(p.html, "<tbody>")[1:] {
		title := regexp.MustCompile(`<tr class="group"><th colspan="\d+">([^<]*)</th></tr>`).FindStringSubmatch(g)
		if title == nil {
			t.Fatalf("a settings group without a title: %s", g)
		}
		for _, r := range regexp.MustCompile(`<tr( class="differs")?><th scope="row">([^<]*)</th>(.*)</tr>`).FindAllStringSubmatch(g, -1) {
			var vals []string
			for _, c := range cell.FindAllStringSubmatch(r[3], -1) {
				vals = append(vals, html.UnescapeString(c[1]))
			}
			p.rows[title[1]+"/"+r[2]] = pageRow{vals, r[1] != ""}
		}
	}
	return p
}

// row checks the settings row group/name.
func (p reportPage) row(t *testing.T, name string, differs bool, want ...string) {
	t.Helper()
	r, ok := p.rows[name]
	if !ok {
		t.Errorf("no settings row %q", name)
		return
	}
	if !slices.Equal(r.values, want) || r.differs != differs {
		t.Errorf("settings row %q: %q (differs %v), want %q (differs %v)", name, r.values, r.differs, want, differs)
	}
}

func mlpConfig() *train.Config {
	c := mlpDefaults()
	c.Data, c.DP, c.Epochs, c.Steps, c.EvalEvery, c.ClipNorm = "synthetic-mlp", 2, 0, 40, 10, 1
	c.SetModelArg("layers", []int{784, 64, 10})
	return &c
}

// Runs compared: the page holds each run's steps under its name, a
// settings column each, the rows they disagree on marked, and a run
// without a configuration shows none (no value is made up for it).
func TestWriteComparesRuns(t *testing.T) {
	a := []train.StepMetrics{{Step: 1, Loss: 2.3, LR: 0.01, GradNorm: 4.5, World: 2, DP: 2, PP: 1, Batch: 64},
		{Step: 2, Loss: 2.1, LR: 0.05, GradNorm: 3.25, EvalLoss: 2.2, World: 2, DP: 2, PP: 1, Batch: 64}}
	b := []train.StepMetrics{{Step: 1, Loss: 2.4, LR: 0.1, World: 1, DP: 1, PP: 1, Batch: 64},
		{Step: 3, Loss: 2.0, LR: 0.1, World: 1, DP: 1, PP: 1, Batch: 64}}
	p := readPage(t, Input{Title: "lr sweep", Runs: []Run{
		{Name: "lr 0.05", Steps: a, Config: mlpConfig(), ConfigFrom: "ck/step-000002/manifest.json"},
		{Name: "lr 0.1", Steps: b},
	}})
	if len(p.Runs) != 2 || p.Runs[0].Name != "lr 0.05" || p.Runs[1].Name != "lr 0.1" {
		t.Fatalf("runs %+v", p.Runs)
	}
	if got := p.Runs[0].Steps; len(got) != 2 || got[1].LR != 0.05 || got[1].GradNorm != 3.25 || got[1].EvalLoss != 2.2 {
		t.Errorf("run a's steps %+v", got)
	}
	if got := p.Runs[1].Steps; len(got) != 2 || got[1].Step != 3 || got[1].LR != 0.1 {
		t.Errorf("run b's steps %+v", got)
	}
	if !slices.Equal(p.heads, []string{"lr 0.05", "lr 0.1"}) {
		t.Errorf("settings columns %q", p.heads)
	}
	p.row(t, "Configuration/read from", false, "ck/step-000002/manifest.json", "—")
	p.row(t, "Configuration/model", false, "mlp: layers 784,64,10", "—")
	p.row(t, "Configuration/learning rate", false, "0.05", "—")
	p.row(t, "From the metrics lines/world", true, "2", "1")
	p.row(t, "Configuration/batch", false, "64 (global)", "—")
	p.row(t, "From the metrics lines/batch", false, "64", "64")
	p.row(t, "From the metrics lines/learning rate", true, "0.01 at step 1, peak 0.05, 0.05 at step 2", "0.1")
	p.row(t, "From the metrics lines/steps logged", true, "2 (steps 1 to 2)", "2 (steps 1 to 3)")
	for _, want := range []string{"Every setting of lr 0.05", `&#34;LR&#34;: 0.05`, "given no configuration"} {
		if !strings.Contains(p.html, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if strings.Contains(p.html, "Every setting of lr 0.1") {
		t.Error("the report shows every setting of a run it has no configuration of")
	}

	// Both configured: the rates differ, the models do not.
	fast := mlpConfig()
	fast.LR = 0.1
	p = readPage(t, Input{Runs: []Run{
		{Name: "lr 0.05", Steps: a, Config: mlpConfig(), ConfigFrom: "a/manifest.json"},
		{Name: "lr 0.1", Steps: b, Config: fast, ConfigFrom: "b.yaml"},
	}})
	p.row(t, "Configuration/read from", false, "a/manifest.json", "b.yaml")
	p.row(t, "Configuration/learning rate", true, "0.05", "0.1")
	p.row(t, "Configuration/model", false, "mlp: layers 784,64,10", "mlp: layers 784,64,10")
	if strings.Contains(p.html, "given no configuration") {
		t.Error("the report says a run has no configuration")
	}

	var w bytes.Buffer
	for _, c := range []struct {
		in   Input
		want string
	}{
		{Input{}, "no run"},
		{Input{Runs: []Run{{Name: "x", Steps: a}, {Name: "x", Steps: b}}}, `two runs are named "x"`},
		{Input{Runs: []Run{{Name: "x", Steps: a}, {Name: "y"}}}, `run "y" has no steps`},
	} {
		if err := Write(&w, c.in); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Write: %v, want ErrInput saying %q", err, c.want)
		}
	}
}

// One run without a configuration: the settings say what the metrics
// carry, say that the configuration is not there and how to add it.
func TestWriteOneRunWithoutConfig(t *testing.T) {
	steps := []train.StepMetrics{
		{Step: 1, LR: 0.001, World: 2, DP: 2, PP: 1, Generation: 1, Batch: 32, Micro: 1, Accum: 1},
		{Step: 2, LR: 0.002, World: 3, DP: 3, PP: 1, Generation: 2, Batch: 48, Micro: 1, Accum: 1},
		{Step: 3, LR: 0.0015, World: 3, DP: 3, PP: 1, Generation: 2, Batch: 48, Micro: 1, Accum: 1, LossScale: 32768, Skipped: true},
	}
	p := readPage(t, Input{Runs: []Run{{Name: "elastic", Steps: steps}}})
	if len(p.heads) != 0 {
		t.Errorf("one run's settings have column heads %q", p.heads)
	}
	p.row(t, "From the metrics lines/world", false, "2, then 3")
	p.row(t, "From the metrics lines/dp × pp × tp", false, "2 × 1 × 1, then 3 × 1 × 1")
	p.row(t, "From the metrics lines/batch", false, "32, then 48")
	p.row(t, "From the metrics lines/micro-batches", false, "1")
	p.row(t, "From the metrics lines/generations", false, "2")
	p.row(t, "From the metrics lines/learning rate", false, "0.001 at step 1, peak 0.002, 0.0015 at step 3")
	p.row(t, "From the metrics lines/fp16 loss scale", false, "3.277e+04 at the end, 1 step skipped")
	if _, ok := p.rows["Configuration/model"]; ok {
		t.Error("a model row without a configuration")
	}
	if !strings.Contains(p.html, "do not carry the run&#39;s configuration: troupe report --config adds it") {
		t.Error("the report does not say where the configuration is missing from")
	}
}

// The configuration's rows read as troupe train's flags set them.
func TestConfigRows(t *testing.T) {
	values := func(c *train.Config) map[string]string {
		out := map[string]string{}
		for _, r := range configRows {
			out[r.name] = r.value(c)
		}
		return out
	}
	gpt := train.DefaultConfig()
	gpt.PP, gpt.MicroBatches, gpt.TP, gpt.Zero, gpt.Precision, gpt.ReduceDType = 2, 4, 2, 1, "bf16", "bf16"
	gpt.CkptDir, gpt.CkptEvery = "ck", 50
	mlp := mlpConfig()
	mlp.Sync, mlp.SyncEvery, mlp.Resume = "local-sgd", 10, true
	for _, c := range []struct {
		cfg  *train.Config
		want map[string]string
	}{
		{&gpt, map[string]string{
			"model":             "gpt: d-model 128, n-layers 4, n-heads 4, vocab-size 0, untied false, context 64",
			"data":              "gospec (the gpt's default), char vocabulary, shuffled every epoch",
			"batch":             "32 (global)",
			"steps":             "300",
			"optimizer":         "adamw, β 0.9, 0.999, ε 1e-08, weight decay 0.01",
			"learning rate":     "0.001",
			"lr schedule":       "cosine to 0.1 × lr, after 20 warm-up steps",
			"gradient clipping": "to a global norm of 1",
			"precision":         "bf16, gradients reduced in bf16",
			"parallelism":       "dp 1 × pp 2 × tp 2, 4 micro-batches, 1f1b, ZeRO-1",
			"synchronisation":   "",
			"evaluation":        "at the end",
			"checkpoints":       "every 50 steps in ck, the last 3 kept",
			"device":            "cpu",
		}},
		{mlp, map[string]string{
			"model":             "mlp: layers 784,64,10",
			"data":              "synthetic-mlp, shuffled every epoch",
			"batch":             "64 (global)",
			"steps":             "40, resumed from the latest checkpoint",
			"optimizer":         "sgd, momentum 0.9",
			"learning rate":     "0.05",
			"lr schedule":       "cosine to 0",
			"gradient clipping": "to a global norm of 1",
			"precision":         "fp32",
			"parallelism":       "dp 2 × pp 1 × tp 1",
			"synchronisation":   "local-sgd, rounds of 10 steps",
			"seed":              "1",
			"evaluation":        "every 10 steps",
			"checkpoints":       "",
		}},
		// A file of a few settings: the others are not shown.
		{&train.Config{ModelConfig: train.ModelConfig{Model: "mlp"}, DataConfig: train.DataConfig{Batch: 16}}, map[string]string{
			"model": "mlp: layers from the data", "batch": "16 (global)", "steps": "",
			"optimizer": "", "learning rate": "", "lr schedule": "", "device": "",
		}},
	} {
		got := values(c.cfg)
		for name, want := range c.want {
			if got[name] != want {
				t.Errorf("%s: %s: %q, want %q", c.cfg.Model, name, got[name], want)
			}
		}
	}
}

// A bad metrics input is an error naming the file and the line.
func TestReadMetricsBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	long := "{\"step\":1,\"loss\":2,\"pad\":\"" + strings.Repeat("x", maxLine) + "\"}\n"
	for _, c := range []struct {
		name, text, want string
	}{
		{"torn.jsonl", "{\"step\":1,\"loss\":2}\n\n{\"step\":2,\"lo", "torn.jsonl line 3: report: bad input: not a metrics line"},
		{"empty.jsonl", "", "empty.jsonl holds no metrics lines"},
		{"blank.jsonl", "\n  \n", "blank.jsonl holds no metrics lines"},
		{"nostep.jsonl", "{\"step\":1}\n{\"loss\":2}\n", "nostep.jsonl line 2: report: bad input: a metrics line without a step"},
		{"list.jsonl", "[1,2]\n", "list.jsonl line 1: report: bad input: not a metrics line"},
		{"string.jsonl", "{\"step\":\"one\"}\n", "string.jsonl line 1: report: bad input: not a metrics line"},
		{"long.jsonl", "{\"step\":1}\n" + long, "long.jsonl line 2: longer than 16777216 bytes"},
	} {
		_, err := ReadMetrics(write(c.name, c.text))
		if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInput saying %q", c.name, err, c.want)
		}
	}
	// In an elastic job's directory a node that led no step leaves an
	// empty file; the others' steps make the report.
	job := filepath.Join(dir, "job")
	os.Mkdir(job, 0o755)
	writeLines(t, filepath.Join(job, "n1.jsonl"), train.StepMetrics{Step: 1, Loss: 3})
	os.WriteFile(filepath.Join(job, "n2.jsonl"), nil, 0o644)
	if got, err := ReadMetrics(job); err != nil || len(got) != 1 {
		t.Errorf("a job with an idle node: %v, %v", got, err)
	}
	os.WriteFile(filepath.Join(job, "n1.jsonl"), nil, 0o644)
	if _, err := ReadMetrics(job); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "job: its *.jsonl files hold no metrics lines") {
		t.Errorf("a job of empty files: %v", err)
	}
	if _, err := ReadMetrics(filepath.Join(dir, "missing.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}

// saveCheckpoint saves a checkpoint of step in dir whose manifest carries
// config.
func saveCheckpoint(t testing.TB, dir string, step int64, config []byte) {
	t.Helper()
	s := &checkpoint.Snapshot{Meta: checkpoint.Meta{Step: step, World: checkpoint.World{DP: 1, PP: 1}, Config: config}}
	if _, err := checkpoint.Save(checkpoint.OSFS{}, dir, s, 0); err != nil {
		t.Fatal(err)
	}
}

// A configuration is read from a checkpoint (troupe train writes its
// configuration into every manifest: the checkpoint directory, one
// checkpoint or its manifest), or from a JSON or YAML file of its
// settings, where a field train.Config lacks is refused by name.
func TestReadConfig(t *testing.T) {
	dir := t.TempDir()
	want := mlpConfig()
	conf, _ := json.Marshal(want)
	ck := filepath.Join(dir, "ck")
	saveCheckpoint(t, ck, 10, []byte(`{"Batch":1}`))
	saveCheckpoint(t, ck, 20, conf)
	step20 := filepath.Join(ck, checkpoint.StepDirName(20))
	for _, path := range []string{ck, step20, filepath.Join(step20, checkpoint.ManifestFile)} {
		got, from, err := ReadConfig(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !reflect.DeepEqual(got, want) || from != filepath.Join(step20, checkpoint.ManifestFile) {
			t.Errorf("%s: %+v from %s, want %+v from the latest checkpoint's manifest", path, got, from, want)
		}
	}
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	yml := write("run.yaml", "model: mlp\nmodelargs:\n  layers: 784,64,10\nbatch: 64\nlr: 0.05\noptim:\n  name: sgd\n  momentum: 0.9\ndp: 2\nschedule: cosine\npipelineschedule: gpipe\n")
	got, from, err := ReadConfig(yml)
	if err != nil {
		t.Fatal(err)
	}
	if got.Model != "mlp" || got.ModelArgs["layers"] != "784,64,10" || got.Batch != 64 || got.LR != 0.05 ||
		got.Optim.Name != "sgd" || got.Optim.Momentum != 0.9 || got.DP != 2 || got.Schedule != train.Cosine || from != yml {
		t.Errorf("the YAML file read as %+v from %s", got, from)
	}
	if got, _, err := ReadConfig(write("run.json", string(conf))); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("the JSON file read as %+v, %v", got, err)
	}

	noConf := filepath.Join(dir, "old")
	saveCheckpoint(t, noConf, 5, nil)
	for _, c := range []struct {
		path, want string
	}{
		{write("typo.yaml", "model: mlp\nbatchsize: 64\n"), `typo.yaml: report: bad input: not a troupe train configuration: json: unknown field "batchsize"`},
		{write("type.json", `{"Batch": "64"}`), "type.json: report: bad input: not a troupe train configuration"},
		{write("list.yaml", "- 1\n- 2\n"), "list.yaml: report: bad input: a configuration is a mapping of settings, not a list"},
		{write("empty.yaml", "\n"), "empty.yaml: report: bad input: an empty configuration"},
		{write("broken.json", `{"Batch": 64,`), "broken.json: report: bad input: neither JSON nor YAML: unexpected end of JSON input"},
		{write("schedule.json", `{"PipelineSchedule": "zigzag"}`), "schedule.json: report: bad input: not a troupe train configuration: pipeline: unknown schedule"},
		{write("metrics.jsonl", "{\"step\":1}\n{\"step\":2}\n"), "metrics.jsonl: report: bad input"},
		{noConf, "manifest.json: report: bad input: the checkpoint's manifest carries no configuration"},
		{dir, "is neither a checkpoint directory nor a checkpoint"},
	} {
		if _, _, err := ReadConfig(c.path); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInput saying %q", c.path, err, c.want)
		}
	}
	// A manifest written by another version of troupe: its settings this
	// one does not know are left out and named.
	var newer map[string]any
	json.Unmarshal(conf, &newer)
	newer["SomeFutureOption"] = true
	newer["Optim"].(map[string]any)["Lion"] = 0.5
	conf2, _ := json.Marshal(newer)
	ck2 := filepath.Join(dir, "ck2")
	saveCheckpoint(t, ck2, 7, conf2)
	got, from, err = ReadConfig(ck2)
	if err != nil {
		t.Fatal(err)
	}
	wantFrom := filepath.Join(ck2, checkpoint.StepDirName(7), checkpoint.ManifestFile) + " (left out, unknown to this troupe: Optim.Lion, SomeFutureOption)"
	if !reflect.DeepEqual(got, want) || from != wantFrom {
		t.Errorf("a newer manifest: %+v from %q, want %+v from %q", got, from, want, wantFrom)
	}
	// A file of settings is the user's: a setting troupe lacks is refused.
	if _, _, err := ReadConfig(write("newer.json", string(conf2))); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "unknown field") {
		t.Errorf("a file with a setting troupe lacks: %v", err)
	}

	// A manifest's checksum is checked: a flipped setting is not trusted.
	m := filepath.Join(step20, checkpoint.ManifestFile)
	b, _ := os.ReadFile(m)
	flipped := strings.Replace(string(b), `"LR": 0.05`, `"LR": 0.06`, 1)
	bad := write("flipped.json", flipped)
	if string(b) == flipped {
		t.Fatalf("the manifest does not hold the rate as the test expects:\n%s", b)
	}
	if _, _, err := ReadConfig(bad); !errors.Is(err, ErrInput) || !errors.Is(err, checkpoint.ErrManifest) {
		t.Errorf("a manifest with a changed setting: %v", err)
	}
}

func FuzzParseConfig(f *testing.F) {
	conf, _ := json.Marshal(mlpConfig())
	f.Add(conf)
	gpt, _ := json.Marshal(train.DefaultConfig())
	f.Add(gpt)
	f.Add([]byte("model: gpt\ndmodel: 64\nlr: 3e-4\noptim: {name: adamw}\n"))
	f.Add([]byte(`{"PipelineSchedule": "gpipe", "Model": "mlp", "ModelArgs": {"layers": "3,2"}}`))
	ck := filepath.Join(f.TempDir(), "ck")
	saveCheckpoint(f, ck, 1, conf)
	m, err := os.ReadFile(filepath.Join(ck, checkpoint.StepDirName(1), checkpoint.ManifestFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(m)
	steps := []train.StepMetrics{{Step: 1, Loss: 1}}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, _, err := ParseConfig(b)
		if err != nil {
			if !errors.Is(err, ErrInput) {
				t.Fatalf("error %v is not ErrInput", err)
			}
			return
		}
		// What Write does with a run's configuration.
		if _, err := json.MarshalIndent(c, "", "  "); err != nil {
			t.Fatalf("a configuration that read cannot be shown: %v", err)
		}
		settings([]Run{{Name: "r", Steps: steps, Config: c, ConfigFrom: "fuzz"}})
	})
}

func FuzzReadLines(f *testing.F) {
	f.Add([]byte("{\"step\":1,\"loss\":2.5,\"lr\":0.001,\"grad_norm\":1.5}\n\n{\"step\":2,\"loss\":2}\n"))
	f.Add([]byte("{\"step\":1}\r\n{\"step\":1,\"loss\":3}"))
	f.Add([]byte("{\"step\":1}\nnot json\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		byStep := map[int]train.StepMetrics{}
		err := readLines(bytes.NewReader(b), "fuzz.jsonl", byStep)
		if err != nil {
			if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "fuzz.jsonl line ") {
				t.Fatalf("error %v is not ErrInput naming the file and line", err)
			}
			return
		}
		var steps []train.StepMetrics
		for s, m := range byStep {
			if s < 1 || m.Step != s {
				t.Fatalf("step %d kept as %d", m.Step, s)
			}
			steps = append(steps, m)
		}
		if len(steps) == 0 {
			return
		}
		var out bytes.Buffer
		if err := Write(&out, Input{Runs: []Run{{Name: "r", Steps: steps}}}); err != nil {
			t.Fatalf("metrics that read cannot be reported: %v", err)
		}
	})
}

// mlpDefaults is train.DefaultConfigFor("mlp").
func mlpDefaults() train.Config {
	c, err := train.DefaultConfigFor("mlp")
	if err != nil {
		panic(err)
	}
	return c
}

// Package report writes a run's report: one self-contained HTML file (no
// network access when it is opened) with the run's configuration, the
// loss and held-out loss, the throughput, the learning rate, the gradient
// norm, the time of a step (compute, communication, pipeline bubble), the
// straggler of every step, the membership of an elastic job (generations,
// world size, resume times), checkpoints, memory, and, from a pipeline
// trace, the stages' timeline; or several runs compared, each a line of
// the same charts. It reads what troupe writes: the metrics lines
// (--metrics-out; an elastic job's nodes each write their own, merged by
// step), a Chrome trace (--trace), and the configuration a checkpoint's
// manifest carries.
//
// The charts are drawn by uPlot 1.6.32 (MIT, assets/LICENSE.uPlot), taken
// from npm (`npm pack uplot@1.6.32`, dist/uPlot.iife.min.js and
// uPlot.min.css) and embedded with go:embed.
package report

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/troupe-ml/troupe/train"
)

var (
	//go:embed assets/uPlot.iife.min.js
	uplotJS string
	//go:embed assets/uPlot.min.css
	uplotCSS string
	//go:embed report.html
	page         string
	pageTemplate = template.Must(template.New("report").Parse(page))
)

// ErrInput is a metrics file or trace that cannot be read as one.
var ErrInput = errors.New("report: bad input")

// Input is what a report shows.
type Input struct {
	// Title names the report (its heading).
	Title string
	// Runs are the runs shown: one run's report has every chart of it;
	// several are compared, each a series of the same charts (loss,
	// held-out loss, throughput, step time, learning rate, gradient norm).
	Runs []Run
	// Trace is a pipeline trace's complete spans (nil: none).
	Trace []Span
}

// Run is one training run of a report.
type Run struct {
	// Name labels the run's series and its column of the settings (no
	// two runs of a report share one).
	Name string
	// Steps are the metrics lines in step order (a step logged twice, as
	// after a restore from a checkpoint, keeps its last line).
	Steps []train.StepMetrics
	// Config is the run's configuration (nil: not known; the report then
	// shows what the metrics lines carry of it, and only that).
	Config *train.Config
	// ConfigFrom says where Config came from (a file, troupe train).
	ConfigFrom string
	// Sample is text the trained model wrote (nil: none; a language model
	// whose data has a tokenizer gets one from troupe train --report).
	Sample *Sample
}

// Sample is a continuation a trained language model generated from the
// start of a held-out sequence, decoded with the data's tokenizer.
type Sample struct {
	// Step is the step whose weights wrote it.
	Step int
	// Data names the dataset the prompt came from.
	Data string
	// Prompt is the given text; Text what the model wrote after it.
	Prompt, Text string
	// How says how it was decoded ("greedy").
	How string
}

// Span is one complete span of a trace: a stage's pass over a
// micro-batch.
type Span struct {
	Name string  `json:"name"`
	Cat  string  `json:"cat"`
	Row  string  `json:"row"` // the process and thread's name, or their ids
	Ts   float64 `json:"ts"`  // µs
	Dur  float64 `json:"dur"` // µs
}

// ReadMetrics reads metrics lines from path: a --metrics-out file, or a
// directory whose *.jsonl files (an elastic job's nodes) are merged by
// step. In a directory an empty file is a node that led no step; a file
// given alone must hold steps.
func ReadMetrics(path string) ([]train.StepMetrics, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	files := []string{path}
	if fi.IsDir() {
		if files, err = filepath.Glob(filepath.Join(path, "*.jsonl")); err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("%w: %s holds no *.jsonl metrics files", ErrInput, path)
		}
	}
	byStep := map[int]train.StepMetrics{}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		err = readLines(f, name, byStep)
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	if len(byStep) == 0 {
		if fi.IsDir() {
			return nil, fmt.Errorf("%w: %s: its *.jsonl files hold no metrics lines", ErrInput, path)
		}
		return nil, fmt.Errorf("%w: %s holds no metrics lines (troupe train --metrics-out writes one per step)", ErrInput, path)
	}
	out := make([]train.StepMetrics, 0, len(byStep))
	for _, m := range byStep {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Step < out[j].Step })
	return out, nil
}

// maxLine bounds a metrics line (one is about 1 KiB; a world of
// thousands of ranks adds their compute times).
const maxLine = 1 << 24

// readLines reads the metrics lines of r, the file name, into byStep; an
// error names the file and the line.
func readLines(r io.Reader, name string, byStep map[int]train.StepMetrics) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), maxLine)
	n := 0
	for sc.Scan() {
		n++
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		m, err := ParseLine(sc.Bytes())
		if err != nil {
			return fmt.Errorf("%s line %d: %w", name, n, err)
		}
		byStep[m.Step] = m
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return fmt.Errorf("%w: %s line %d: longer than %d bytes: not a metrics line", ErrInput, name, n+1, maxLine)
	} else if err != nil {
		return fmt.Errorf("%s line %d: %w", name, n+1, err)
	}
	return nil
}

// ParseLine reads one metrics line.
func ParseLine(b []byte) (train.StepMetrics, error) {
	var m train.StepMetrics
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%w: not a metrics line: %v", ErrInput, err)
	}
	if m.Step < 1 {
		return m, fmt.Errorf("%w: a metrics line without a step", ErrInput)
	}
	return m, nil
}

// ReadTrace reads a Chrome trace's complete spans, each on the row of its
// process and thread (named by their metadata events where present).
func ReadTrace(r io.Reader) ([]Span, error) {
	var doc struct {
		TraceEvents []struct {
			Name string          `json:"name"`
			Cat  string          `json:"cat"`
			Ph   string          `json:"ph"`
			Ts   float64         `json:"ts"`
			Dur  float64         `json:"dur"`
			Pid  int             `json:"pid"`
			Tid  int             `json:"tid"`
			Args json.RawMessage `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: not a trace: %v", ErrInput, err)
	}
	procs, threads := map[int]string{}, map[[2]int]string{}
	for _, e := range doc.TraceEvents {
		if e.Ph != "M" {
			continue
		}
		var a struct{ Name string }
		if json.Unmarshal(e.Args, &a) != nil || a.Name == "" {
			continue
		}
		switch e.Name {
		case "process_name":
			procs[e.Pid] = a.Name
		case "thread_name":
			threads[[2]int{e.Pid, e.Tid}] = a.Name
		}
	}
	var out []Span
	for _, e := range doc.TraceEvents {
		if e.Ph != "X" {
			continue
		}
		row := threads[[2]int{e.Pid, e.Tid}]
		if row == "" {
			row = fmt.Sprintf("pid %d tid %d", e.Pid, e.Tid)
		}
		if p := procs[e.Pid]; p != "" {
			row = p + " / " + row
		}
		out = append(out, Span{Name: e.Name, Cat: e.Cat, Row: row, Ts: e.Ts, Dur: e.Dur})
	}
	return out, nil
}

// Write writes in's report to w.
func Write(w io.Writer, in Input) error {
	if len(in.Runs) == 0 {
		return fmt.Errorf("%w: no run to report", ErrInput)
	}
	type pageRun struct {
		Name  string              `json:"name"`
		Steps []train.StepMetrics `json:"steps"`
	}
	type fullConfig struct {
		Run, From, JSON string
	}
	type pageSample struct {
		Run string
		*Sample
	}
	var samples []pageSample
	runs := make([]pageRun, len(in.Runs))
	var configs []fullConfig
	for i, r := range in.Runs {
		if len(r.Steps) == 0 {
			return fmt.Errorf("%w: run %q has no steps to report", ErrInput, r.Name)
		}
		for _, o := range in.Runs[:i] {
			if o.Name == r.Name {
				return fmt.Errorf("%w: two runs are named %q", ErrInput, r.Name)
			}
		}
		runs[i] = pageRun{r.Name, r.Steps}
		if r.Sample != nil {
			samples = append(samples, pageSample{r.Name, r.Sample})
		}
		if r.Config != nil {
			b, err := json.MarshalIndent(r.Config, "", "  ")
			if err != nil {
				return fmt.Errorf("%w: run %q: its configuration: %v", ErrInput, r.Name, err)
			}
			configs = append(configs, fullConfig{r.Name, r.ConfigFrom, string(b)})
		}
	}
	data, err := json.Marshal(struct {
		Runs  []pageRun `json:"runs"`
		Trace []Span    `json:"trace"`
	}{runs, in.Trace})
	if err != nil {
		return err
	}
	title := in.Title
	if title == "" {
		title = "troupe run"
	}
	return pageTemplate.Execute(w, struct {
		Title    string
		Settings settingsTable
		Configs  []fullConfig
		Samples  []pageSample
		CSS      template.CSS
		JS, Data template.JS
	}{title, settings(in.Runs), configs, samples, template.CSS(uplotCSS), template.JS(uplotJS), template.JS(data)})
}

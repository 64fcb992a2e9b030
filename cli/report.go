package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/report"
	"github.com/troupe-ml/troupe/train"
)

func newReportCmd() *cobra.Command {
	var out, tracePath, title string
	var labels, configs []string
	cmd := &cobra.Command{
		Use:   "report METRICS.jsonl|DIR [METRICS.jsonl|DIR…] [--label NAME…] [--config CKPT_DIR|FILE…] [--trace FILE] [-o report.html]",
		Short: "One self-contained HTML report of a run (settings, loss, learning rate, gradient norm, throughput, step time, stragglers, membership, checkpoints, memory, the pipeline's timeline), or of runs compared",
		Long: `troupe report reads the metrics lines of a run (troupe train --metrics-out, or a directory
whose *.jsonl files are an elastic job's nodes' metrics, merged by step) and writes one HTML
file that needs no network access when opened (its chart library is embedded): the run's
settings, its loss and held-out loss, learning rate, gradient norm (troupe measures it where
it clips the gradients, --clip), throughput, step time, stragglers, membership, checkpoints,
memory and, with --trace (troupe train --trace), the pipeline's timeline. troupe train
--report writes the same at the end of a run.

Several inputs are compared: each run is one line in the loss, held-out loss, throughput,
step time, learning rate and gradient norm charts, named by its file's name or by --label
(one per input, in order), and the settings have a column per run, the settings the runs do
not share highlighted.

The metrics lines carry the world a run trained in (its size, dp × pp × tp, batch,
micro-batches, generations) but not its configuration. --config adds it, one per input in
order ("" for an input without one): the run's checkpoint directory (--ckpt-dir: every
checkpoint's manifest carries the configuration; settings of it this troupe does not know are
left out and named), one checkpoint or its manifest.json, or a JSON or YAML file of troupe's
train.Config fields (model, mlpsizes, batch, lr, optim: {name: sgd, momentum: 0.9}, dp, pp…;
a field it does not have is an error).`,
		Example: `  troupe train --dp 2 --metrics-out m.jsonl && troupe report m.jsonl -o report.html
  troupe report metrics-dir/ -o job.html
  troupe train --pp 2 --micro-batches 4 --trace t.json --report run.html
  troupe train --metrics-out m.jsonl --ckpt-dir ckpt --ckpt-every 100 && troupe report m.jsonl --config ckpt
  troupe report lr-1e-3.jsonl lr-3e-4.jsonl -o compare.html
  troupe report a.jsonl b.jsonl --label "dp 2" --label "dp 4" --config ckpt-a --config ckpt-b -o compare.html`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if tracePath != "" && len(args) > 1 {
				return fmt.Errorf("%w: --trace draws one run's pipeline: give one metrics input with it, not %d", errUsage, len(args))
			}
			runs, err := reportRuns(args, labels, configs)
			if err != nil {
				return err
			}
			if title == "" {
				names := make([]string, len(runs))
				for i, r := range runs {
					names[i] = r.Name
				}
				title = strings.Join(names, " vs ")
			}
			return writeRuns(out, report.Input{Title: title, Runs: runs}, tracePath)
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "report.html", "the HTML file to write")
	cmd.Flags().StringVar(&tracePath, "trace", "", "a pipeline trace (troupe train --trace) for the stages' timeline (one input only)")
	cmd.Flags().StringVar(&title, "title", "", "the report's heading (default: the runs' names)")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "a run's name in the charts and settings, once per input in order (default: the input's file name)")
	cmd.Flags().StringArrayVar(&configs, "config", nil, `a run's configuration, once per input in order ("" for none): its checkpoint directory, a checkpoint, a manifest.json, or a JSON or YAML file of its settings`)
	return cmd
}

func init() { rootCmd.AddCommand(newReportCmd()) }

// reportRuns reads each input's metrics and, where configs gives one,
// its configuration; labels (or the inputs' file names) name the runs.
func reportRuns(inputs, labels, configs []string) ([]report.Run, error) {
	if len(labels) > 0 && len(labels) != len(inputs) {
		return nil, fmt.Errorf("%w: %d --label for %d inputs: give one per input, in order", errUsage, len(labels), len(inputs))
	}
	if len(configs) > 0 && len(configs) != len(inputs) {
		return nil, fmt.Errorf("%w: %d --config for %d inputs: give one per input, in order (\"\" for an input without one)", errUsage, len(configs), len(inputs))
	}
	runs := make([]report.Run, len(inputs))
	for i, in := range inputs {
		steps, err := report.ReadMetrics(in)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errUsage, err)
		}
		runs[i] = report.Run{Name: filepath.Base(in), Steps: steps}
		if len(labels) > 0 {
			runs[i].Name = labels[i]
		}
		if len(configs) > 0 && configs[i] != "" {
			if runs[i].Config, runs[i].ConfigFrom, err = report.ReadConfig(configs[i]); err != nil {
				return nil, fmt.Errorf("%w: --config: %w", errUsage, err)
			}
		}
	}
	if len(labels) == 0 {
		// Runs in directories of their own often share a file name:
		// those are named by their paths.
		count := map[string]int{}
		for _, in := range inputs {
			count[filepath.Base(in)]++
		}
		for i, in := range inputs {
			if count[filepath.Base(in)] > 1 {
				runs[i].Name = filepath.Clean(in)
			}
		}
	}
	for i := range runs {
		for _, o := range runs[:i] {
			if o.Name == runs[i].Name {
				return nil, fmt.Errorf("%w: two runs named %q: give each input a --label", errUsage, o.Name)
			}
		}
	}
	return runs, nil
}

// writeReport writes the report of one run's steps, and of the trace at
// tracePath when set, to path, atomically. cfg is the run's
// configuration (troupe train's own; nil when unknown).
func writeReport(path, title string, steps []train.StepMetrics, tracePath string, cfg *train.Config, sample *report.Sample) error {
	run := report.Run{Name: title, Steps: steps, Sample: sample}
	if cfg != nil {
		run.Config, run.ConfigFrom = cfg, "troupe train"
	}
	return writeRuns(path, report.Input{Title: title, Runs: []report.Run{run}}, tracePath)
}

// writeRuns writes in's report (with the trace at tracePath, when set) to
// path, atomically.
func writeRuns(path string, in report.Input, tracePath string) error {
	if tracePath != "" {
		f, err := os.Open(tracePath)
		if err != nil {
			return fmt.Errorf("%w: --trace: %w", errUsage, err)
		}
		in.Trace, err = report.ReadTrace(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("--trace %s: %w", tracePath, err)
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".report-*.html")
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := report.Write(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	steps := 0
	for _, r := range in.Runs {
		steps += len(r.Steps)
	}
	logger.Info("report written", zap.String("path", path), zap.Int("runs", len(in.Runs)), zap.Int("steps", steps))
	return nil
}

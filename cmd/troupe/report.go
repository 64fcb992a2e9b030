package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/report"
	"github.com/troupe-ml/troupe/train"
)

func newReportCmd() *cobra.Command {
	var out, tracePath, title string
	cmd := &cobra.Command{
		Use:   "report RUN_DIR|METRICS.jsonl [--trace FILE] [-o report.html]",
		Short: "One self-contained HTML report of a run: loss, throughput, step time, stragglers, membership, checkpoints, memory, the pipeline's timeline",
		Long: `troupe report reads the metrics lines of a run (troupe train --metrics-out, or a directory
whose *.jsonl files are an elastic job's nodes' metrics, merged by step) and, with --trace, a
pipeline trace (troupe train --trace), and writes one HTML file that needs no network access
when opened: its chart library is embedded. troupe train --report writes the same at the end
of a run.`,
		Example: `  troupe train --dp 2 --metrics-out m.jsonl && troupe report m.jsonl -o report.html
  troupe report metrics-dir/ -o job.html
  troupe train --pp 2 --micro-batches 4 --trace t.json --report run.html`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			steps, err := report.ReadMetrics(args[0])
			if err != nil {
				return fmt.Errorf("%w: %w", errUsage, err)
			}
			if title == "" {
				title = filepath.Base(args[0])
			}
			return writeReport(out, title, steps, tracePath)
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "report.html", "the HTML file to write")
	cmd.Flags().StringVar(&tracePath, "trace", "", "a pipeline trace (troupe train --trace) for the stages' timeline")
	cmd.Flags().StringVar(&title, "title", "", "the report's heading (default: the input's name)")
	return cmd
}

func init() { rootCmd.AddCommand(newReportCmd()) }

// writeReport writes the report of steps (and of the trace at tracePath,
// when set) to path, atomically.
func writeReport(path, title string, steps []train.StepMetrics, tracePath string) error {
	in := report.Input{Title: title, Runs: []report.Run{{Name: title, Steps: steps}}}
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
	logger.Info("report written", zap.String("path", path), zap.Int("steps", len(steps)))
	return nil
}

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/troupe-ml/troupe/train"
)

// benchTrainResult is one world's throughput.
type benchTrainResult struct {
	World       string  `json:"world"`
	Workers     int     `json:"workers"`
	Procs       int     `json:"procs"`
	Steps       int     `json:"steps_timed"`
	SamplesPerS float64 `json:"samples_per_s"`
	TokensPerS  float64 `json:"tokens_per_s,omitempty"`
	StepMsMed   float64 `json:"step_ms_median"`
	ComputeMs   float64 `json:"compute_ms_median"`
	CommMs      float64 `json:"comm_ms_median"`
	Hidden      float64 `json:"comm_hidden_fraction"`
	// Efficiency is samples/s over (workers × the first world's samples/s
	// per worker): 1 is perfect scaling.
	Efficiency float64 `json:"scaling_efficiency"`
	FinalLoss  float64 `json:"final_loss"`
}

func newBenchTrainCmd() *cobra.Command {
	f := &trainFlags{}
	var worlds string
	var warmup int
	cmd := &cobra.Command{
		Use:   "train [training flags]",
		Short: "Training throughput of one configuration at several world sizes, and the scaling efficiency",
		Example: `  troupe bench train --model mlp --layers 784,1024,1024,10 --data synthetic-mlp --batch 256 \
      --optimizer sgd --lr 0.01 --momentum 0.9 --steps 60 --warmup-steps 10 --worlds dp1,dp2,procs2
  troupe bench train --worlds dp1,dp2 --steps 40 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base, err := f.config(cmd.Flags())
			if err != nil {
				return err
			}
			if warmup < 0 || warmup >= base.Steps {
				return fmt.Errorf("%w: --warmup-steps %d must be in [0, --steps %d)", errUsage, warmup, base.Steps)
			}
			var results []benchTrainResult
			for _, w := range strings.Split(worlds, ",") {
				cfg := base
				bw, err := parseWorld(w)
				if err != nil {
					return err
				}
				cfg.DP, cfg.TP, cfg.Procs = bw.dp, bw.tp, bw.procs
				n := bw.workers()
				cfg.Save, cfg.EvalEvery, cfg.EvalBatches = "", 0, 1
				dir, err := os.MkdirTemp("", "troupe-bench-train-")
				if err != nil {
					return err
				}
				cfg.MetricsOut = filepath.Join(dir, "m.jsonl")
				sum, err := train.Run(cmd.Context(), cfg, train.Options{Logger: logger, WorkerCommand: workerCommand()})
				if err != nil {
					os.RemoveAll(dir)
					return fmt.Errorf("world %s: %w", w, err)
				}
				r, err := timedResult(cfg.MetricsOut, warmup, base.Batch)
				os.RemoveAll(dir)
				if err != nil {
					return err
				}
				r.World, r.Workers, r.Procs, r.FinalLoss = w, n, cfg.Procs, sum.FinalLoss
				if sum.TokensPerS > 0 {
					r.TokensPerS = r.SamplesPerS * sum.TokensPerS / sum.SamplesPerS
				}
				results = append(results, r)
			}
			per := results[0].SamplesPerS / float64(results[0].Workers)
			for i := range results {
				results[i].Efficiency = results[i].SamplesPerS / (float64(results[i].Workers) * per)
			}
			if f.jsonOut {
				return json.NewEncoder(os.Stdout).Encode(map[string]any{"model": base.Model, "batch": base.Batch, "results": results})
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "world\tsamples/s\ttokens/s\tstep ms\tcompute ms\tcomm ms\thidden\tefficiency\t")
			for _, r := range results {
				fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.0f%%\t%.2f\t\n", r.World, r.SamplesPerS, r.TokensPerS,
					r.StepMsMed, r.ComputeMs, r.CommMs, 100*r.Hidden, r.Efficiency)
			}
			return tw.Flush()
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringVar(&worlds, "worlds", "dp1,dp2", "comma-separated worlds: dpN (N replicas as worker actors in this process), tpN (N tensor-parallel shards), procsN (N worker processes), combined with x: dp2xtp2, procs2xtp2")
	cmd.Flags().IntVar(&warmup, "warmup-steps", 5, "steps left out of the timing")
	return cmd
}

func init() { benchCmd.AddCommand(newBenchTrainCmd()) }

// benchWorld is one --worlds entry: dp replicas of tp shards, as worker
// actors of this process or as procs worker processes.
type benchWorld struct{ dp, tp, procs int }

func (w benchWorld) workers() int {
	if w.procs > 0 {
		return w.procs
	}
	return w.dp * w.tp
}

// parseWorld reads dpN, tpN and procsN joined by x (dp2xtp2, procs4xtp2).
func parseWorld(s string) (benchWorld, error) {
	w := benchWorld{dp: 1, tp: 1}
	bad := fmt.Errorf("%w: --worlds entry %q: want dpN, tpN or procsN (N ≥ 1), joined by x (dp2xtp2)", errUsage, s)
	seen := map[string]bool{}
	for _, part := range strings.Split(s, "x") {
		ok := false
		for _, kind := range []string{"procs", "dp", "tp"} {
			rest, found := strings.CutPrefix(part, kind)
			if !found {
				continue
			}
			n, err := strconv.Atoi(rest)
			if err != nil || n < 1 || seen[kind] {
				return w, bad
			}
			seen[kind], ok = true, true
			switch kind {
			case "procs":
				w.procs = n
			case "dp":
				w.dp = n
			case "tp":
				w.tp = n
			}
			break
		}
		if !ok {
			return w, bad
		}
	}
	return w, nil // with procsN and no dpN, troupe train derives dp
}

// timedResult reads a run's metrics and times the steps after warmup:
// samples/s = batch × steps / Σ step time, as the PyTorch anchors do.
func timedResult(path string, warmup, batch int) (benchTrainResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return benchTrainResult{}, err
	}
	defer f.Close()
	var steps, compute, comm []float64
	var hidden float64
	sc := bufio.NewScanner(f)
	for i := 0; sc.Scan(); i++ {
		if i < warmup {
			continue
		}
		var m train.StepMetrics
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return benchTrainResult{}, fmt.Errorf("reading %s: %w", path, err)
		}
		steps, compute, comm = append(steps, m.StepMs), append(compute, m.ComputeMs), append(comm, m.CommMs)
		hidden += m.OverlapFraction
	}
	if len(steps) == 0 {
		return benchTrainResult{}, fmt.Errorf("no timed steps in %s", path)
	}
	var total float64
	for _, s := range steps {
		total += s
	}
	return benchTrainResult{
		Steps: len(steps), SamplesPerS: float64(batch*len(steps)) / (total / 1e3),
		StepMsMed: medianOf(steps), ComputeMs: medianOf(compute), CommMs: medianOf(comm), Hidden: hidden / float64(len(steps)),
	}, nil
}

func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

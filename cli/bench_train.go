package cli

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
	// ZeRO is the world's ZeRO stage (0: none); Params the model's
	// parameter count.
	ZeRO   int `json:"zero,omitempty"`
	Params int `json:"params"`
	// The most bytes a rank held of weights, gradients and optimizer
	// state between steps and at its peak within one (train.StepMetrics),
	// and of activations, over the timed steps.
	ParamBytes     int64 `json:"param_bytes"`
	GradHeldBytes  int64 `json:"grad_held_bytes"`
	OptimizerBytes int64 `json:"optimizer_bytes"`
	PeakParamBytes int64 `json:"peak_param_bytes"`
	PeakGradBytes  int64 `json:"peak_grad_bytes"`
	PeakActBytes   int64 `json:"peak_activation_bytes"`
	// The bytes a rank sent per step, by collective kind (median).
	SentAllReduceBytes     int64 `json:"sent_all_reduce_bytes"`
	SentReduceScatterBytes int64 `json:"sent_reduce_scatter_bytes"`
	SentAllGatherBytes     int64 `json:"sent_all_gather_bytes"`
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
			if f.printConfig {
				return writeConfig(cmd.OutOrStdout(), cmd)
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
				if bw.zero >= 0 {
					cfg.Zero = bw.zero
				}
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
				r.World, r.Workers, r.Procs, r.FinalLoss, r.ZeRO, r.Params = w, n, cfg.Procs, sum.FinalLoss, cfg.Zero, sum.Params
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
			fmt.Fprintln(tw, "world\tsamples/s\ttokens/s\tstep ms\tcompute ms\tcomm ms\thidden\tefficiency\tstate MiB\tpeak MiB\tsent MiB\t")
			for _, r := range results {
				fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.0f%%\t%.2f\t%.2f\t%.2f\t%.2f\t\n", r.World, r.SamplesPerS, r.TokensPerS,
					r.StepMsMed, r.ComputeMs, r.CommMs, 100*r.Hidden, r.Efficiency, mib(r.ParamBytes+r.GradHeldBytes+r.OptimizerBytes),
					mib(r.PeakParamBytes+r.PeakGradBytes+r.OptimizerBytes), mib(r.SentAllReduceBytes+r.SentReduceScatterBytes+r.SentAllGatherBytes))
			}
			return tw.Flush()
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringVar(&worlds, "worlds", "dp1,dp2", "comma-separated worlds: dpN (N replicas as worker actors in this process), tpN (N tensor-parallel shards), procsN (N worker processes), zeroS (ZeRO stage S, else --zero's), combined with x: dp2xtp2, procs2xtp2, dp4xzero3")
	cmd.Flags().IntVar(&warmup, "warmup-steps", 5, "steps run before the timing starts (not the learning-rate warm-up: that is --lr-warmup)")
	inGroup(cmd.Flags(), groupBench, "worlds", "warmup-steps")
	return cmd
}

func init() { benchCmd.AddCommand(newBenchTrainCmd()) }

// benchWorld is one --worlds entry: dp replicas of tp shards, as worker
// actors of this process or as procs worker processes.
type benchWorld struct{ dp, tp, procs, zero int }

func (w benchWorld) workers() int {
	if w.procs > 0 {
		return w.procs
	}
	return w.dp * w.tp
}

// parseWorld reads dpN, tpN, procsN and zeroS joined by x (dp2xtp2,
// procs4xtp2, dp4xzero3); zero is −1 without zeroS.
func parseWorld(s string) (benchWorld, error) {
	w := benchWorld{dp: 1, tp: 1, zero: -1}
	bad := fmt.Errorf("%w: --worlds entry %q: want dpN, tpN or procsN (N ≥ 1) and zeroS (S 0 to 3), joined by x (dp2xtp2, dp4xzero3)", errUsage, s)
	seen := map[string]bool{}
	for _, part := range strings.Split(s, "x") {
		ok := false
		for _, kind := range []string{"procs", "dp", "tp", "zero"} {
			rest, found := strings.CutPrefix(part, kind)
			if !found {
				continue
			}
			n, err := strconv.Atoi(rest)
			if err != nil || n < 1 && kind != "zero" || n < 0 || n > 3 && kind == "zero" || seen[kind] {
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
			case "zero":
				w.zero = n
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
	var r benchTrainResult
	var ar, rs, ag []float64
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
		r.ParamBytes, r.GradHeldBytes, r.OptimizerBytes = max(r.ParamBytes, m.ParamBytes), max(r.GradHeldBytes, m.GradHeldBytes), max(r.OptimizerBytes, m.OptimizerBytes)
		r.PeakParamBytes, r.PeakGradBytes, r.PeakActBytes = max(r.PeakParamBytes, m.PeakParamBytes), max(r.PeakGradBytes, m.PeakGradBytes), max(r.PeakActBytes, m.PeakActBytes)
		ar, rs, ag = append(ar, float64(m.SentAllReduceBytes)), append(rs, float64(m.SentReduceScatterBytes)), append(ag, float64(m.SentAllGatherBytes))
	}
	if len(steps) == 0 {
		return benchTrainResult{}, fmt.Errorf("no timed steps in %s", path)
	}
	var total float64
	for _, s := range steps {
		total += s
	}
	r.Steps, r.SamplesPerS = len(steps), float64(batch*len(steps))/(total/1e3)
	r.StepMsMed, r.ComputeMs, r.CommMs, r.Hidden = medianOf(steps), medianOf(compute), medianOf(comm), hidden/float64(len(steps))
	r.SentAllReduceBytes, r.SentReduceScatterBytes, r.SentAllGatherBytes = int64(medianOf(ar)), int64(medianOf(rs)), int64(medianOf(ag))
	return r, nil
}

func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

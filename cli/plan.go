package cli

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/troupe-ml/troupe/plan"
)

func init() { rootCmd.AddCommand(newPlanCmd()) }

// newPlanCmd builds `troupe plan` and its sub-commands. It returns a fresh
// tree each call: cobra keeps flag values between executions, so tests build
// one per case.
func newPlanCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Predict memory, communication, speedup and pipeline bubbles before renting devices",
		Long: `troupe plan answers, before any device is rented, whether a model's training
state fits, how many devices it needs, what an all-reduce costs, what speedup
data parallelism really gives and how much a pipeline idles; troupe plan check
holds a real run's metrics against the same model.

Sizes take decimal units as vendors quote them (80GB = 80·10⁹ bytes) or binary
ones (512MiB); bandwidths 25GB/s or 200Gbps (= 25·10⁹ bytes/s); counts 175e9,
7.5B, 500M. Every sub-command prints a table, or one JSON object with --json.
See docs/PLAN.md.`,
		Args:          cobra.ArbitraryArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return planUsagef("unknown sub-command %q for troupe plan: want memory, allreduce, speedup, pipeline, tp or check", args[0])
			}
			return cmd.Help()
		},
	}
	// Flag values that do not parse (an unknown unit, a negative size) are
	// command-line errors: exit status 2, like every other usage error.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return fmt.Errorf("%w: %v", errUsage, err)
	})
	cmd.AddCommand(newPlanMemoryCmd(), newPlanAllReduceCmd(), newPlanSpeedupCmd(), newPlanPipelineCmd(), newPlanTPCmd(), newPlanCheckCmd())
	return cmd
}

func newPlanMemoryCmd() *cobra.Command {
	var (
		params        planCountFlag
		deviceMem     planSizeFlag
		bytesPerParam float64
		dp, zero      int
		k             float64
		weightBytes   float64
		gradBytes     float64
		asJSON        bool
		precision     string
		optimizer     string
	)
	cmd := &cobra.Command{
		Use:   "memory --params N [--bytes-per-param B] [--device-mem M] [--dp D --zero 0|1|2|3 [--k K]]",
		Short: "Model-state memory: the total and the devices it needs, or one device's share under ZeRO",
		Long: `Without --zero: the total N·B (B = 16 for mixed-precision Adam: fp16 weight 2 +
fp16 gradient 2 + fp32 master weight, momentum and variance 4+4+4) and, with
--device-mem, the fewest devices whose memories together hold it.

With --zero S and --dp D (the ZeRO paper, K = 12 optimizer bytes per parameter):
stage 0 keeps (2+2+K)·N on every device, stage 1 (2+2+K/D)·N, stage 2
(2+(2+K)/D)·N, stage 3 (2+2+K)·N/D; with --device-mem, whether that fits.

With --precision fp32|bf16|fp16|all (and --dp D, --zero S for one stage):
troupe's own layout per device and parameter, for each precision and ZeRO
stage: fp32 weights (the masters under mixed precision), the bf16/fp16
compute copies (whole below stage 3), fp32 gradients, the optimizer's state
(--optimizer adamw: 8 bytes, sgd: 4), beside the ZeRO paper's figure.

Model states only: activations, communication buffers and fragmentation come
on top.`,
		Args: planNoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			if err := planRequireFlags(cmd, "params"); err != nil {
				return err
			}
			if err := planPositiveSize(f.Changed("device-mem"), "device-mem", deviceMem.v); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if f.Changed("precision") {
				return runPlanPrecision(cmd, precision, optimizer, dp, zero, params.v, asJSON)
			}
			if f.Changed("optimizer") {
				return planUsagef("--optimizer applies only with --precision")
			}
			if !f.Changed("zero") {
				for _, name := range []string{"dp", "k", "weight-bytes", "grad-bytes"} {
					if f.Changed(name) {
						return planUsagef("--%s applies only with --zero (use --zero 0 for plain data parallelism)", name)
					}
				}
				if !(bytesPerParam > 0) || math.IsInf(bytesPerParam, 0) {
					return planUsagef("--bytes-per-param %v must be positive and finite", bytesPerParam)
				}
				r, err := plan.Memory(plan.MemoryConfig{Params: params.v, BytesPerParam: bytesPerParam, DeviceMem: deviceMem.v})
				if err != nil {
					return planErr(err)
				}
				if asJSON {
					return writeJSON(out, r)
				}
				return printPlanMemory(out, r)
			}
			if f.Changed("bytes-per-param") {
				return planUsagef("--bytes-per-param does not apply with --zero: ZeRO counts 2 + 2 + K bytes per parameter; set K with --k")
			}
			if zero < 0 || zero > 3 {
				return planUsagef("--zero %d: want 0, 1, 2 or 3", zero)
			}
			if !f.Changed("dp") {
				return planUsagef("--zero needs --dp D, the number of data-parallel devices the states are sharded over")
			}
			if dp <= 0 {
				return planUsagef("--dp %d must be positive", dp)
			}
			if !(k >= 0) || math.IsInf(k, 0) {
				return planUsagef("--k %v must be finite and not negative", k)
			}
			if !(weightBytes > 0) || !(gradBytes > 0) || math.IsInf(weightBytes+gradBytes, 0) {
				return planUsagef("--weight-bytes %v and --grad-bytes %v must be positive and finite", weightBytes, gradBytes)
			}
			r, err := plan.ZeRO(plan.ZeROConfig{Params: params.v, Stage: zero, DP: dp, K: k, WeightBytes: weightBytes, GradBytes: gradBytes, DeviceMem: deviceMem.v})
			if err != nil {
				return planErr(err)
			}
			if asJSON {
				return writeJSON(out, r)
			}
			return printPlanZeRO(out, r)
		},
	}
	f := cmd.Flags()
	f.Var(&params, "params", "number of parameters N, e.g. 1.5B, 175e9, 500M")
	f.Float64Var(&bytesPerParam, "bytes-per-param", plan.DefaultBytesPerParam, "bytes of training state per parameter B (16 = mixed-precision Adam)")
	f.Var(&deviceMem, "device-mem", "one device's memory M, e.g. 80GB, 40GiB")
	f.IntVar(&dp, "dp", 0, "data-parallel devices D to shard over (with --zero)")
	f.IntVar(&zero, "zero", 0, "ZeRO stage 0, 1, 2 or 3")
	f.Float64Var(&k, "k", plan.DefaultOptimizerBytesPerParam, "optimizer bytes per parameter K (with --zero; 12 = Adam's fp32 master, momentum, variance)")
	f.Float64Var(&weightBytes, "weight-bytes", 2, "bytes of a weight (with --zero; 2 = fp16 as in the paper, 4 = fp32 as troupe trains)")
	f.Float64Var(&gradBytes, "grad-bytes", 2, "bytes of a gradient (with --zero; 2 = fp16, 4 = fp32)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	f.StringVar(&precision, "precision", "", "troupe's own layout: fp32, bf16, fp16 or all, per ZeRO stage (with --dp; --zero for one stage)")
	f.StringVar(&optimizer, "optimizer", "adamw", "with --precision: adamw (8 optimizer bytes per parameter) or sgd (4)")
	return cmd
}

// runPlanPrecision prints troupe's bytes per parameter per precision and
// ZeRO stage.
func runPlanPrecision(cmd *cobra.Command, precision, optimizer string, dp, zero int, params int64, asJSON bool) error {
	f := cmd.Flags()
	for _, name := range []string{"bytes-per-param", "k", "weight-bytes", "grad-bytes"} {
		if f.Changed(name) {
			return planUsagef("--%s does not apply with --precision: troupe's layout fixes the bytes", name)
		}
	}
	if !f.Changed("dp") {
		return planUsagef("--precision needs --dp D, the data-parallel replicas ZeRO shards over")
	}
	precisions := []string{precision}
	if precision == "all" {
		precisions = []string{"fp32", "bf16", "fp16"}
	}
	stages := []int{0, 1, 2, 3}
	if f.Changed("zero") {
		stages = []int{zero}
	}
	optBytes := map[string]float64{"adamw": 8, "sgd": 4}[optimizer]
	if optBytes == 0 {
		return planUsagef("--optimizer %q: want adamw or sgd", optimizer)
	}
	rows, err := plan.PrecisionTable(precisions, stages, dp, optBytes, params)
	if err != nil {
		return planErr(err)
	}
	if asJSON {
		return writeJSON(cmd.OutOrStdout(), rows)
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "precision\tZeRO\tweights\tcompute copy\tgradients\toptimizer\tbytes/param\tZeRO paper\tper device")
	for _, r := range rows {
		paper := "—"
		if r.Paper > 0 {
			paper = strconv.FormatFloat(r.Paper, 'g', 4, 64)
		}
		g := func(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Precision, r.Stage, g(r.Weight), g(r.Compute), g(r.Gradient), g(r.Optimizer), g(r.Total), paper, planBytesText(r.DeviceBytes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "bytes per parameter on one of %d replicas; model states only (activations and buffers come on top)\n", dp)
	return err
}

func printPlanMemory(w io.Writer, r plan.MemoryResult) error {
	t := newPlanTable(w)
	t.row("parameters", planCountText(r.Params))
	t.row("bytes per parameter", strconv.FormatFloat(r.BytesPerParam, 'f', -1, 64))
	t.row("total", planBytesText(r.TotalBytes))
	if r.DeviceMemBytes > 0 {
		t.row("device memory", planBytesText(float64(r.DeviceMemBytes)))
		t.row("min devices", fmt.Sprintf("%d (ceil(total / device memory), nothing replicated)", r.MinDevices))
	}
	t.row("note", "model states only: activations and buffers come on top")
	return t.flush()
}

var planZeROStageText = [...]string{
	"nothing sharded (plain data parallelism)",
	"optimizer states sharded",
	"optimizer states and gradients sharded",
	"optimizer states, gradients and weights sharded",
}

func printPlanZeRO(w io.Writer, r plan.ZeROResult) error {
	t := newPlanTable(w)
	t.row("parameters", planCountText(r.Params))
	t.row("ZeRO stage", fmt.Sprintf("%d over %d data-parallel devices: %s", r.Stage, r.DP, planZeROStageText[r.Stage]))
	k := strconv.FormatFloat(r.K, 'f', -1, 64)
	wg := r.BytesPerParam - r.K
	t.row("bytes per parameter", fmt.Sprintf("%s (%s weight and gradient + %s optimizer)", strconv.FormatFloat(r.BytesPerParam, 'f', -1, 64), strconv.FormatFloat(wg, 'f', -1, 64), k))
	t.row("all states, once", planBytesText(r.TotalBytes))
	t.row("weights", planBytesText(r.WeightBytes)+" per device")
	t.row("gradients", planBytesText(r.GradientBytes)+" per device")
	t.row("optimizer states", planBytesText(r.OptimizerBytes)+" per device")
	t.row("per device", planBytesText(r.PerDeviceBytes))
	if r.Fits != nil {
		t.row("device memory", planBytesText(float64(r.DeviceMemBytes)))
		verdict := "no"
		if *r.Fits {
			verdict = "yes"
		}
		t.row("fits", fmt.Sprintf("%s: %s of device memory", verdict, plan.FormatPercent(r.PerDeviceBytes/float64(r.DeviceMemBytes))))
	}
	t.row("note", "model states only: activations and buffers come on top")
	return t.flush()
}

func newPlanAllReduceCmd() *cobra.Command {
	var (
		size      planSizeFlag
		bandwidth planBandwidthFlag
		ranks     int
		algorithm string
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "allreduce --bytes S --ranks P [--bandwidth BW] [--algorithm ring|naive]",
		Short: "Bytes each rank sends in one all-reduce, and the time at a bandwidth",
		Long: `ring: every rank sends (and receives) 2(P−1)/P·S, in time 2(P−1)/P·S / BW on
full-duplex links. naive: a root receives (P−1)·S, sums, then sends (P−1)·S;
bytes_per_rank is the root's sent bytes (the bottleneck) and the time is
2(P−1)·S / BW because the broadcast waits for the gather. The model counts
bandwidth only, no per-message latency.`,
		Args: planNoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			if err := planRequireFlags(cmd, "bytes", "ranks"); err != nil {
				return err
			}
			if ranks <= 0 {
				return planUsagef("--ranks %d must be positive", ranks)
			}
			if err := planPositiveBandwidth(f.Changed("bandwidth"), bandwidth.v); err != nil {
				return err
			}
			alg, err := plan.ParseAlgorithm(algorithm)
			if err != nil {
				return planUsagef("--algorithm %q: want ring or naive", algorithm)
			}
			r, err := plan.AllReduce(plan.AllReduceConfig{Bytes: size.v, Ranks: ranks, Bandwidth: bandwidth.v, Algorithm: alg})
			if err != nil {
				return planErr(err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), r)
			}
			return printPlanAllReduce(cmd.OutOrStdout(), r)
		},
	}
	f := cmd.Flags()
	f.Var(&size, "bytes", "buffer size S on every rank, e.g. 8GB, 512MiB")
	f.IntVar(&ranks, "ranks", 0, "number of ranks P")
	f.Var(&bandwidth, "bandwidth", "link bandwidth, e.g. 25GB/s or 200Gbps")
	f.StringVar(&algorithm, "algorithm", string(plan.Ring), "ring or naive")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

func printPlanAllReduce(w io.Writer, r plan.AllReduceResult) error {
	t := newPlanTable(w)
	buffer := fmt.Sprintf("%s on each of %d ranks", planBytesText(float64(r.Bytes)), r.Ranks)
	switch r.Algorithm {
	case plan.Ring:
		t.row("algorithm", "ring (reduce-scatter, then all-gather)")
		t.row("buffer", buffer)
		t.row("bytes per rank", planBytesText(r.BytesPerRank)+": 2(P−1)/P·S sent, as much received")
	case plan.Naive:
		t.row("algorithm", "naive (gather at a root, sum, broadcast)")
		t.row("buffer", buffer)
		t.row("root receives", planBytesText(*r.RootBytesReceived)+": (P−1)·S")
		t.row("root sends", planBytesText(*r.RootBytesSent)+": (P−1)·S")
		t.row("bytes per rank", planBytesText(r.BytesPerRank)+": the root's sends, the bottleneck")
	}
	if r.Seconds != nil {
		t.row("bandwidth", planBandwidthText(r.BandwidthBytesPerS))
		how := "sends and receives overlap on full-duplex links"
		if r.Algorithm == plan.Naive {
			how = "gather, then broadcast, on the root's link"
		}
		t.row("time", fmt.Sprintf("%s (%s)", plan.FormatMillis(*r.Seconds*1e3), how))
	}
	return t.flush()
}

func newPlanSpeedupCmd() *cobra.Command {
	var (
		ranks                      int
		computeMs, commMs, overlap float64
		syncEvery                  int
		gradBytes                  planSizeFlag
		bandwidth                  planBandwidthFlag
		asJSON                     bool
	)
	cmd := &cobra.Command{
		Use:   "speedup --ranks P (--comm-ms C | --grad-bytes S --bandwidth BW) --compute-ms T [--overlap F | --sync-every H]",
		Short: "Data-parallel speedup over one device for the same global batch",
		Long: `A step on P ranks takes T + (1 − F)·C: the compute, plus the part of the
all-reduce not hidden behind it. One device doing the same global batch takes
P·T. speedup = P·T / (T + (1 − F)·C), efficiency = speedup / P. With
--grad-bytes and --bandwidth, C is the ring all-reduce time of the gradients.
With --sync-every H (troupe train --sync local-sgd or diloco --sync-every H)
the replicas exchange once a round of H steps, at its last step, which waits
for it: a step pays C/H on average (the same bytes: parameters or
pseudo-gradients instead of gradients; halve --grad-bytes for
--sync-dtype bf16).`,
		Args: planNoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			if err := planRequireFlags(cmd, "ranks", "compute-ms"); err != nil {
				return err
			}
			if ranks <= 0 {
				return planUsagef("--ranks %d must be positive", ranks)
			}
			if !(computeMs > 0) || math.IsInf(computeMs, 0) {
				return planUsagef("--compute-ms %v must be positive and finite", computeMs)
			}
			if !(overlap >= 0 && overlap <= 1) {
				return planUsagef("--overlap %v must be between 0 and 1", overlap)
			}
			fromBytes := f.Changed("grad-bytes") || f.Changed("bandwidth")
			switch {
			case f.Changed("comm-ms") && fromBytes:
				return planUsagef("give either --comm-ms or --grad-bytes with --bandwidth, not both")
			case f.Changed("comm-ms"):
				if !(commMs >= 0) || math.IsInf(commMs, 0) {
					return planUsagef("--comm-ms %v must be finite and not negative", commMs)
				}
			case fromBytes:
				if err := planRequireFlags(cmd, "grad-bytes", "bandwidth"); err != nil {
					return err
				}
				if err := planPositiveBandwidth(true, bandwidth.v); err != nil {
					return err
				}
				c, err := plan.CommMsFromBytes(gradBytes.v, ranks, bandwidth.v)
				if err != nil {
					return planErr(err)
				}
				commMs = c
			default:
				return planUsagef("give --comm-ms, or --grad-bytes with --bandwidth")
			}
			if syncEvery < 1 {
				return planUsagef("--sync-every %d must be 1 or more", syncEvery)
			}
			r, err := plan.Speedup(plan.SpeedupConfig{Ranks: ranks, ComputeMs: computeMs, CommMs: commMs, Overlap: overlap, SyncEvery: syncEvery})
			if err != nil {
				return planErr(err)
			}
			if fromBytes {
				r.GradBytes, r.BandwidthBytesPerS = gradBytes.v, bandwidth.v
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), r)
			}
			return printPlanSpeedup(cmd.OutOrStdout(), r)
		},
	}
	f := cmd.Flags()
	f.IntVar(&ranks, "ranks", 0, "data-parallel ranks P")
	f.Float64Var(&computeMs, "compute-ms", 0, "one rank's compute time per step T, in milliseconds")
	f.Float64Var(&commMs, "comm-ms", 0, "all-reduce time per step C, in milliseconds")
	f.Var(&gradBytes, "grad-bytes", "gradient bytes all-reduced per step, e.g. 3GB (with --bandwidth)")
	f.Var(&bandwidth, "bandwidth", "link bandwidth, e.g. 25GB/s or 200Gbps (with --grad-bytes)")
	f.Float64Var(&overlap, "overlap", 0, "fraction F of the communication hidden behind compute, 0 to 1")
	f.IntVar(&syncEvery, "sync-every", 1, "exchange once every H steps (local SGD, DiLoCo); 1: every step")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

func printPlanSpeedup(w io.Writer, r plan.SpeedupResult) error {
	t := newPlanTable(w)
	t.row("ranks", strconv.Itoa(r.Ranks))
	t.row("compute", plan.FormatMillis(r.ComputeMs)+" per step")
	comm := plan.FormatMillis(r.CommMs)
	if r.BandwidthBytesPerS > 0 {
		comm += fmt.Sprintf(" (ring all-reduce of %s at %s)", plan.FormatBytes(float64(r.GradBytes)), plan.FormatBandwidth(r.BandwidthBytesPerS))
	}
	t.row("communication", comm)
	if r.SyncEvery > 1 {
		t.row("rounds", fmt.Sprintf("one exchange every %d steps: %s per step on average", r.SyncEvery, plan.FormatMillis(r.ExposedCommMs)))
	} else {
		t.row("overlap", fmt.Sprintf("%s hidden, %s exposed", plan.FormatPercent(r.Overlap), plan.FormatMillis(r.ExposedCommMs)))
	}
	t.row("step", plan.FormatMillis(r.StepMs)+" (compute + exposed communication)")
	t.row("serial", plan.FormatMillis(r.SerialMs)+" (one device, same global batch)")
	t.row("speedup", strconv.FormatFloat(r.Speedup, 'f', 2, 64)+"×")
	t.row("efficiency", plan.FormatPercent(r.Efficiency))
	return t.flush()
}

func newPlanPipelineCmd() *cobra.Command {
	var (
		stages, micro int
		asJSON        bool
	)
	cmd := &cobra.Command{
		Use:   "pipeline --stages P --micro-batches M",
		Short: "Pipeline bubble: the share of each stage's step spent idle, (P − 1)/(M + P − 1)",
		Args:  planNoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := planRequireFlags(cmd, "stages", "micro-batches"); err != nil {
				return err
			}
			if stages <= 0 {
				return planUsagef("--stages %d must be positive", stages)
			}
			if micro <= 0 {
				return planUsagef("--micro-batches %d must be positive", micro)
			}
			r, err := plan.Pipeline(plan.PipelineConfig{Stages: stages, MicroBatches: micro})
			if err != nil {
				return planErr(err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), r)
			}
			t := newPlanTable(cmd.OutOrStdout())
			t.row("stages", strconv.Itoa(r.Stages))
			t.row("micro-batches", strconv.Itoa(r.MicroBatches))
			t.row("slots", fmt.Sprintf("%d (M + P − 1 micro-batch times, forward and backward each)", r.Slots))
			t.row("bubble", fmt.Sprintf("%s (%d of %d slots idle on every stage, GPipe and 1F1B alike)", plan.FormatPercent(r.BubbleFraction), r.Stages-1, r.Slots))
			t.row("busy", plan.FormatPercent(r.BusyFraction))
			return t.flush()
		},
	}
	f := cmd.Flags()
	f.IntVar(&stages, "stages", 0, "pipeline stages P")
	f.IntVar(&micro, "micro-batches", 0, "micro-batches per step M")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

func newPlanCheckCmd() *cobra.Command {
	var (
		metrics    string
		bandwidth  planBandwidthFlag
		generation int64
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "check --metrics FILE.jsonl [--bandwidth BW] [--generation G]",
		Short: "Hold a run's measured step, compute and communication times against the model",
		Long: `Reads the per-step metrics of troupe train --metrics-out and takes the medians of
step_ms, compute_ms, comm_ms (and bubble_ms, overlap_fraction when present) over
one generation's steps, skipping the first as warm-up when more than two
remain. It predicts the step as (compute + (1 − overlap)·comm) / (1 − bubble),
bubble = (pp − 1)/(micro_batches + pp − 1), and prints measured beside
predicted with the relative error.

With --bandwidth, the communication is predicted too, by the ring model from
grad_bytes over dp ranks; without it the measured communication is the input
and only the composition of the step is checked. When the file gives
grad_bytes and dp, the all-reduce's achieved bus bandwidth is printed: the
figure to use as --bandwidth in the next plan.`,
		Args: planNoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			if err := planRequireFlags(cmd, "metrics"); err != nil {
				return err
			}
			if err := planPositiveBandwidth(f.Changed("bandwidth"), bandwidth.v); err != nil {
				return err
			}
			cfg := plan.DefaultCheckConfig()
			cfg.Bandwidth = bandwidth.v
			if f.Changed("generation") {
				if generation < 0 {
					return planUsagef("--generation %d must not be negative", generation)
				}
				cfg.Generation = generation
			}
			file, err := os.Open(metrics)
			if err != nil {
				return fmt.Errorf("--metrics: %w", err)
			}
			defer file.Close()
			recs, err := plan.ReadMetrics(file)
			if err != nil {
				return fmt.Errorf("%s: %w", metrics, err)
			}
			r, err := plan.Check(recs, cfg)
			if err != nil {
				return fmt.Errorf("%s: %w", metrics, err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), struct {
					File string `json:"file"`
					plan.CheckResult
				}{metrics, r})
			}
			return printPlanCheck(cmd.OutOrStdout(), metrics, r)
		},
	}
	f := cmd.Flags()
	f.StringVar(&metrics, "metrics", "", "metrics file written by troupe train --metrics-out")
	f.Var(&bandwidth, "bandwidth", "predict communication by the ring model at this bandwidth, e.g. 25GB/s")
	f.Int64Var(&generation, "generation", 0, "generation to check (default: the last in the file)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

func printPlanCheck(w io.Writer, path string, r plan.CheckResult) error {
	t := newPlanTable(w)
	steps := fmt.Sprintf("generation %d, steps %d–%d (%d used", r.Generation, r.FirstStep, r.LastStep, r.Steps)
	if r.WarmupSkipped > 0 {
		steps += ", the first skipped as warm-up"
	}
	t.row("metrics", path)
	t.row("steps", steps+"; medians)")
	var conf []string
	if r.World > 0 {
		conf = append(conf, fmt.Sprintf("world %d", r.World))
	}
	if r.DP > 0 {
		conf = append(conf, fmt.Sprintf("dp %d", r.DP))
	}
	conf = append(conf, fmt.Sprintf("pp %d", r.PP))
	if r.MicroBatches > 0 {
		conf = append(conf, fmt.Sprintf("micro-batches %d", r.MicroBatches))
	}
	if r.GradBytes > 0 {
		conf = append(conf, "gradients "+plan.FormatBytes(float64(r.GradBytes)))
	}
	conf = append(conf, "overlap "+plan.FormatPercent(r.Overlap))
	t.row("configuration", strings.Join(conf, ", "))
	if r.PP > 1 {
		t.row("bubble fraction", plan.FormatPercent(r.BubbleFraction)+" of the step")
	}
	if err := t.flush(); err != nil {
		return err
	}

	fmt.Fprintln(w)
	c := newPlanTable(w)
	c.row("", "measured\tpredicted\terror")
	const input = "(input)"
	c.row("compute", plan.FormatMillis(r.Measured.ComputeMs)+"\t"+plan.FormatMillis(r.Predicted.ComputeMs)+"\t"+input)
	commErr := input
	if r.CommModelled {
		commErr = planErrText(r.RelativeError.CommMs)
	}
	c.row("communication", plan.FormatMillis(r.Measured.CommMs)+"\t"+plan.FormatMillis(r.Predicted.CommMs)+"\t"+commErr)
	c.row("exposed comm", "-\t"+plan.FormatMillis(r.PredictedExposedCommMs)+"\t-")
	if r.PP > 1 || r.Measured.BubbleMs != nil {
		measured := "-"
		if r.Measured.BubbleMs != nil {
			measured = plan.FormatMillis(*r.Measured.BubbleMs)
		}
		c.row("bubble", measured+"\t"+plan.FormatMillis(*r.Predicted.BubbleMs)+"\t"+planErrText(r.RelativeError.BubbleMs))
	}
	c.row("step", plan.FormatMillis(r.Measured.StepMs)+"\t"+plan.FormatMillis(r.Predicted.StepMs)+"\t"+planErrText(r.RelativeError.StepMs))
	if err := c.flush(); err != nil {
		return err
	}

	if !r.CommModelled && r.AchievedBusBandwidth == 0 {
		return nil
	}
	fmt.Fprintln(w)
	b := newPlanTable(w)
	if r.CommModelled {
		b.row("model bandwidth", planBandwidthText(r.BandwidthBytesPerS)+", ring all-reduce of grad_bytes over dp ranks")
	}
	if r.AchievedBusBandwidth > 0 {
		b.row("achieved bus bandwidth", plan.FormatBandwidth(r.AchievedBusBandwidth)+" (grad_bytes / comm × 2(dp−1)/dp, as nccl-tests report)")
	}
	return b.flush()
}

func planErrText(e *float64) string {
	if e == nil {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", *e*100)
}

// planTable aligns "label  value" rows; a value may hold more tab-separated
// cells.
type planTable struct{ tw *tabwriter.Writer }

func newPlanTable(w io.Writer) *planTable {
	return &planTable{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
}

func (t *planTable) row(label, value string) { fmt.Fprintf(t.tw, "%s\t%s\n", label, value) }

func (t *planTable) flush() error { return t.tw.Flush() }

// planBytesText is the rounded reading with the exact count beside it:
// "24.0 GB (24000000000 B)".
func planBytesText(b float64) string {
	h := plan.FormatBytes(b)
	if b < 1000 {
		return h
	}
	if b == math.Trunc(b) {
		return fmt.Sprintf("%s (%s B)", h, strconv.FormatFloat(b, 'f', 0, 64))
	}
	return fmt.Sprintf("%s (≈%s B)", h, strconv.FormatFloat(b, 'f', 0, 64))
}

func planBandwidthText(bps float64) string {
	return fmt.Sprintf("%s (%s Gbps)", plan.FormatBandwidth(bps), strconv.FormatFloat(bps*8/1e9, 'g', 6, 64))
}

func planCountText(n int64) string {
	return fmt.Sprintf("%s (%d)", plan.FormatCount(float64(n)), n)
}

// planUsagef is a command-line error: exit status 2.
func planUsagef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// planErr marks the model's refusals of its inputs as command-line errors;
// the flags were checked first, so this is a backstop.
func planErr(err error) error {
	if errors.Is(err, plan.ErrInvalidConfig) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return err
}

func planNoArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return planUsagef("troupe plan %s takes flags only, not %q", cmd.Name(), args[0])
	}
	return nil
}

// planRequireFlags checks flags that have no sensible default; cobra's own
// required-flag error would not carry errUsage.
func planRequireFlags(cmd *cobra.Command, names ...string) error {
	for _, n := range names {
		if !cmd.Flags().Changed(n) {
			return planUsagef("troupe plan %s needs --%s", cmd.Name(), n)
		}
	}
	return nil
}

func planPositiveSize(given bool, name string, v int64) error {
	if given && v <= 0 {
		return planUsagef("--%s %d must be positive", name, v)
	}
	return nil
}

func planPositiveBandwidth(given bool, v float64) error {
	if given && !(v > 0) {
		return planUsagef("--bandwidth must be positive, got %v bytes/s", v)
	}
	return nil
}

// planSizeFlag, planBandwidthFlag and planCountFlag parse sizes ("80GB", "512MiB"),
// bandwidths ("25GB/s", "200Gbps") and counts ("7.5B", "175e9") with the
// plan unit parsers, so a bad unit fails while flags are parsed and the
// message names the flag and the text.
type planSizeFlag struct{ v int64 }

func (f *planSizeFlag) String() string { return planFlagInt(f.v) }
func (f *planSizeFlag) Type() string   { return "size" }
func (f *planSizeFlag) Set(s string) (err error) {
	f.v, err = plan.ParseBytes(s)
	return err
}

type planBandwidthFlag struct{ v float64 }

func (f *planBandwidthFlag) String() string {
	if f.v == 0 {
		return ""
	}
	return strconv.FormatFloat(f.v, 'g', -1, 64)
}
func (f *planBandwidthFlag) Type() string { return "bandwidth" }
func (f *planBandwidthFlag) Set(s string) (err error) {
	f.v, err = plan.ParseBandwidth(s)
	return err
}

type planCountFlag struct{ v int64 }

func (f *planCountFlag) String() string { return planFlagInt(f.v) }
func (f *planCountFlag) Type() string   { return "count" }
func (f *planCountFlag) Set(s string) (err error) {
	f.v, err = plan.ParseCount(s)
	return err
}

// planFlagInt leaves zero blank so that help shows no default.
func planFlagInt(v int64) string {
	if v == 0 {
		return ""
	}
	return strconv.FormatInt(v, 10)
}

package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/plan"
	"github.com/troupe-ml/troupe/safetensors"
)

func init() { rootCmd.AddCommand(newCkptCmd()) }

// newCkptCmd is `troupe ckpt`: look into and convert checkpoint
// directories written by troupe train --ckpt-dir.
func newCkptCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ckpt",
		Short: "Inspect, verify and convert checkpoints",
	}
	cmd.AddCommand(newCkptInspectCmd(), newCkptConvertCmd())
	return cmd
}

type ckptInspectFlags struct {
	json     bool
	noVerify bool
	step     int64
}

func newCkptInspectCmd() *cobra.Command {
	var f ckptInspectFlags
	cmd := &cobra.Command{
		Use:   "inspect DIR",
		Short: "List the checkpoints in DIR and verify every CRC",
		Long: `Lists the checkpoints in DIR (the --ckpt-dir of troupe train): their steps,
which one is latest, sizes, world and topology, and the state of the latest
one (or of --step N): sampler cursor, optimizer, schedule, shard files.

Every byte of every checkpoint is read and checked against the CRC-32C
values in its manifest (--no-verify checks only file sizes and headers).
The exit status is non-zero when the latest pointer or any checkpoint is
damaged, and the error names each damaged file.`,
		Example: `  troupe ckpt inspect ckpt/
  troupe ckpt inspect ckpt/ --step 200 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCkptInspect(cmd.OutOrStdout(), args[0], f)
		},
	}
	cmd.Flags().BoolVar(&f.json, "json", false, "print one JSON document")
	cmd.Flags().BoolVar(&f.noVerify, "no-verify", false, "check sizes and headers only, not every CRC")
	cmd.Flags().Int64Var(&f.step, "step", -1, "show this step's details instead of the latest's")
	return cmd
}

func runCkptInspect(w io.Writer, dir string, f ckptInspectFlags) error {
	rep, err := checkpoint.Inspect(checkpoint.OSFS{}, dir, !f.noVerify)
	if err != nil {
		return err
	}
	detail := rep.Latest
	if f.step >= 0 {
		detail = f.step
		if ckptFind(rep, detail) == nil {
			return fmt.Errorf("%w: no checkpoint of step %d in %s", errUsage, f.step, dir)
		}
	}
	if f.json {
		if err := json.NewEncoder(w).Encode(rep); err != nil {
			return err
		}
	} else {
		printCkptReport(w, rep, detail)
	}
	return ckptProblems(rep)
}

func ckptFind(rep *checkpoint.DirReport, step int64) *checkpoint.CheckpointReport {
	for i := range rep.Checkpoints {
		if rep.Checkpoints[i].Step == step {
			return &rep.Checkpoints[i]
		}
	}
	return nil
}

// ckptProblems returns an error naming every damaged file or checkpoint,
// nil when there are none.
func ckptProblems(rep *checkpoint.DirReport) error {
	var bad []string
	if rep.Error != "" {
		bad = append(bad, rep.Error)
	}
	for _, c := range rep.Checkpoints {
		if c.Error != "" {
			bad = append(bad, c.Error)
		}
		for _, f := range c.Files {
			if f.Error != "" {
				bad = append(bad, f.Error)
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%d problem(s) in %s:\n  %s", len(bad), rep.Dir, strings.Join(bad, "\n  "))
}

func printCkptReport(out io.Writer, rep *checkpoint.DirReport, detail int64) {
	var buf bytes.Buffer
	writeCkptReport(&buf, rep, detail)
	// tabwriter pads the cell before an empty last column; trim it.
	for _, line := range strings.SplitAfter(buf.String(), "\n") {
		io.WriteString(out, strings.TrimRight(line, " \n")+strings.Repeat("\n", strings.Count(line, "\n")))
	}
}

func writeCkptReport(w io.Writer, rep *checkpoint.DirReport, detail int64) {
	latest := "none"
	if rep.Latest >= 0 {
		latest = checkpoint.StepDirName(rep.Latest)
	}
	fmt.Fprintf(w, "checkpoint directory %s: %d checkpoint(s), latest %s\n", rep.Dir, len(rep.Checkpoints), latest)
	if len(rep.Checkpoints) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "STEP\tDIRECTORY\tSIZE\tWORLD\tGEN\tTENSORS\tPARAMS\tCHECK\t")
		for _, c := range rep.Checkpoints {
			world, gen := "?", "?"
			if c.Meta != nil {
				world, gen = c.Meta.World.String(), strconv.FormatUint(c.Meta.Generation, 10)
			}
			check := "ok"
			switch {
			case !c.OK:
				check = "DAMAGED"
			case !c.Verified:
				check = "sizes ok"
			}
			note := ""
			if c.Latest {
				note = "latest"
			} else if !c.Committed {
				note = "not committed"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", c.Step, c.Name, plan.FormatBytes(float64(c.Bytes)),
				world, gen, c.Tensors, c.Params, check, note)
		}
		tw.Flush()
	}
	if len(rep.Leftovers) > 0 {
		fmt.Fprintf(w, "\nleftovers of unfinished saves (the next commit removes them): %s\n", strings.Join(rep.Leftovers, ", "))
	}
	c := ckptFind(rep, detail)
	if c == nil || c.Meta == nil {
		return
	}
	m := c.Meta
	fmt.Fprintf(w, "\n%s: step %d, generation %d, %d rank(s) = dp %d × pp %d × tp %d, %s in %d file(s)\n",
		c.Name, m.Step, m.Generation, m.World.Size, m.World.DP, m.World.PP, m.World.TPSize(), plan.FormatBytes(float64(c.Bytes)), len(c.Files))
	if s := m.Sampler; s != nil {
		fmt.Fprintf(w, "  sampler:   cursor %d (epoch %.2f of %d samples), seed %d, shuffle %v\n",
			s.Cursor, float64(s.Cursor)/float64(s.N), s.N, s.Seed, s.Shuffle)
	}
	if o := m.Optimizer; o != nil {
		hyper := ""
		switch o.Name {
		case "adamw":
			hyper = fmt.Sprintf("betas (%g, %g), eps %g, weight decay %g", o.Beta1, o.Beta2, o.Eps, o.WeightDecay)
		default:
			hyper = fmt.Sprintf("momentum %g, dampening %g, nesterov %v, weight decay %g", o.Momentum, o.Dampening, o.Nesterov, o.WeightDecay)
		}
		states := "none"
		if len(o.States) > 0 {
			states = strings.Join(o.States, ", ")
		}
		fmt.Fprintf(w, "  optimizer: %s after %d steps, %s; state: %s\n", o.Name, o.Steps, hyper, states)
	}
	if s := m.Schedule; s != nil {
		fmt.Fprintf(w, "  schedule:  %s, base lr %g, warm-up %d, total %d, floor ×%g, at step %d\n",
			s.Kind, s.BaseLR, s.Warmup, s.Total, s.MinFactor, s.Position)
	}
	if len(m.RNG) > 0 {
		var names []string
		for k := range m.RNG {
			names = append(names, k)
		}
		fmt.Fprintf(w, "  rng:       %s\n", strings.Join(names, ", "))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range c.Files {
		state := "ok"
		if !f.OK {
			state = "DAMAGED"
		} else if !c.Verified {
			state = "size ok"
		}
		where := fmt.Sprintf("stage %d, dp rank %d", f.Stage, f.DPRank)
		if m.World.TPSize() > 1 {
			where += fmt.Sprintf(", tp rank %d", f.TPRank)
		}
		fmt.Fprintf(tw, "  %s\t%s\trank %d (%s)\t%s\n", f.Name, plan.FormatBytes(float64(f.Bytes)), f.Rank, where, state)
	}
	tw.Flush()
}

type ckptConvertFlags struct {
	step  int64
	out   string
	dtype string
}

func newCkptConvertCmd() *cobra.Command {
	var f ckptConvertFlags
	cmd := &cobra.Command{
		Use:   "convert DIR --out FILE.safetensors",
		Short: "Write a checkpoint's weights as one plain safetensors file",
		Long: `Gathers the weights of the latest checkpoint in DIR (or of --step N) from its
shard files, whatever world wrote them, verifying every CRC, and writes them
to one safetensors file with PyTorch's state_dict names and shapes and no
optimizer state: what troupe train --init, safetensors.torch.load_file and
model.load_state_dict take.`,
		Example: `  troupe ckpt convert ckpt/ --out model.safetensors
  troupe ckpt convert ckpt/ --step 200 --dtype bf16 --out model-bf16.safetensors`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCkptConvert(cmd.OutOrStdout(), args[0], f)
		},
	}
	cmd.Flags().Int64Var(&f.step, "step", -1, "convert this step instead of the latest")
	cmd.Flags().StringVar(&f.out, "out", "", "output safetensors file (required)")
	cmd.Flags().StringVar(&f.dtype, "dtype", "f32", "dtype of the output: f32, f16 or bf16")
	return cmd
}

func runCkptConvert(w io.Writer, dir string, f ckptConvertFlags) error {
	if f.out == "" {
		return fmt.Errorf("%w: give --out FILE.safetensors", errUsage)
	}
	var conv func(name string, shape []int, v []float32) safetensors.Tensor
	switch strings.ToLower(f.dtype) {
	case "f32":
	case "f16":
		conv = safetensors.NewF16
	case "bf16":
		conv = safetensors.NewBF16
	default:
		return fmt.Errorf("%w: --dtype %q: want f32, f16 or bf16", errUsage, f.dtype)
	}
	var ck *checkpoint.Checkpoint
	var err error
	if f.step >= 0 {
		ck, err = checkpoint.Open(checkpoint.OSFS{}, dir, f.step)
	} else {
		ck, err = checkpoint.OpenLatest(checkpoint.OSFS{}, dir)
	}
	if errors.Is(err, checkpoint.ErrNoCheckpoint) {
		return fmt.Errorf("no checkpoint to convert: %w", err)
	}
	if err != nil {
		return err
	}
	defer ck.Close()
	ts, err := ck.Weights()
	if err != nil {
		return err
	}
	var params int64
	for i, t := range ts {
		n, _ := safetensors.NumElements(t.Shape)
		params += n
		if conv != nil && t.DType == safetensors.F32 {
			v, err := t.Float32()
			if err != nil {
				return err
			}
			ts[i] = conv(t.Name, t.Shape, v)
		}
	}
	meta := map[string]string{"format": "pt", "troupe_step": strconv.FormatInt(ck.Step(), 10)}
	if err := safetensors.WriteFile(f.out, ts, meta); err != nil {
		return fmt.Errorf("writing %s: %w", f.out, err)
	}
	var bytes int64
	for _, t := range ts {
		bytes += int64(len(t.Data))
	}
	fmt.Fprintf(w, "wrote %s: %d tensors, %d parameters, %s (step %d of %s)\n",
		f.out, len(ts), params, plan.FormatBytes(float64(bytes)), ck.Step(), dir)
	return nil
}

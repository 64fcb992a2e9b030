package cli

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/troupe-ml/troupe/plan"
)

func newPlanTPCmd() *cobra.Command {
	var (
		cfg    = plan.TPConfig{MicroBatch: 1, TP: 1, PP: 1, DP: 1, ActBytes: 4, StateBytesPerParam: 16}
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "tp --seq s --hidden h --heads a --layers L --vocab V --tp T [--pp P] [--dp D] [--micro-batch b] [--sequence-parallel]",
		Short: "Tensor parallelism: communication and activation memory per layer, parameters per device of a 3D layout",
		Long: `For a GPT (troupe's: tied head, learned positions, pre-LayerNorm blocks) on a
mesh of D × P × T devices:

  - communication per layer per micro-batch, what each tensor-parallel rank
    sends over a ring: 8(T − 1)/T · s·b·h · bytes without sequence
    parallelism (four all-reduces: f and g for attention and for the MLP);
    with it the same in reduce-scatters and all-gathers, plus 2(T − 1)/T ·
    s·b·h · bytes for the inputs the backward pass gathers again;
  - activation memory per layer, Korthikanti et al. 2022 (16-bit activations
    with dropout, their Table 2): s·b·h·(34 + 5·a·s/h) on one device,
    s·b·h·(10 + 24/T + 5·a·s/(h·T)) with T shards, s·b·h/T·(34 + 5·a·s/h)
    with sequence parallelism as well;
  - the parameters the fullest device holds (a block's cut matrices are
    1/T of it, its LayerNorms and row-parallel biases whole; the vocabulary
    is split, padded to a multiple of T) and their training state.`,
		Example: `  troupe plan tp --seq 64 --hidden 512 --heads 8 --layers 4 --vocab 126 --tp 2 --micro-batch 8
  troupe plan tp --seq 2048 --hidden 12288 --heads 96 --layers 96 --vocab 51200 --tp 8 --pp 8 --dp 16 --sequence-parallel --act-bytes 2`,
		Args: planNoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := planRequireFlags(cmd, "seq", "hidden", "heads", "layers", "vocab", "tp"); err != nil {
				return err
			}
			r, err := plan.TensorParallel(cfg)
			if err != nil {
				return planErr(err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), r)
			}
			t := newPlanTable(cmd.OutOrStdout())
			t.row("model", fmt.Sprintf("GPT s %d, h %d, %d heads, %d layers, vocabulary %d: %s parameters", r.Seq, r.Hidden, r.Heads, r.Layers, r.Vocab, planCountText(r.Params)))
			t.row("layout", fmt.Sprintf("dp %d × pp %d × tp %d = %d devices, micro-batch %d", r.DP, r.PP, r.TP, r.Devices, r.MicroBatch))
			t.row("comm per layer", fmt.Sprintf("%s per rank per micro-batch (8(T − 1)/T · s·b·h · %s bytes)", planBytesText(r.CommBytesPerLayer), strconv.FormatFloat(r.ActBytes, 'f', -1, 64)))
			t.row("  with SP", fmt.Sprintf("%s (the same, plus 2(T − 1)/T · s·b·h for the re-gathered inputs)", planBytesText(r.CommBytesPerLayerSP)))
			t.row("activations per layer", fmt.Sprintf("%s on one device (Korthikanti et al. 2022, 16-bit with dropout)", planBytesText(r.ActivationBytesPerLayer)))
			t.row("  with TP", planBytesText(r.ActivationBytesPerLayerTP))
			if r.ActivationBytesPerLayerSP > 0 {
				t.row("  with TP and SP", planBytesText(r.ActivationBytesPerLayerSP))
			}
			t.row("params per device", fmt.Sprintf("%s (the fullest device)", planCountText(r.ParamsPerDevice)))
			t.row("state per device", fmt.Sprintf("%s (%s bytes per parameter)", planBytesText(r.StateBytesPerDevice), strconv.FormatFloat(r.StateBytesPerParam, 'f', -1, 64)))
			return t.flush()
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Seq, "seq", 0, "sequence length s")
	f.IntVar(&cfg.MicroBatch, "micro-batch", 1, "sequences per micro-batch b")
	f.IntVar(&cfg.Hidden, "hidden", 0, "model width h (d_model)")
	f.IntVar(&cfg.Heads, "heads", 0, "attention heads a")
	f.IntVar(&cfg.Layers, "layers", 0, "transformer layers L")
	f.IntVar(&cfg.Vocab, "vocab", 0, "vocabulary V")
	f.IntVar(&cfg.TP, "tp", 1, "tensor-parallel shards T")
	f.IntVar(&cfg.PP, "pp", 1, "pipeline stages P")
	f.IntVar(&cfg.DP, "dp", 1, "data-parallel replicas D")
	f.BoolVar(&cfg.SP, "sequence-parallel", false, "sequence parallelism")
	f.Float64Var(&cfg.ActBytes, "act-bytes", 4, "bytes of an activation element on the wire (4 fp32, 2 bf16)")
	f.Float64Var(&cfg.StateBytesPerParam, "bytes-per-param", 16, "training state per parameter (16: fp32 AdamW)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/plan"
)

type explainTPFlags struct {
	tp, context, batch, vocab int
	model                     string
	sp, json                  bool
	// args are the model options set (--d-model, --n-heads, ...).
	args nn.Args
}

func newExplainTPCmd() *cobra.Command {
	var f explainTPFlags
	cmd := &cobra.Command{
		Use:   "tp --tp T",
		Short: "Print which tensor-parallel rank holds which rows and columns, and the collectives of one block",
		Long: `Cuts a registered model (--model, with its own flags; by default the
registry's default model, the GPT) for T tensor-parallel shards with the
code troupe train --tp runs, and prints:

  - for every parameter of its first pipeline units (the token embedding
    and the first block of the GPT and the Llama) and of its last (the
    final norm and the LM head), the dimension it is cut along and the rows
    or columns of the whole tensor each rank holds. The GPT: qkv by heads
    (each of q, k and v cut alike), fc by rows (column-parallel: a slice of
    the outputs), proj and out by columns (row-parallel: a slice of the
    inputs, the bias whole), the vocabulary by rows (padded when T does
    not divide it). The Llama: q_proj by heads, k_proj and v_proj by kv
    heads when T divides them (otherwise whole on every rank, their
    gradients summed over the shards), gate_proj and up_proj by rows,
    o_proj and down_proj by columns;
  - the collectives one shard runs for the first block and one
    micro-batch, in order, recorded from the block's own forward and
    backward passes: without sequence parallelism one all-reduce forward
    and one backward for attention and for the MLP (Megatron-LM's g and f
    operators); with --sequence-parallel all-gathers and reduce-scatters
    instead;
  - the bytes a shard sends for them over a ring, beside Megatron-LM's
    formula for a transformer block, 8(T − 1)/T · s·b·h · 4 bytes (s
    context, b sequences, h the block's width).`,
		Example: `  troupe explain tp --tp 2
  troupe explain tp --tp 4 --d-model 512 --n-heads 8 --sequence-parallel
  troupe explain tp --tp 2 --model llama --n-heads 4 --n-kv-heads 1
  troupe explain tp --tp 4 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.args = modelArgs(cmd.Flags())
			return runExplainTP(cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.tp, "tp", 0, "tensor-parallel shards T (required)")
	def, _ := nn.DefaultModel() // none: --model must be given
	fl.StringVar(&f.model, "model", def.Name, "the registered model to cut (a sequence model: one that reads token ids)")
	registerModelFlags(fl)
	fl.IntVar(&f.context, "context", 64, "sequence length s")
	fl.IntVar(&f.batch, "batch", 1, "sequences b in the micro-batch")
	fl.IntVar(&f.vocab, "vocab", 126, "vocabulary (the Go specification's characters: 126)")
	fl.BoolVar(&f.sp, "sequence-parallel", false, "split the activations between the tensor-parallel regions along the sequence")
	fl.BoolVar(&f.json, "json", false, "print one JSON document")
	return cmd
}

func init() { explainCmd.AddCommand(newExplainTPCmd()) }

// explainTPShard is what one rank holds of a parameter: ranges of the
// whole tensor along the cut dimension.
type explainTPShard struct {
	Rank   int      `json:"rank"`
	Ranges [][2]int `json:"ranges"`
	// Padding is the rows past the whole tensor's end (a vocabulary T
	// does not divide).
	Padding int `json:"padding,omitempty"`
}

type explainTPParam struct {
	Name  string `json:"name"`
	Shape []int  `json:"shape"`
	// Cut is "rows", "columns" or "whole" (every rank holds it).
	Cut    string           `json:"cut"`
	Shards []explainTPShard `json:"shards,omitempty"`
	// PartialGrad: with sequence parallelism its gradient is summed over
	// the shards once per step.
	PartialGrad bool `json:"partial_grad,omitempty"`
}

// explainTPOp is one collective of a block on one shard.
type explainTPOp struct {
	Pass string `json:"pass"`
	Kind string `json:"kind"`
	// Values is the whole buffer's elements; SentBytes what a rank sends
	// for it over a ring of T.
	Values    int     `json:"values"`
	SentBytes float64 `json:"sent_bytes"`
}

type explainTPDoc struct {
	TP               int    `json:"tp"`
	SequenceParallel bool   `json:"sequence_parallel"`
	Model            string `json:"model"`
	// Describe is the model's one-line shape.
	Describe string `json:"describe"`
	// DModel is the width of the activations between blocks.
	DModel  int              `json:"d_model"`
	Context int              `json:"context"`
	Batch   int              `json:"batch"`
	Vocab   int              `json:"vocab"`
	Params  []explainTPParam `json:"params"`
	Ops     []explainTPOp    `json:"ops"`
	// SentBytes is the sum over Ops; FormulaBytes 8(T − 1)/T · s·b·h · 4,
	// with sequence parallelism plus 2(T − 1)/T · s·b·h · 4 for the inputs
	// the backward pass gathers again.
	SentBytes    float64 `json:"sent_bytes"`
	FormulaBytes float64 `json:"formula_bytes"`
}

// recordingTP is an nn.TPGroup for one shard that communicates nothing:
// it records each operation and leaves well-formed buffers (its values do
// not matter to which operations a pass runs).
type recordingTP struct {
	be    kernels.Backend
	rank  int
	size  int
	pass  string
	ops   []explainTPOp
	bytes float64
}

func (g *recordingTP) Rank() int { return g.rank }
func (g *recordingTP) Size() int { return g.size }

func (g *recordingTP) add(kind string, n int, sent float64) {
	g.ops = append(g.ops, explainTPOp{Pass: g.pass, Kind: kind, Values: n, SentBytes: sent})
}

func (g *recordingTP) AllReduce(x kernels.Buffer, op nn.TPReduce) {
	kind := "all-reduce"
	if op == nn.TPMax {
		kind = "all-reduce (max)"
	}
	g.add(kind, x.Len(), plan.RingBytesPerRank(4*float64(x.Len()), g.size))
}

func (g *recordingTP) ReduceScatter(dst, x kernels.Buffer) {
	g.add("reduce-scatter", x.Len(), 4*float64(x.Len())*float64(g.size-1)/float64(g.size))
	g.be.Copy(dst, g.be.View(x, g.rank*dst.Len(), dst.Len()))
}

func (g *recordingTP) AllGather(dst, x kernels.Buffer) {
	g.add("all-gather", dst.Len(), 4*float64(dst.Len())*float64(g.size-1)/float64(g.size))
	for r := range g.size {
		g.be.Copy(g.be.View(dst, r*x.Len(), x.Len()), x)
	}
}

func buildExplainTP(f explainTPFlags) (explainTPDoc, error) {
	doc := explainTPDoc{TP: f.tp, SequenceParallel: f.sp, Context: f.context, Batch: f.batch, Vocab: f.vocab}
	if f.tp < 1 {
		return doc, fmt.Errorf("%w: --tp %d: want at least 1 (required)", errUsage, f.tp)
	}
	if f.batch < 1 {
		return doc, fmt.Errorf("%w: --batch %d: want at least 1", errUsage, f.batch)
	}
	def, err := nn.Lookup(f.model)
	if err != nil {
		return doc, fmt.Errorf("%w: --model %s: %w", errUsage, f.model, err)
	}
	v, err := def.Resolve(f.args)
	if err != nil {
		return doc, fmt.Errorf("%w: %w", errUsage, inFlags(err))
	}
	spec, err := def.New(v, nn.DataShape{Tokens: true, Classes: f.vocab, Context: f.context})
	if err == nil {
		err = spec.Validate()
	}
	if err != nil {
		return doc, fmt.Errorf("%w: --model %s: %w", errUsage, def.Name, inFlags(err))
	}
	if spec.Units() < 2 {
		return doc, fmt.Errorf("%w: --model %s has %d pipeline unit(s): no block to cut after its input", errUsage, def.Name, spec.Units())
	}
	place := nn.TP{Size: f.tp, SP: f.sp}
	if err := nn.CheckTPOf(spec, place); err != nil {
		return doc, fmt.Errorf("%w: %w", errUsage, inFlags(err))
	}
	doc.Model = def.Name
	// Who holds what: the parameters of the first two units and of the
	// last on every rank (the blocks between are cut as the first).
	units := [][2]int{{0, 2}}
	if n := spec.Units(); n > 2 {
		units = append(units, [2]int{n - 1, n})
	}
	for r := range f.tp {
		place.Rank = r
		var ps []*nn.Param
		for _, u := range units {
			p, err := nn.Layout(spec, u[0], u[1], place)
			if err != nil {
				return doc, err
			}
			ps = append(ps, p...)
		}
		for i, p := range ps {
			if r == 0 {
				e := explainTPParam{Name: p.Name, Shape: p.Shape, Cut: "whole", PartialGrad: p.PartialGrad}
				if p.Split != nil {
					e.Shape = p.Split.Full
					e.Cut = [...]string{"rows", "columns"}[min(p.Split.Dim, 1)]
				}
				doc.Params = append(doc.Params, e)
			}
			if p.Split == nil {
				continue
			}
			sh := explainTPShard{Rank: r, Padding: p.Split.Piece() * p.Split.Blocks}
			for _, b := range p.Split.Boxes() {
				if b.Len > 0 {
					sh.Ranges = append(sh.Ranges, [2]int{b.Lo, b.Lo + b.Len})
				}
				sh.Padding -= b.Len
			}
			doc.Params[i].Shards = append(doc.Params[i].Shards, sh)
		}
	}
	// The collectives of one block on shard 0, from its own passes.
	be := cpu.New(1)
	place.Rank = 0
	m, err := nn.BuildShard(be, spec, 1, 1, 2, place)
	if err != nil {
		return doc, err
	}
	doc.DModel = m.InCols
	if doc.Describe, err = nn.Describe(spec); err != nil {
		return doc, err
	}
	g := &recordingTP{be: be, size: f.tp, pass: "forward"}
	c := nn.NewCtx(be, nn.NewPool(be))
	if f.tp > 1 {
		c.TP = g
	}
	rows := m.BoundaryRows(f.batch * f.context)
	x := c.Pool.GetZero(rows * m.InCols)
	y := nn.Forward(c, m.Layers, nn.Act{X: x, Rows: rows, Cols: m.InCols})
	g.pass = "backward"
	dx := nn.Backward(c, m.Layers, y)
	c.Pool.Put(dx.X)
	doc.Ops = g.ops
	for _, op := range g.ops {
		doc.SentBytes += op.SentBytes
	}
	sbh := float64(f.context * f.batch * m.InCols)
	doc.FormulaBytes = plan.TPBlockCommBytes(sbh, f.tp, f.sp, 4)
	return doc, nil
}

func runExplainTP(w io.Writer, f explainTPFlags) error {
	doc, err := buildExplainTP(f)
	if err != nil {
		return err
	}
	if f.json {
		return writeJSON(w, doc)
	}
	sp := ""
	if f.sp {
		sp = ", sequence-parallel"
	}
	fmt.Fprintf(w, "tensor parallelism over %d shards%s: %s (%s), context %d, vocabulary %d\n\n",
		f.tp, sp, doc.Model, doc.Describe, f.context, f.vocab)
	fmt.Fprintln(w, "who holds what (ranges of the whole tensor along the cut dimension):")
	width := 0
	for _, p := range doc.Params {
		width = max(width, len(p.Name))
	}
	for _, p := range doc.Params {
		fmt.Fprintf(w, "  %-*s %-12s ", width, p.Name, fmt.Sprint(p.Shape))
		if p.Cut == "whole" {
			note := "every rank holds it whole"
			if p.PartialGrad {
				note += " (gradient summed over the shards once per step)"
			}
			fmt.Fprintln(w, note)
			continue
		}
		var parts []string
		for _, sh := range p.Shards {
			var rs []string
			for _, r := range sh.Ranges {
				rs = append(rs, fmt.Sprintf("%d:%d", r[0], r[1]))
			}
			s := fmt.Sprintf("rank %d %s", sh.Rank, strings.Join(rs, "+"))
			if len(rs) == 0 {
				s = fmt.Sprintf("rank %d none", sh.Rank)
			}
			if sh.Padding > 0 {
				s += fmt.Sprintf(" (+%d padding)", sh.Padding)
			}
			parts = append(parts, s)
		}
		fmt.Fprintf(w, "%s: %s\n", p.Cut, strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "\ncollectives of one block, one micro-batch of %d × %d tokens, on each shard:\n", f.batch, f.context)
	if len(doc.Ops) == 0 {
		fmt.Fprintln(w, "  none (one shard)")
	}
	for i, op := range doc.Ops {
		fmt.Fprintf(w, "  %2d  %-8s  %-16s %9d values  sends %s\n", i+1, op.Pass, op.Kind, op.Values, plan.FormatBytes(op.SentBytes))
	}
	fmt.Fprintf(w, "\nsent per shard per block: %s; Megatron-LM's formula for a transformer block %s\n", plan.FormatBytes(doc.SentBytes), plan.FormatBytes(doc.FormulaBytes))
	if f.sp {
		fmt.Fprintln(w, "  (8(T − 1)/T · s·b·h · 4 bytes, plus 2(T − 1)/T · s·b·h · 4 for the inputs the backward pass gathers again)")
	} else {
		fmt.Fprintln(w, "  (8(T − 1)/T · s·b·h · 4 bytes: four all-reduces of the block's activation)")
	}
	return nil
}

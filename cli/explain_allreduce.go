package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/troupe-ml/troupe/collective"
)

type explainAllReduceFlags struct {
	ranks     int
	values    string
	op        string
	algorithm string
	json      bool
}

func newExplainAllReduceCmd() *cobra.Command {
	var f explainAllReduceFlags
	cmd := &cobra.Command{
		Use:   "allreduce --ranks P --values v1,v2,…,vn [--algorithm ring|rd]",
		Short: "Print every rank's buffer after every step of a ring or recursive-doubling all-reduce",
		Long: `Runs a ring all-reduce on P in-process ranks, one step at a time, with the
same schedule code the transports run, and prints every rank's buffer at the
start and after each reduce-scatter and all-gather step.

The n values are the P ranks' buffers laid end to end: rank 0 holds the first
n/P values, rank 1 the next n/P, and so on (n must be a multiple of P). Each
buffer is cut into P chunks (the first (n/P) mod P chunks one value longer);
chunks are separated by "|", and the chunk a rank received in a step is
marked <…>.

Ring order (NCCL, Horovod): rank r sends to rank r+1. At reduce-scatter step
s (1-based) rank r sends chunk (r−s+1) mod P and adds the chunk (r−s) mod P
that arrives; after P−1 steps rank r owns the full sum of chunk (r+1) mod P.
The all-gather then circulates the owned chunks for P−1 more steps: at step
t rank r sends chunk (r−t+2) mod P and copies chunk (r−t+1) mod P.

--algorithm rd shows recursive doubling, what small all-reduces run (up to
64 KiB): with P' the largest power of two ≤ P and e = P − P', the odd ranks
below 2e first fold their buffer into the rank before them ("fold"); the P'
ranks left exchange whole buffers with the rank whose index among them
differs in bit k−1 at round k = 1…log₂P' and add what arrives; then each
folded rank gets the result ("unfold"). A step is every message that can
go at once, so a rank without a folded partner may be a round ahead.`,
		Example: "  troupe explain allreduce --ranks 3 --values 1,2,3,10,20,30,100,200,300\n" +
			"  troupe explain allreduce --ranks 5 --values 1,2,3,4,5 --algorithm rd",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runExplainAllReduce(cmd.OutOrStdout(), f)
		},
	}
	cmd.Flags().IntVar(&f.ranks, "ranks", 0, "number of ranks P (required)")
	cmd.Flags().StringVar(&f.values, "values", "", "comma-separated values: the ranks' buffers end to end, n/P each (required)")
	cmd.Flags().StringVar(&f.op, "op", "sum", "reduction: sum, avg or max")
	cmd.Flags().StringVar(&f.algorithm, "algorithm", "ring", "ring, or rd (recursive doubling)")
	cmd.Flags().BoolVar(&f.json, "json", false, "print one JSON document")
	return cmd
}

func init() { explainCmd.AddCommand(newExplainAllReduceCmd()) }

// allreduceExplainRank is one rank's buffer after one step.
type allreduceExplainRank struct {
	Rank   int       `json:"rank"`
	Buffer []float32 `json:"buffer"`
	// SentChunk and RecvChunk are the chunks the rank sent to rank+1 and
	// received from rank−1 in this step (absent at the start).
	SentChunk *int `json:"sent_chunk,omitempty"`
	RecvChunk *int `json:"recv_chunk,omitempty"`
	// Received lists what a recursive-doubling rank received in the step.
	Received []allreduceExplainMsg `json:"received,omitempty"`
}

// allreduceExplainMsg is one recursive-doubling message: from whom, and
// its stage ("fold", "round k", "unfold").
type allreduceExplainMsg struct {
	From  int    `json:"from"`
	Stage string `json:"stage"`
}

type allreduceExplainStep struct {
	Phase string                 `json:"phase"`
	Step  int                    `json:"step"`
	Ranks []allreduceExplainRank `json:"ranks"`
}

type allreduceExplanation struct {
	Ranks         int                    `json:"ranks"`
	Algorithm     string                 `json:"algorithm"`
	Op            string                 `json:"op"`
	ValuesPerRank int                    `json:"values_per_rank"`
	Chunks        [][2]int               `json:"chunks,omitempty"`
	Owned         []int                  `json:"owned_chunk,omitempty"`
	Steps         []allreduceExplainStep `json:"steps"`
}

func allreduceParseValues(s string) ([]float32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%w: --values is required", errUsage)
	}
	parts := strings.Split(s, ",")
	vals := make([]float32, len(parts))
	for i, p := range parts {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 32)
		if err != nil {
			return nil, fmt.Errorf("%w: --values: item %d %q is not a number", errUsage, i+1, p)
		}
		vals[i] = float32(v)
	}
	return vals, nil
}

func allreduceExplainDoc(f explainAllReduceFlags) (*allreduceExplanation, error) {
	if f.ranks < 1 {
		return nil, fmt.Errorf("%w: --ranks %d: want at least 1", errUsage, f.ranks)
	}
	op, err := collective.ParseReduceOp(f.op)
	if err != nil {
		return nil, fmt.Errorf("%w: --op %q: want sum, avg or max", errUsage, f.op)
	}
	algo, err := collective.ParseAlgorithm(f.algorithm)
	if err != nil || algo == collective.AlgoAuto {
		return nil, fmt.Errorf("%w: --algorithm %q: want ring or rd", errUsage, f.algorithm)
	}
	if algo == collective.AlgoHierarchical {
		return nil, fmt.Errorf("%w: --algorithm hier: a hierarchical all-reduce is three ring operations in groups of the hosts' ranks (a reduce-scatter inside each host, an all-reduce across hosts, an all-gather inside each host); explain each with --algorithm ring on its group's ranks", errUsage)
	}
	vals, err := allreduceParseValues(f.values)
	if err != nil {
		return nil, err
	}
	P, n := f.ranks, len(vals)
	if n%P != 0 {
		return nil, fmt.Errorf("%w: %d values for %d ranks: the values are the ranks' buffers end to end, so their number must be a multiple of --ranks", errUsage, n, P)
	}
	m := n / P
	bufs := make([][]float32, P)
	for r := range bufs {
		bufs[r] = vals[r*m : (r+1)*m : (r+1)*m]
	}
	steps, err := collective.Trace(collective.KindAllReduce, algo, bufs, op, 0)
	if err != nil {
		return nil, err
	}
	doc := &allreduceExplanation{Ranks: P, Algorithm: algo.String(), Op: op.String(), ValuesPerRank: m}
	if algo == collective.AlgoRecursiveDoubling {
		for _, st := range steps {
			es := allreduceExplainStep{Phase: st.Phase, Step: len(doc.Steps)}
			for r, b := range st.Buffers {
				er := allreduceExplainRank{Rank: r, Buffer: b}
				for _, d := range st.Data {
					if d.To == r {
						er.Received = append(er.Received, allreduceExplainMsg{From: d.From, Stage: collective.RDStage(d.Seq, P)})
					}
				}
				es.Ranks = append(es.Ranks, er)
			}
			doc.Steps = append(doc.Steps, es)
		}
		return doc, nil
	}
	for c := 0; c < P; c++ {
		lo, hi := collective.ChunkRange(m, P, c)
		doc.Chunks = append(doc.Chunks, [2]int{lo, hi})
	}
	for r := 0; r < P; r++ {
		doc.Owned = append(doc.Owned, collective.OwnedChunk(r, P))
	}
	for _, st := range steps {
		es := allreduceExplainStep{Phase: st.Phase, Step: st.Step}
		for r, b := range st.Buffers {
			er := allreduceExplainRank{Rank: r, Buffer: b}
			switch st.Phase {
			case "reduce-scatter":
				s, rc := collective.ReduceScatterSendChunk(r, st.Step, P), collective.ReduceScatterRecvChunk(r, st.Step, P)
				er.SentChunk, er.RecvChunk = &s, &rc
			case "all-gather":
				s, rc := collective.AllGatherSendChunk(r, st.Step, P), collective.AllGatherRecvChunk(r, st.Step, P)
				er.SentChunk, er.RecvChunk = &s, &rc
			}
			es.Ranks = append(es.Ranks, er)
		}
		doc.Steps = append(doc.Steps, es)
	}
	return doc, nil
}

func runExplainAllReduce(w io.Writer, f explainAllReduceFlags) error {
	doc, err := allreduceExplainDoc(f)
	if err != nil {
		return err
	}
	if f.json {
		return writeJSON(w, doc)
	}
	P := doc.Ranks
	if doc.Algorithm == collective.AlgoRecursiveDoubling.String() {
		writeExplainRD(w, doc)
		return nil
	}
	fmt.Fprintf(w, "ring all-reduce (%s) on %d ranks, %d values each, cut into %d chunks\n", doc.Op, P, doc.ValuesPerRank, P)
	fmt.Fprintf(w, "rank r sends to rank (r+1) mod %d; <…> marks the chunk received in the step\n", P)
	if doc.Op == collective.Avg.String() {
		fmt.Fprintln(w, "avg: each chunk's owner divides its sum by P once, before the all-gather")
	}
	for _, st := range doc.Steps {
		fmt.Fprintln(w)
		switch st.Phase {
		case "start":
			fmt.Fprintln(w, "start")
		case "reduce-scatter":
			fmt.Fprintf(w, "reduce-scatter step %d/%d: rank r sends chunk %s, adds chunk %s\n", st.Step, P-1, allreduceChunkExpr(1-st.Step, P), allreduceChunkExpr(-st.Step, P))
		case "all-gather":
			fmt.Fprintf(w, "all-gather step %d/%d: rank r sends chunk %s, copies chunk %s\n", st.Step, P-1, allreduceChunkExpr(2-st.Step, P), allreduceChunkExpr(1-st.Step, P))
		}
		for _, r := range st.Ranks {
			fmt.Fprintf(w, "  rank %d: %s", r.Rank, allreduceFormatChunks(r.Buffer, doc.Chunks, r.RecvChunk))
			if r.SentChunk != nil {
				verb := "added"
				if st.Phase == "all-gather" {
					verb = "copied"
				}
				fmt.Fprintf(w, "   sent c%d → rank %d, %s c%d from rank %d", *r.SentChunk, (r.Rank+1)%P, verb, *r.RecvChunk, (r.Rank+P-1)%P)
			}
			if st.Phase == "reduce-scatter" && st.Step == P-1 {
				fmt.Fprintf(w, "   (owns c%d)", doc.Owned[r.Rank])
			}
			fmt.Fprintln(w)
		}
	}
	return nil
}

// allreduceChunkExpr writes (r+k) mod P readably: "r", "(r+1) mod 3", "(r−2) mod 3".
func allreduceChunkExpr(k, P int) string {
	switch {
	case k == 0:
		return "r"
	case k > 0:
		return fmt.Sprintf("(r+%d) mod %d", k, P)
	}
	return fmt.Sprintf("(r−%d) mod %d", -k, P)
}

func allreduceFormatChunks(buf []float32, chunks [][2]int, mark *int) string {
	var b strings.Builder
	b.WriteByte('[')
	for c, ch := range chunks {
		if c > 0 {
			b.WriteString(" | ")
		}
		marked := mark != nil && *mark == c
		if marked {
			b.WriteByte('<')
		}
		if ch[0] == ch[1] {
			b.WriteString("-")
		}
		for i := ch[0]; i < ch[1]; i++ {
			if i > ch[0] {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.FormatFloat(float64(buf[i]), 'g', -1, 32))
		}
		if marked {
			b.WriteByte('>')
		}
	}
	b.WriteByte(']')
	return b.String()
}

// writeExplainRD prints a recursive-doubling trace.
func writeExplainRD(w io.Writer, doc *allreduceExplanation) {
	P := doc.Ranks
	rounds, e := collective.RDShape(P)
	fmt.Fprintf(w, "recursive-doubling all-reduce (%s) on %d ranks, %d values each: %d rounds among %d ranks", doc.Op, P, doc.ValuesPerRank, rounds, P-e)
	if e > 0 {
		fmt.Fprintf(w, ", %d folded (odd ranks below %d, into the rank before)", e, 2*e)
	}
	fmt.Fprintln(w)
	if doc.Op == collective.Avg.String() {
		fmt.Fprintln(w, "avg: each rank of the rounds divides the full sum by P once, after the last round")
	}
	whole := [][2]int{{0, doc.ValuesPerRank}}
	for _, st := range doc.Steps {
		fmt.Fprintln(w)
		if st.Phase == "start" {
			fmt.Fprintln(w, "start")
		} else {
			fmt.Fprintf(w, "step %d\n", st.Step)
		}
		for _, r := range st.Ranks {
			fmt.Fprintf(w, "  rank %d: %s", r.Rank, allreduceFormatChunks(r.Buffer, whole, nil))
			for i, m := range r.Received {
				sep := "   "
				if i > 0 {
					sep = "; "
				}
				if m.Stage == "unfold" {
					fmt.Fprintf(w, "%scopied the result from rank %d (unfold)", sep, m.From)
					continue
				}
				fmt.Fprintf(w, "%sadded %s from rank %d", sep, m.Stage, m.From)
			}
			fmt.Fprintln(w)
		}
	}
}

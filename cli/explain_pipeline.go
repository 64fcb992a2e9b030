package cli

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/trace"
)

type explainPipelineFlags struct {
	stages, micro int
	schedule      string
	recompute     bool
	forward       float64
	backward      float64
	send          float64
	latency       float64
	json          bool
	trace         string
}

func newExplainPipelineCmd() *cobra.Command {
	var f explainPipelineFlags
	cmd := &cobra.Command{
		Use:   "pipeline --stages P --micro-batches M --schedule gpipe|1f1b",
		Short: "Print a pipeline schedule's timeline, bubble and per-stage ops",
		Long: `Builds the GPipe or 1F1B schedule for P stages and M micro-batches (the
same op lists the stage actors run), plays it in the pipeline simulator with
equal stages, and prints:

  - a Gantt chart: one row per stage, one column per time unit; Fi, Bi and
    Ri are the forward, backward and recomputation of micro-batch i (an op
    lasting k units fills k cells), "." is idle time;
  - the simulated bubble fraction (idle time over P × the step's length)
    beside the formula (P − 1)/(M + P − 1), which holds exactly for equal
    stages and free messages whatever the backward/forward ratio;
  - the most micro-batches whose activations are alive at once per stage
    (GPipe: M; 1F1B: min(P − s, M) on stage s);
  - every stage's ops in order: >ai / <ai send the activation of micro-batch
    i to the next stage / receive it from the previous one, >gi / <gi the
    same for its gradient, towards stage 0.

GPipe runs all forwards, then all backwards. 1F1B (PipeDream-Flush, as in
Megatron-LM) runs min(P − s − 1, M) warm-up forwards on stage s, then one
forward and one backward in turn, then the remaining backwards.

Times are in abstract units (forward 1 and backward 2 by default); with
--send-time or --latency messages cost time too and the bubble grows past
the formula. --trace writes the timeline as a Chrome trace-event file
(open it in ui.perfetto.dev), one unit drawn as one millisecond.`,
		Example: `  troupe explain pipeline --stages 4 --micro-batches 8 --schedule 1f1b
  troupe explain pipeline --stages 4 --micro-batches 8 --schedule gpipe --json
  troupe explain pipeline --stages 2 --micro-batches 4 --recompute --trace pp.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runExplainPipeline(cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.stages, "stages", 0, "number of pipeline stages P (required)")
	fl.IntVar(&f.micro, "micro-batches", 0, "number of micro-batches M per step (required)")
	fl.StringVar(&f.schedule, "schedule", "1f1b", "schedule: gpipe or 1f1b")
	fl.BoolVar(&f.recompute, "recompute", false, "activation checkpointing: recompute each stage's forward before its backward")
	fl.Float64Var(&f.forward, "forward-time", 1, "time of one micro-batch's forward pass on a stage (units)")
	fl.Float64Var(&f.backward, "backward-time", 2, "time of one micro-batch's backward pass on a stage (units)")
	fl.Float64Var(&f.send, "send-time", 0, "time a stage is busy sending one message (units)")
	fl.Float64Var(&f.latency, "latency", 0, "time from the end of a send to the message's arrival (units)")
	fl.BoolVar(&f.json, "json", false, "print one JSON document")
	fl.StringVar(&f.trace, "trace", "", "also write the simulated timeline to this Chrome trace-event JSON file")
	return cmd
}

func init() { explainCmd.AddCommand(newExplainPipelineCmd()) }

// explainPipelineCosts echoes the simulator's inputs.
type explainPipelineCosts struct {
	Forward   float64 `json:"forward"`
	Backward  float64 `json:"backward"`
	Recompute float64 `json:"recompute"`
	Send      float64 `json:"send"`
	Latency   float64 `json:"latency"`
}

// explainPipelineStage is one stage's share of the step.
type explainPipelineStage struct {
	Stage          int     `json:"stage"`
	Compute        float64 `json:"compute"`
	Comm           float64 `json:"comm"`
	Idle           float64 `json:"idle"`
	BubbleFraction float64 `json:"bubble_fraction"`
	PeakInFlight   int     `json:"peak_in_flight"`
}

type explainPipelineDoc struct {
	Schedule     string               `json:"schedule"`
	Stages       int                  `json:"stages"`
	MicroBatches int                  `json:"micro_batches"`
	Recompute    bool                 `json:"recompute"`
	Costs        explainPipelineCosts `json:"costs"`
	// BubbleFraction is the simulated idle share; FormulaBubbleFraction
	// is (P − 1)/(M + P − 1).
	BubbleFraction        float64                `json:"bubble_fraction"`
	FormulaBubbleFraction float64                `json:"formula_bubble_fraction"`
	Makespan              float64                `json:"makespan"`
	PeakInFlight          []int                  `json:"peak_in_flight"`
	PerStage              []explainPipelineStage `json:"per_stage"`
	// Ops[s] is stage s's op list; Timeline[s] the same ops with their
	// simulated start and end.
	Ops      [][]pipeline.Op   `json:"ops"`
	Timeline [][]pipeline.Span `json:"timeline"`
}

// explainPipelineMaxColumns keeps the text chart printable; wider steps are
// summarised and left to --json and --trace.
const explainPipelineMaxColumns = 1000

func buildExplainPipeline(f explainPipelineFlags) (*pipeline.Schedule, *pipeline.Timeline, error) {
	kind, err := pipeline.ParseKind(f.schedule)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: --schedule: %w", errUsage, err)
	}
	if f.stages < 1 {
		return nil, nil, fmt.Errorf("%w: --stages %d: want at least 1 (required)", errUsage, f.stages)
	}
	if f.micro < 1 {
		return nil, nil, fmt.Errorf("%w: --micro-batches %d: want at least 1 (required)", errUsage, f.micro)
	}
	for _, t := range []struct {
		name string
		v    float64
	}{{"--forward-time", f.forward}, {"--backward-time", f.backward}, {"--send-time", f.send}, {"--latency", f.latency}} {
		if t.v < 0 || math.IsNaN(t.v) || math.IsInf(t.v, 0) {
			return nil, nil, fmt.Errorf("%w: %s %v: want a finite time ≥ 0", errUsage, t.name, t.v)
		}
	}
	s, err := pipeline.Build(pipeline.Config{Kind: kind, Stages: f.stages, MicroBatches: f.micro, Recompute: f.recompute})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	sc := pipeline.StageCost{Forward: f.forward, Backward: f.backward, Recompute: f.forward, Send: f.send}
	costs := pipeline.UniformCosts(f.stages, sc)
	costs.Latency = f.latency
	tl, err := pipeline.Simulate(s, costs)
	if err != nil {
		return nil, nil, err
	}
	return s, tl, nil
}

func runExplainPipeline(w io.Writer, f explainPipelineFlags) error {
	s, tl, err := buildExplainPipeline(f)
	if err != nil {
		return err
	}
	st := tl.Stats()
	if f.trace != "" {
		tw := trace.NewWriter(time.Time{})
		name := fmt.Sprintf("%s, %d stages, %d micro-batches (simulated, 1 unit = 1 ms)", s.Kind, s.Stages, s.MicroBatches)
		if err := tl.WriteTrace(tw, pipeline.TraceOptions{Process: name, Scale: 1000}); err != nil {
			return err
		}
		if err := tw.WriteFile(f.trace); err != nil {
			return err
		}
		logger.Debug("wrote trace", zap.String("file", f.trace), zap.Int("events", tw.Len()))
	}
	formula := pipeline.FormulaBubble(s.Stages, s.MicroBatches)
	if f.json {
		doc := explainPipelineDoc{
			Schedule: s.Kind.String(), Stages: s.Stages, MicroBatches: s.MicroBatches, Recompute: s.Recompute,
			Costs:          explainPipelineCosts{Forward: f.forward, Backward: f.backward, Recompute: f.forward, Send: f.send, Latency: f.latency},
			BubbleFraction: st.BubbleFraction, FormulaBubbleFraction: formula, Makespan: st.Makespan,
			PeakInFlight: st.PeakInFlight(), Ops: s.Ops, Timeline: tl.Spans,
		}
		for _, ss := range st.Stages {
			doc.PerStage = append(doc.PerStage, explainPipelineStage{Stage: ss.Stage, Compute: ss.Compute, Comm: ss.Comm,
				Idle: ss.Idle, BubbleFraction: ss.BubbleFraction, PeakInFlight: ss.PeakInFlight})
		}
		return writeJSON(w, doc)
	}

	fmt.Fprintf(w, "%s schedule: %d stages, %d micro-batches", s.Kind, s.Stages, s.MicroBatches)
	if s.Recompute {
		fmt.Fprint(w, ", recompute")
	}
	fmt.Fprintf(w, "; forward %g, backward %g", f.forward, f.backward)
	if s.Recompute {
		fmt.Fprintf(w, ", recompute %g", f.forward)
	}
	if f.send == 0 && f.latency == 0 {
		fmt.Fprint(w, " units, messages free\n\n")
	} else {
		fmt.Fprintf(w, ", send %g, latency %g units\n\n", f.send, f.latency)
	}
	unit := explainPipelineUnit(f.forward, f.backward, f.send, f.latency)
	if cols := math.Ceil(st.Makespan / unit); cols <= explainPipelineMaxColumns {
		if err := tl.Gantt(w, unit); err != nil {
			return err
		}
		fmt.Fprintf(w, "(one column per %g unit; an op lasting k columns fills k cells; . idle)\n", unit)
	} else {
		fmt.Fprintf(w, "(chart left out: %g columns; see --json or --trace)\n", cols)
	}
	P := float64(s.Stages)
	fmt.Fprintf(w, "\nbubble fraction  %.4f  simulated: idle %g of %d stages × %g units\n", st.BubbleFraction, st.Idle, s.Stages, st.Makespan)
	fmt.Fprintf(w, "formula          %.4f  (P − 1)/(M + P − 1) = %d/%d\n", formula, s.Stages-1, s.MicroBatches+s.Stages-1)
	if st.Comm > 0 {
		fmt.Fprintf(w, "communication    %.4f  of the stages' time spent sending\n", st.Comm/(P*st.Makespan))
	}
	fmt.Fprintf(w, "peak micro-batches alive per stage: %s\n", joinInts(st.PeakInFlight()))
	fmt.Fprintf(w, "\nops in order (Fi/Bi/Ri forward/backward/recompute of micro-batch i; >ai <ai send/receive its activation, >gi <gi its gradient):\n")
	for stage, ops := range s.Ops {
		short := make([]string, len(ops))
		for i, op := range ops {
			short[i] = op.Short()
		}
		fmt.Fprintf(w, "stage %d: %s\n", stage, strings.Join(short, " "))
	}
	return nil
}

// explainPipelineUnit is the widest column, among 1, 0.5, 0.25, 0.2, 0.1,
// 0.05 and 0.01 units, that every cost is a whole number of, so that no op
// falls between two columns' midpoints; 0.01 when none is.
func explainPipelineUnit(costs ...float64) float64 {
	for _, u := range []float64{1, 0.5, 0.25, 0.2, 0.1, 0.05} {
		whole := true
		for _, c := range costs {
			k := c / u
			whole = whole && math.Abs(k-math.Round(k)) < 1e-9
		}
		if whole {
			return u
		}
	}
	return 0.01
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, " ")
}

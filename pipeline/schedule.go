package pipeline

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind names a schedule family.
type Kind uint8

const (
	// KindGPipe is fill-drain (Huang et al., 2019): every stage runs all M
	// forwards, then all M backwards. Simple; each stage keeps all M
	// micro-batches' activations alive at once.
	KindGPipe Kind = iota
	// Kind1F1B is one-forward-one-backward with a flush (PipeDream-Flush,
	// Narayanan et al., 2021; Megatron-LM's non-interleaved schedule): stage
	// s runs min(P−s−1, M) warm-up forwards, then alternates one forward and
	// one backward, then drains the remaining backwards. Same bubble as
	// GPipe, but stage s keeps at most min(P−s, M) micro-batches alive.
	Kind1F1B
)

// String is the schedule's name on the command line: "gpipe" or "1f1b".
func (k Kind) String() string {
	switch k {
	case KindGPipe:
		return "gpipe"
	case Kind1F1B:
		return "1f1b"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// MarshalText writes the schedule's name.
func (k Kind) MarshalText() ([]byte, error) {
	if k > Kind1F1B {
		return nil, fmt.Errorf("%w: schedule kind %d", ErrUnknownSchedule, k)
	}
	return []byte(k.String()), nil
}

// UnmarshalText reads a schedule name as ParseKind does.
func (k *Kind) UnmarshalText(b []byte) error {
	v, err := ParseKind(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// ParseKind reads "gpipe" or "1f1b" (any case, surrounding space ignored).
func ParseKind(s string) (Kind, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "gpipe":
		return KindGPipe, nil
	case "1f1b":
		return Kind1F1B, nil
	}
	return 0, fmt.Errorf("%w %q: want gpipe or 1f1b", ErrUnknownSchedule, s)
}

// Limits on schedule size: far above real pipelines (tens of stages,
// hundreds of micro-batches), low enough that a typo on the command line
// cannot ask for gigabytes of ops.
const (
	MaxStages       = 1024
	MaxMicroBatches = 1 << 16
	maxStageMicro   = 1 << 20 // stages × micro-batches
)

// Config says which schedule to build.
type Config struct {
	// Kind is the schedule family.
	Kind Kind
	// Stages is the number of pipeline stages P ≥ 1.
	Stages int
	// MicroBatches is the number of micro-batches M ≥ 1 per optimizer step.
	MicroBatches int
	// Recompute adds a Recompute op before every Backward: the Forward keeps
	// only the stage's input and the backward pass first recomputes the
	// rest (activation checkpointing, Chen et al., 2016).
	Recompute bool
}

// DefaultConfig is 1F1B on one stage with one micro-batch: sequential
// training, to which Stages and MicroBatches are then added.
func DefaultConfig() Config { return Config{Kind: Kind1F1B, Stages: 1, MicroBatches: 1} }

// Validate reports the first field out of range.
func (c Config) Validate() error {
	if c.Kind > Kind1F1B {
		return fmt.Errorf("%w: kind %d", ErrUnknownSchedule, c.Kind)
	}
	if c.Stages < 1 || c.Stages > MaxStages {
		return fmt.Errorf("%w: %d stages: want 1 to %d", ErrBadArgument, c.Stages, MaxStages)
	}
	if c.MicroBatches < 1 || c.MicroBatches > MaxMicroBatches {
		return fmt.Errorf("%w: %d micro-batches: want 1 to %d", ErrBadArgument, c.MicroBatches, MaxMicroBatches)
	}
	if c.Stages*c.MicroBatches > maxStageMicro {
		return fmt.Errorf("%w: %d stages × %d micro-batches is over the limit of %d", ErrBadArgument, c.Stages, c.MicroBatches, maxStageMicro)
	}
	return nil
}

// Schedule is, for every stage, the ordered list of ops it runs in one
// optimizer step. Sends never wait for the receiver (messages queue at the
// receiver, as actor mailboxes do); a receive waits until its message is
// there. Messages between two stages are sent and received in the same
// order, so a FIFO link delivers them in the order they are taken.
type Schedule struct {
	Kind         Kind `json:"schedule"`
	Stages       int  `json:"stages"`
	MicroBatches int  `json:"micro_batches"`
	Recompute    bool `json:"recompute"`
	// Ops[s] is stage s's list.
	Ops [][]Op `json:"ops"`
}

// Build makes the schedule c describes.
func Build(c Config) (*Schedule, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	s := &Schedule{Kind: c.Kind, Stages: c.Stages, MicroBatches: c.MicroBatches, Recompute: c.Recompute, Ops: make([][]Op, c.Stages)}
	for st := range s.Ops {
		b := stageBuilder{stage: st, last: c.Stages - 1, recompute: c.Recompute, ops: make([]Op, 0, s.opsPerStage(st))}
		switch c.Kind {
		case KindGPipe:
			gpipeStage(&b, c.MicroBatches)
		case Kind1F1B:
			oneFOneBStage(&b, c.Stages, c.MicroBatches)
		}
		s.Ops[st] = b.ops
	}
	return s, nil
}

// GPipe builds the fill-drain schedule for P stages and M micro-batches.
func GPipe(P, M int) (*Schedule, error) {
	return Build(Config{Kind: KindGPipe, Stages: P, MicroBatches: M})
}

// OneFOneB builds the 1F1B (PipeDream-Flush) schedule for P stages and M
// micro-batches.
func OneFOneB(P, M int) (*Schedule, error) {
	return Build(Config{Kind: Kind1F1B, Stages: P, MicroBatches: M})
}

// Config is the configuration the schedule was built from.
func (s *Schedule) Config() Config {
	return Config{Kind: s.Kind, Stages: s.Stages, MicroBatches: s.MicroBatches, Recompute: s.Recompute}
}

// opsPerStage is the length of stage st's list: per micro-batch a forward
// and a backward, a recompute when checkpointing, and one op per message in
// and out.
func (s *Schedule) opsPerStage(st int) int {
	per := 2
	if s.Recompute {
		per++
	}
	if st > 0 {
		per += 2 // RecvAct, SendGrad
	}
	if st < s.Stages-1 {
		per += 2 // SendAct, RecvGrad
	}
	return per * s.MicroBatches
}

// String lists every stage's ops in the compact notation of Op.Short.
func (s *Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %d stages, %d micro-batches", s.Kind, s.Stages, s.MicroBatches)
	if s.Recompute {
		b.WriteString(", recompute")
	}
	for st, ops := range s.Ops {
		fmt.Fprintf(&b, "\nstage %d:", st)
		for _, op := range ops {
			b.WriteByte(' ')
			b.WriteString(op.Short())
		}
	}
	return b.String()
}

// stageBuilder appends one stage's ops; forward and backward add the
// messages around the compute op that every schedule needs.
type stageBuilder struct {
	stage, last int
	recompute   bool
	ops         []Op
}

// forward appends: receive the input from the previous stage, run the
// forward pass, send the output to the next stage.
func (b *stageBuilder) forward(m int) {
	if b.stage > 0 {
		b.ops = append(b.ops, Op{Kind: RecvAct, Micro: m, Peer: b.stage - 1})
	}
	b.ops = append(b.ops, computeOp(Forward, m))
	if b.stage < b.last {
		b.ops = append(b.ops, Op{Kind: SendAct, Micro: m, Peer: b.stage + 1})
	}
}

// backward appends: receive the output's gradient from the next stage,
// recompute the activations if checkpointing, run the backward pass, send
// the input's gradient to the previous stage. Recompute comes after the
// receive, as in Megatron-LM, so the recomputed activations live only as
// long as the backward pass that needs them.
func (b *stageBuilder) backward(m int) {
	if b.stage < b.last {
		b.ops = append(b.ops, Op{Kind: RecvGrad, Micro: m, Peer: b.stage + 1})
	}
	if b.recompute {
		b.ops = append(b.ops, computeOp(Recompute, m))
	}
	b.ops = append(b.ops, computeOp(Backward, m))
	if b.stage > 0 {
		b.ops = append(b.ops, Op{Kind: SendGrad, Micro: m, Peer: b.stage - 1})
	}
}

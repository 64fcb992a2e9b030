package actors

import (
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors/actorspb"
)

// CoordinatorActorName is the Coordinator's name in its system.
const CoordinatorActorName = "coordinator"

// CoordinatorConfig configures a Coordinator.
type CoordinatorConfig struct {
	// Workers are the Worker actors by rank, when known at spawn time (one
	// process). Leave nil and set World to wait for WorkerHello messages
	// from worker processes instead.
	Workers []*actor.PID
	// World is the number of ranks.
	World int
	// CallTimeout bounds a call: a rank that has not answered by then is
	// reported as silent (a hung process). Default 10 minutes.
	CallTimeout time.Duration
	// Name is the actor's name in its system (default CoordinatorActorName;
	// an elastic leader names one per generation).
	Name string
	// EvalRanks answer EvalCall and WeightsCall together: the stages of
	// one replica in pipeline order (default: rank 0 alone). Their losses
	// add up and their weights concatenate to the whole model's.
	EvalRanks []int
}

// StepCall asks the Coordinator to run one step on every rank; it answers
// with a *StepReport.
type StepCall struct{ Req *actorspb.RunStep }

// StepReport is every rank's StepDone, by rank, or the error that stopped
// the step (a lost or silent rank, or a rank's own failure).
type StepReport struct {
	Dones []*actorspb.StepDone
	Err   error
}

// EvalCall asks the eval ranks for the loss on held-out samples [Lo, Hi);
// the answer is an *EvalReport.
type EvalCall struct{ Lo, Hi int }

// EvalReport answers EvalCall.
type EvalReport struct {
	Done *actorspb.EvalDone
	Err  error
}

// WeightsCall asks the eval ranks for their parameters; the answer is a
// *WeightsReport with the whole model's weights.
type WeightsCall struct{}

// WeightsReport answers WeightsCall.
type WeightsReport struct {
	Weights []float32
	Err     error
}

// SaveCall asks every rank to write its checkpoint shard; the answer is a
// *SaveReport once all have (or one failed).
type SaveCall struct{ Req *actorspb.SaveShard }

// SaveReport answers SaveCall.
type SaveReport struct {
	Bytes int64
	Err   error
}

// GatherCall sends Msgs[r] to rank r (a nil entry skips the rank) and is
// answered with a *GatherReport once every addressed rank replied with a
// message carrying its rank (GetRank) and, optionally, an error (GetError).
type GatherCall struct{ Msgs []any }

// GatherReport answers GatherCall: the replies by rank.
type GatherReport struct {
	Replies []any
	Err     error
}

// ranked is a reply a GatherCall collects.
type ranked interface {
	GetRank() uint32
	GetError() string
}

// CancelCall fails the call in flight, if any, with Reason (an elastic
// leader whose world was superseded stops waiting on a hung member).
type CancelCall struct{ Reason string }

// ReadyCall is answered with a *ReadyReport once every rank has said hello
// (at once when the workers were given at spawn time).
type ReadyCall struct{}

// ReadyReport answers ReadyCall.
type ReadyReport struct{ Err error }

// WorkerLost reports a worker process that exited (its launcher saw it):
// the same failure signal as a Terminated watch, sometimes earlier.
type WorkerLost struct {
	Rank  int
	Cause string
}

// callKind is what the Coordinator is waiting for.
type callKind int

const (
	callNone callKind = iota
	callStep
	callEval
	callWeights
	callSave
	callGather
)

func (k callKind) String() string {
	return [...]string{"none", "step", "eval", "weights", "save", "gather"}[k]
}

type coordinator struct {
	cfg      CoordinatorConfig
	log      *zap.Logger
	workers  []*actor.PID
	hellos   int
	ready    []*actor.PID // ReadyCall callers waiting for the hellos
	lost     map[int]string
	kind     callKind
	caller   *actor.PID
	dones    []*actorspb.StepDone
	evals    map[int]*actorspb.EvalDone
	weights  map[int]*actorspb.Weights
	saved    map[int]*actorspb.ShardSaved
	gathered []any
	expect   int
	answered int
	step     uint64
}

// SpawnCoordinator spawns the Coordinator under CoordinatorActorName.
func SpawnCoordinator(sys *System, cfg CoordinatorConfig) (*actor.PID, error) {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 10 * time.Minute
	}
	if cfg.Workers != nil {
		cfg.World = len(cfg.Workers)
	}
	if cfg.World < 1 {
		return nil, fmt.Errorf("%w: a coordinator needs at least one worker", ErrBadConfig)
	}
	if len(cfg.EvalRanks) == 0 {
		cfg.EvalRanks = []int{0}
	}
	for _, r := range cfg.EvalRanks {
		if r < 0 || r >= cfg.World {
			return nil, fmt.Errorf("%w: eval rank %d of a world of %d", ErrBadConfig, r, cfg.World)
		}
	}
	a := &coordinator{cfg: cfg, log: sys.Logger(), lost: map[int]string{}}
	a.workers = make([]*actor.PID, cfg.World)
	if cfg.Workers != nil {
		copy(a.workers, cfg.Workers)
		a.hellos = cfg.World
	}
	props := actor.PropsFromProducer(func() actor.Actor { return a })
	name := cfg.Name
	if name == "" {
		name = CoordinatorActorName
	}
	return sys.Root().SpawnNamed(props, name)
}

func (a *coordinator) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		for _, w := range a.workers {
			if w != nil {
				c.Watch(w)
			}
		}
	case *actorspb.WorkerHello:
		a.hello(c, m)
	case *ReadyCall:
		if a.hellos == a.cfg.World {
			c.Respond(&ReadyReport{})
		} else {
			a.ready = append(a.ready, c.Sender())
		}
	case *StepCall:
		if a.busy(c) {
			return
		}
		a.kind, a.caller, a.answered, a.step = callStep, c.Sender(), 0, m.Req.Step
		a.dones = make([]*actorspb.StepDone, a.cfg.World)
		for _, w := range a.workers {
			c.Request(w, m.Req)
		}
		c.SetReceiveTimeout(a.cfg.CallTimeout)
	case *actorspb.StepDone:
		if a.kind != callStep || m.Step != a.step || int(m.Rank) >= len(a.dones) || a.dones[m.Rank] != nil {
			return // a late answer to an abandoned step
		}
		a.dones[m.Rank] = m
		a.answered++
		if m.Error != "" {
			a.finish(c, fmt.Errorf("rank %d: %s", m.Rank, m.Error))
		} else if a.answered == a.cfg.World {
			a.finish(c, nil)
		}
	case *EvalCall:
		if a.busy(c) {
			return
		}
		a.kind, a.caller, a.evals = callEval, c.Sender(), map[int]*actorspb.EvalDone{}
		for _, r := range a.cfg.EvalRanks {
			c.Request(a.workers[r], &actorspb.EvalRequest{Lo: uint64(m.Lo), Hi: uint64(m.Hi)})
		}
		c.SetReceiveTimeout(a.cfg.CallTimeout)
	case *actorspb.EvalDone:
		if a.kind != callEval || a.evals[int(m.Rank)] != nil {
			return
		}
		if m.Error != "" {
			a.reply(c, &EvalReport{Err: fmt.Errorf("rank %d: %s", m.Rank, m.Error)})
			return
		}
		a.evals[int(m.Rank)] = m
		if len(a.evals) < len(a.cfg.EvalRanks) {
			return
		}
		sum := &actorspb.EvalDone{}
		for _, d := range a.evals {
			sum.LossSum += d.LossSum
			sum.Targets += d.Targets
			sum.Correct += d.Correct
			sum.Rows = max(sum.Rows, d.Rows)
		}
		a.reply(c, &EvalReport{Done: sum})
	case *WeightsCall:
		if a.busy(c) {
			return
		}
		a.kind, a.caller, a.weights = callWeights, c.Sender(), map[int]*actorspb.Weights{}
		for _, r := range a.cfg.EvalRanks {
			c.Request(a.workers[r], &actorspb.WeightsRequest{})
		}
		c.SetReceiveTimeout(a.cfg.CallTimeout)
	case *actorspb.Weights:
		if a.kind != callWeights || a.weights[int(m.Rank)] != nil {
			return
		}
		if m.Error != "" {
			a.reply(c, &WeightsReport{Err: fmt.Errorf("rank %d: %s", m.Rank, m.Error)})
			return
		}
		a.weights[int(m.Rank)] = m
		if len(a.weights) < len(a.cfg.EvalRanks) {
			return
		}
		var all []byte
		for _, r := range a.cfg.EvalRanks {
			all = append(all, a.weights[r].Data...)
		}
		a.reply(c, &WeightsReport{Weights: BytesToFloats(all)})
	case *SaveCall:
		if a.busy(c) {
			return
		}
		a.kind, a.caller, a.saved = callSave, c.Sender(), map[int]*actorspb.ShardSaved{}
		for _, w := range a.workers {
			c.Request(w, m.Req)
		}
		c.SetReceiveTimeout(a.cfg.CallTimeout)
	case *actorspb.ShardSaved:
		if a.kind != callSave || a.saved[int(m.Rank)] != nil {
			return
		}
		if m.Error != "" {
			a.reply(c, &SaveReport{Err: fmt.Errorf("rank %d: %s", m.Rank, m.Error)})
			return
		}
		a.saved[int(m.Rank)] = m
		if len(a.saved) == a.cfg.World {
			var n int64
			for _, s := range a.saved {
				n += int64(s.Bytes)
			}
			a.reply(c, &SaveReport{Bytes: n})
		}
	case *GatherCall:
		if a.busy(c) {
			return
		}
		if len(m.Msgs) != a.cfg.World {
			c.Respond(&GatherReport{Err: fmt.Errorf("%w: %d messages for %d ranks", ErrBadConfig, len(m.Msgs), a.cfg.World)})
			return
		}
		a.kind, a.caller, a.gathered, a.answered, a.expect = callGather, c.Sender(), make([]any, a.cfg.World), 0, 0
		for r, msg := range m.Msgs {
			if msg != nil {
				c.Request(a.workers[r], msg)
				a.expect++
			}
		}
		if a.expect == 0 {
			a.reply(c, &GatherReport{Replies: a.gathered})
			return
		}
		c.SetReceiveTimeout(a.cfg.CallTimeout)
	case ranked:
		r := int(m.GetRank())
		if a.kind != callGather || r >= len(a.gathered) || a.gathered[r] != nil {
			return
		}
		if e := m.GetError(); e != "" {
			a.reply(c, &GatherReport{Err: fmt.Errorf("rank %d: %s", r, e)})
			return
		}
		a.gathered[r] = m
		if a.answered++; a.answered == a.expect {
			a.reply(c, &GatherReport{Replies: a.gathered})
		}
	case *CancelCall:
		if a.kind != callNone {
			a.finish(c, fmt.Errorf("%w: %s", ErrCanceled, m.Reason))
		}
	case *actor.Terminated:
		for r, w := range a.workers {
			if w != nil && w.Equal(m.Who) {
				a.lose(c, r, fmt.Sprintf("its actor %s terminated", m.Who.Id))
			}
		}
	case *WorkerLost:
		a.lose(c, m.Rank, m.Cause)
	case *actor.ReceiveTimeout:
		if a.kind == callNone {
			c.CancelReceiveTimeout()
			return
		}
		a.finish(c, fmt.Errorf("%w: %s call: %s did not answer within %v", ErrPeerSilent, a.kind, a.silent(), a.cfg.CallTimeout))
	}
}

// hello registers a worker process.
func (a *coordinator) hello(c actor.Context, m *actorspb.WorkerHello) {
	r := int(m.Rank)
	if m.Protocol != TrainProtocol || r >= a.cfg.World || a.workers[r] != nil {
		a.log.Warn("refused worker hello", zap.Uint32("rank", m.Rank), zap.String("address", m.Address),
			zap.Uint32("protocol", m.Protocol), zap.Int("want_protocol", TrainProtocol))
		return
	}
	pid := actor.NewPID(m.Address, WorkerActorName)
	a.workers[r] = pid
	c.Watch(pid)
	a.hellos++
	a.log.Info("worker joined", zap.Int("rank", r), zap.String("address", m.Address), zap.Int("ready", a.hellos), zap.Int("world", a.cfg.World))
	if a.hellos == a.cfg.World {
		for _, p := range a.ready {
			c.Send(p, &ReadyReport{})
		}
		a.ready = nil
	}
}

// busy refuses a call while another is in flight or after a rank was lost.
func (a *coordinator) busy(c actor.Context) bool {
	var err error
	switch {
	case len(a.lost) > 0:
		err = a.lostErr()
	case a.kind != callNone:
		err = fmt.Errorf("%w: a %s call is in flight", ErrBadConfig, a.kind)
	case a.hellos < a.cfg.World:
		err = fmt.Errorf("%w: only %d of %d workers are ready", ErrBadConfig, a.hellos, a.cfg.World)
	default:
		return false
	}
	c.Respond(a.errorReport(callKindOf(c.Message()), err))
	return true
}

func callKindOf(m any) callKind {
	switch m.(type) {
	case *StepCall:
		return callStep
	case *EvalCall:
		return callEval
	case *WeightsCall:
		return callWeights
	case *SaveCall:
		return callSave
	case *GatherCall:
		return callGather
	}
	return callNone
}

func (a *coordinator) errorReport(k callKind, err error) any {
	switch k {
	case callStep:
		return &StepReport{Err: err}
	case callEval:
		return &EvalReport{Err: err}
	case callWeights:
		return &WeightsReport{Err: err}
	case callSave:
		return &SaveReport{Err: err}
	case callGather:
		return &GatherReport{Err: err}
	}
	return &ReadyReport{Err: err}
}

// lose records a lost rank and fails whatever is in flight.
func (a *coordinator) lose(c actor.Context, rank int, cause string) {
	if _, dup := a.lost[rank]; dup {
		return
	}
	a.lost[rank] = cause
	a.log.Error("worker lost", zap.Int("rank", rank), zap.String("cause", cause))
	if a.kind != callNone {
		a.finish(c, a.lostErr())
	}
	for _, p := range a.ready {
		c.Send(p, &ReadyReport{Err: a.lostErr()})
	}
	a.ready = nil
}

func (a *coordinator) lostErr() error {
	var parts []string
	for r := range a.cfg.World {
		if cause, ok := a.lost[r]; ok {
			parts = append(parts, fmt.Sprintf("rank %d (%s)", r, cause))
		}
	}
	return fmt.Errorf("%w: %s", ErrPeerLost, strings.Join(parts, ", "))
}

// silent names the ranks that have not answered the step in flight.
func (a *coordinator) silent() string {
	var rs []string
	switch a.kind {
	case callStep:
		for r, d := range a.dones {
			if d == nil {
				rs = append(rs, fmt.Sprint(r))
			}
		}
	case callEval:
		for _, r := range a.cfg.EvalRanks {
			if a.evals[r] == nil {
				rs = append(rs, fmt.Sprint(r))
			}
		}
	case callWeights:
		for _, r := range a.cfg.EvalRanks {
			if a.weights[r] == nil {
				rs = append(rs, fmt.Sprint(r))
			}
		}
	case callSave:
		for r := range a.cfg.World {
			if a.saved[r] == nil {
				rs = append(rs, fmt.Sprint(r))
			}
		}
	case callGather:
		for r, g := range a.gathered {
			if g == nil {
				rs = append(rs, fmt.Sprint(r))
			}
		}
	}
	return "rank(s) " + strings.Join(rs, ", ")
}

func (a *coordinator) finish(c actor.Context, err error) {
	switch a.kind {
	case callStep:
		a.reply(c, &StepReport{Dones: a.dones, Err: err})
	default:
		a.reply(c, a.errorReport(a.kind, err))
	}
}

func (a *coordinator) reply(c actor.Context, msg any) {
	c.Send(a.caller, msg)
	a.kind, a.caller, a.dones, a.evals, a.weights, a.saved, a.gathered = callNone, nil, nil, nil, nil, nil, nil
	c.CancelReceiveTimeout()
}

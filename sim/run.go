package sim

import (
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/elastic"
	"github.com/troupe-ml/troupe/train/leader"
)

// Config is a simulated job and its faults.
type Config struct {
	// Nodes is how many nodes start the job (default 3); joins bring up to
	// two more.
	Nodes int
	// Steps is the job's length, Batch its global batch, Samples the
	// dataset's size (defaults 30, 12, 60: six epochs).
	Steps, Batch, Samples int
	// Faults is the rate of node and network faults per virtual second
	// (crash, hang, partition, join, leave); each message is also dropped,
	// duplicated or delayed past later ones with probability Faults/20
	// each. 0: a fault-free run.
	Faults float64
	// CkptEvery is the checkpoint interval in steps (default 5; 0: none).
	CkptEvery int
	// MinNodes is the rendezvous' smallest world (default 1).
	MinNodes int
	// Bound is the virtual time within which the job must end (default 10
	// min); faults stop at half of it, so that the job must recover.
	Bound time.Duration
	// PP is the pipeline depth (1 or 2: the model's two layers) and TP
	// the tensor-parallel shards of each stage (1, 2, 4 or 8: they cut
	// the hidden layer's 8 units); 0 reads as 1. A generation's mesh is
	// then PP × DP × TP, with DP as many replicas as its members fill, and
	// each rank holds one part of the model (see partIndex). MinNodes must
	// be at least PP·TP: a smaller world holds no replica.
	PP, TP int
	// Zero is the ZeRO stage (0: none; 1: each rank of a shard group
	// holds 1/ZeroGroup of its part's optimizer state, the momentum; 2:
	// the gradients are reduce-scattered over the shard group, not
	// all-reduced; 3: the parameters are sharded too, all-gathered before
	// the step's forward). ZeroGroup is the shard group's size (default 2
	// with Zero): the replicas of a part form groups of that many, and
	// the slots (part × shard, mesh.Mesh.Slot) are replicated across the
	// groups (hybrid sharding). MinNodes must be at least
	// PP·TP·ZeroGroup.
	Zero, ZeroGroup int
}

// parts is the number of model parts a replica is cut into.
func (c Config) parts() int { return max(1, c.PP) * max(1, c.TP) }

// zeroGroup is the ZeRO shard group size (0: no ZeRO).
func (c Config) zeroGroup() int {
	if c.Zero == 0 {
		return 0
	}
	if c.ZeroGroup == 0 {
		return 2
	}
	return c.ZeroGroup
}

// slots is the number of slots: parts, each cut into zeroGroup shards.
func (c Config) slots() int { return c.parts() * max(1, c.zeroGroup()) }

// sharded: the state a rank holds is not its whole part (a model in
// parts, or ZeRO).
func (c Config) sharded() bool { return c.slots() > 1 }

// DefaultConfig is the job troupe sim runs.
func DefaultConfig() Config {
	return Config{Nodes: 3, Steps: 30, Batch: 12, Samples: 60, Faults: 0.5, CkptEvery: 5, MinNodes: 1, Bound: 10 * time.Minute}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 1 || c.Nodes > 16:
		return fmt.Errorf("sim: nodes %d: want 1 to 16", c.Nodes)
	case c.Steps < 1:
		return fmt.Errorf("sim: steps %d: want at least 1", c.Steps)
	case c.Batch < 1 || c.Samples < c.Batch:
		return fmt.Errorf("sim: batch %d of %d samples: want 1 ≤ batch ≤ samples", c.Batch, c.Samples)
	case c.Faults < 0 || c.Faults > 10:
		return fmt.Errorf("sim: fault rate %g: want 0 to 10 per virtual second", c.Faults)
	case c.CkptEvery < 0:
		return fmt.Errorf("sim: checkpoint interval %d: want 0 (none) or more steps", c.CkptEvery)
	case c.MinNodes < 1 || c.MinNodes > c.Nodes:
		return fmt.Errorf("sim: min nodes %d: want 1 to nodes (%d)", c.MinNodes, c.Nodes)
	case c.Bound <= 0:
		return fmt.Errorf("sim: bound %s: want a positive virtual time", c.Bound)
	case c.PP < 0 || c.PP > 2:
		return fmt.Errorf("sim: pp %d: want 1 or 2 pipeline stages (the model has two layers)", c.PP)
	case c.TP < 0 || c.TP > 0 && hidden%c.TP != 0:
		return fmt.Errorf("sim: tp %d: want 1, 2, 4 or 8 tensor-parallel shards (of %d hidden units)", c.TP, hidden)
	case c.Zero < 0 || c.Zero > 3:
		return fmt.Errorf("sim: zero %d: want 0 (none), 1, 2 or 3", c.Zero)
	case c.ZeroGroup < 0 || c.ZeroGroup == 1 || c.ZeroGroup > 0 && c.Zero == 0:
		return fmt.Errorf("sim: zero group %d: want 2 or more, with a ZeRO stage", c.ZeroGroup)
	case c.Zero == 3 && c.parts() > 1:
		return fmt.Errorf("sim: zero 3 with pp×tp = %d: a model in parts with ZeRO-3 is not simulated (stages 1 and 2 are)", c.parts())
	case c.Nodes < c.slots():
		return fmt.Errorf("sim: nodes %d: want at least pp×tp×zero group = %d (one replica)", c.Nodes, c.slots())
	case c.MinNodes < c.slots():
		return fmt.Errorf("sim: min nodes %d: want at least pp×tp×zero group = %d (a smaller world holds no replica)", c.MinNodes, c.slots())
	case c.Nodes < c.parts():
		return fmt.Errorf("sim: nodes %d: want at least pp×tp = %d (one replica)", c.Nodes, c.parts())
	case c.MinNodes < c.parts():
		return fmt.Errorf("sim: min nodes %d: want at least pp×tp = %d (a smaller world holds no replica)", c.MinNodes, c.parts())
	}
	return nil
}

// Result is one seed's run.
type Result struct {
	Seed uint64 `json:"seed"`
	// Faults counts the faults injected (node, network and message ones).
	Faults int `json:"faults"`
	// Violation is the first broken invariant (nil: none).
	Violation *Violation `json:"violation,omitempty"`
	// Outcome is "finished", the permanent failure the job ended with, or
	// why it stalled.
	Outcome string `json:"outcome"`
	// Generations committed; Steps run on the leaders (a step run again
	// after a failure counts again).
	Generations int `json:"generations"`
	Steps       int `json:"steps"`
	// TornWrites counts the checkpoint writes torn, Restores the replicas
	// restored from a checkpoint.
	TornWrites int `json:"torn_writes"`
	Restores   int `json:"restores"`
	// Virtual is the virtual time the run took, Events how many events ran.
	Virtual time.Duration `json:"virtual_ns"`
	// LossDiff is the largest relative difference of a step's loss from
	// the fault-free run's (0 when not compared).
	LossDiff float64 `json:"loss_rel_diff"`
	Events   int     `json:"events"`
}

type sim struct {
	cfg      Config
	rng      *rand.Rand
	clk      clock
	nodes    map[string]*node
	order    []string
	side     map[string]int // partition side by node name (0: the majority)
	data     *dataset
	sampler  *data.Sampler
	check    checker
	trace    io.Writer
	faults   int
	msgFault float64
	nextName int
	// fs is the job's checkpoint storage; tearNext: the next save is torn.
	fs                   *checkpoint.MemFS
	tearNext             bool
	tornWrites, restores int
	stepsRun             int
	// partIdx is each model part's positions in the model (partIndex),
	// grads each replica's gradient of a step (replicaGradient): both used
	// when the model is cut into parts.
	partIdx [][]int
	grads   map[gradKey][]float32

	ended  bool
	endAt  time.Duration
	result error
	// stalled is the world whose quorum the faults killed (the job waits
	// for it by design); Gen 0: none.
	stalled elastic.World
	// short is how many nodes lived when the job waited at the bound for
	// a smallest world of more (0: it did not).
	short int
}

func (s *sim) tracef(format string, args ...any) {
	if s.trace != nil {
		fmt.Fprintf(s.trace, "%10.6f "+format+"\n", append([]any{s.clk.now.Seconds()}, args...)...)
	}
}

func (s *sim) leaderConfig() leader.Config {
	return leader.Config{PP: max(1, s.cfg.PP), TP: max(1, s.cfg.TP), ZeroGroup: s.cfg.zeroGroup(), ZeroShards: s.zeroShards(), MicroBatches: 1, Batch: s.cfg.Batch, Target: s.cfg.Steps,
		LostStageTimeout: 20 * time.Second, RetryDelay: time.Second, Resume: s.cfg.CkptEvery > 0}
}

// zeroShards is the leader core's ZeroShards: the shard group at stage 3.
func (s *sim) zeroShards() int {
	if s.cfg.Zero == 3 {
		return s.cfg.zeroGroup()
	}
	return 0
}

// samplerSeed is the job's sampler seed.
const samplerSeed = 1

// Run runs seed's schedule on cfg, writing its event trace to trace (nil:
// none). ref is the fault-free run to compare with (nil: not compared; see
// Reference).
func Run(cfg Config, seed uint64, trace io.Writer, ref *Reference) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	goroutines := runtime.NumGoroutine()
	s := newSim(cfg, seed, trace)
	s.run()
	var r *reference
	if ref != nil {
		r = &ref.r
	}
	s.check.final(r)
	if n := runtime.NumGoroutine(); n > goroutines {
		s.check.fail(InvGoroutines, "%d goroutines before the run, %d after", goroutines, n)
	}
	res := Result{Seed: seed, Faults: s.faults, Violation: s.check.violation, Outcome: "finished",
		Generations: len(s.check.worlds), Steps: s.stepsRun, Virtual: s.clk.now, Events: s.clk.runs, LossDiff: s.check.lossDiff,
		TornWrites: s.tornWrites, Restores: s.restores}
	switch {
	case s.stalled.Gen > 0:
		res.Outcome = fmt.Sprintf("stalled: no live node's committed world has a live majority (newest: generation %d); the rendezvous waits for its members", s.stalled.Gen)
	case s.short > 0:
		res.Outcome = fmt.Sprintf("stalled: %d nodes live, the smallest world is %d; the rendezvous waits for more", s.short, s.cfg.MinNodes)
	case !s.ended:
		res.Outcome = "did not end"
	case s.result != nil:
		res.Outcome = s.result.Error()
	}
	return res, nil
}

func newSim(cfg Config, seed uint64, trace io.Writer) *sim {
	s := &sim{cfg: cfg, rng: rand.New(rand.NewPCG(seed, 0x51d)), nodes: map[string]*node{}, side: map[string]int{},
		data: newDataset(cfg.Samples), trace: trace, msgFault: cfg.Faults / 20, fs: checkpoint.NewMemFS()}
	s.check = checker{s: s, worlds: map[uint64]elastic.World{}, lastGen: map[string]uint64{}, firstApply: map[[3]uint64]rankStep{}, ckpts: map[int][]savedState{}, parts: map[int][]applied{}, tornStep: -1, quietSince: -1}
	smp, err := data.NewSampler(cfg.Samples, samplerSeed, true)
	if err != nil {
		panic(err) // Validate checked the size
	}
	s.sampler = smp
	if k := cfg.parts(); k > 1 {
		s.grads = map[gradKey][]float32{}
		for p := range k {
			s.partIdx = append(s.partIdx, partIndex(max(1, cfg.PP), max(1, cfg.TP), p))
		}
	}
	if cfg.Zero > 0 && s.partIdx == nil {
		s.partIdx = [][]int{partIndex(1, 1, 0)}
	}
	return s
}

// run starts the job's nodes and runs events until the job ended (and
// its members had a moment to finish), an invariant broke, or the bound.
func (s *sim) run() {
	s.tracef("job: %d nodes, %d steps of %d samples from %d, faults %g/s", s.cfg.Nodes, s.cfg.Steps, s.cfg.Batch, s.cfg.Samples, s.cfg.Faults)
	if s.cfg.parts() > 1 {
		s.tracef("model: %d pipeline stages of %d tensor-parallel shards", max(1, s.cfg.PP), max(1, s.cfg.TP))
	}
	if s.cfg.Zero > 0 {
		s.tracef("ZeRO-%d: shard groups of %d", s.cfg.Zero, s.cfg.zeroGroup())
	}
	for range s.cfg.Nodes {
		s.nextName++
		s.startNode(fmt.Sprintf("n%d", s.nextName), 1)
	}
	s.scheduleFault()
	for s.check.violation == nil {
		until := s.cfg.Bound
		if s.ended {
			until = min(until, s.endAt+5*time.Second)
		}
		if !s.clk.next(until) {
			break
		}
		s.check.liveness()
	}
}

// Reference is the fault-free run of a configuration, which the faulty
// runs are compared with.
type Reference struct{ r reference }

// NewReference runs cfg without faults.
func NewReference(cfg Config) (*Reference, error) {
	cfg.Faults = 0
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := newSim(cfg, 0, nil)
	s.run()
	s.check.final(nil)
	if v := s.check.violation; v != nil {
		return nil, fmt.Errorf("sim: the fault-free run broke an invariant: %w", v)
	}
	if s.result != nil || len(s.check.history) != cfg.Steps || len(s.check.parts) != cfg.slots() {
		return nil, fmt.Errorf("sim: the fault-free run did not finish (%v, %d steps, %d of %d slots)", s.result, len(s.check.history), len(s.check.parts), cfg.slots())
	}
	return &Reference{r: reference{history: s.check.history, parts: s.check.parts}}, nil
}

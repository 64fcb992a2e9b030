package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/troupe-ml/troupe/sim"
)

// errViolations: a simulated seed broke an invariant (exit status 1).
var errViolations = errors.New("sim: invariants broken")

var simFlags struct {
	seeds           int
	from            uint64
	seed            uint64
	trace           string
	nodes           int
	faults          float64
	steps           int
	ckptEvery       int
	pp, tp          int
	zero, zeroGroup int
	json            bool
}

var simCmd = &cobra.Command{
	Use:   "sim",
	Short: "Run a whole elastic job in one process on a virtual clock, under seeded faults, and check its invariants",
	Long: `troupe sim runs the elastic training job of --nodes nodes (rendezvous, leader,
collectives, sampler and a small model) in one goroutine on a virtual clock,
with faults drawn from each seed: crash and restart, hang and resume, message
drop, duplication and reordering, partition and heal, join and graceful leave,
and torn checkpoint writes (the writer and the storage crash mid-save).
It checks after every event and at the end: one committed world per
generation, replicas bit-identical at every step and at every generation's
form, the latest checkpoint whole after every torn write and restores equal
to what was saved, every sample trained once per epoch, the fault-free run's weights (or
its losses within 1e-5 when a world had another size), no goroutine left,
that some rank applies a step within a minute of virtual time while a
majority of the newest committed world is alive and connected (liveness),
and that the job ends within 10 minutes of virtual time.

With --pp and --tp the job's mesh is pp × dp × tp and every rank holds one
part of the model (a pipeline stage's tensor-parallel shard): it reduces its
part's gradient over its part's replicas, a new generation takes each part
from a holder of that part or from a checkpoint written part by part, and the
replicas of each part are compared, with each other and with the fault-free
run's same part.

With --zero 1|2|3 the replicas of each part form ZeRO shard groups of
--zero-group ranks (default 2; the world is a multiple of it, the rest wait
on standby): each rank holds its shard of the part's momentum (ZeRO-1),
reduce-scatters the gradient over its group instead of all-reducing it
(ZeRO-2), and holds only its shard of the parameters, all-gathered before
the forward (ZeRO-3; not with --pp or --tp). A slot (part × shard) is taken
from a holder of that slot or from a checkpoint written slot by slot, and
the holders of each slot are compared.

It prints a line per seed that broke an invariant (its seed and the first
invariant broken) and a summary; it exits 1 if any did. --seed S --trace FILE
replays one seed and writes its event trace.`,
	Example: `  troupe sim --seeds 1000
  troupe sim --seeds 200 --from 5000 --nodes 5 --faults 1 --json
  troupe sim --seed 90 --trace seed90.txt
  troupe sim --seeds 2000 --pp 2 --nodes 4
  troupe sim --seeds 2000 --tp 2 --nodes 4
  troupe sim --seeds 2000 --zero 2 --nodes 4
  troupe sim --seeds 2000 --zero 3 --zero-group 2 --nodes 4`,
	Args: cobra.NoArgs,
	RunE: runSim,
}

func init() {
	f := simCmd.Flags()
	f.IntVar(&simFlags.seeds, "seeds", 100, "how many seeds to run")
	f.Uint64Var(&simFlags.from, "from", 1, "the first seed")
	f.Uint64Var(&simFlags.seed, "seed", 0, "run this seed only (with --trace: write its event trace)")
	f.StringVar(&simFlags.trace, "trace", "", "with --seed: write the seed's event trace to this file")
	f.IntVar(&simFlags.nodes, "nodes", sim.DefaultConfig().Nodes, "nodes that start the job (joins add up to two)")
	f.Float64Var(&simFlags.faults, "faults", sim.DefaultConfig().Faults, "node and network faults per virtual second; each message is also dropped, duplicated or delayed with probability RATE/20 each")
	f.IntVar(&simFlags.steps, "steps", sim.DefaultConfig().Steps, "training steps of the simulated job")
	f.IntVar(&simFlags.ckptEvery, "ckpt-every", sim.DefaultConfig().CkptEvery, "checkpoint every N steps (0: none; torn writes need checkpoints)")
	f.IntVar(&simFlags.pp, "pp", 1, "pipeline stages (1 or 2): each rank holds one stage of the model")
	f.IntVar(&simFlags.zero, "zero", 0, "ZeRO stage (0 none, 1 optimizer state, 2 gradients too, 3 parameters too) over shard groups of --zero-group replicas")
	f.IntVar(&simFlags.zeroGroup, "zero-group", 0, "ZeRO shard group size (2 or more; default 2 with --zero)")
	f.IntVar(&simFlags.tp, "tp", 1, "tensor-parallel shards of each stage (1, 2, 4 or 8): each rank holds one stage's shard")
	f.BoolVar(&simFlags.json, "json", false, "print the summary as JSON")
	rootCmd.AddCommand(simCmd)
}

// simSummary is troupe sim's summary (--json).
type simSummary struct {
	Seeds      int    `json:"seeds"`
	From       uint64 `json:"from"`
	Faults     int    `json:"faults"`
	Violations int    `json:"violations"`
	Finished   int    `json:"finished"`
	// Stalled: a majority of a committed world died before it was seen,
	// and the rendezvous waits for it (its strict-majority rule).
	Stalled int `json:"stalled"`
	// Lost: the job ended with every replica lost before a checkpoint.
	Lost int `json:"lost_every_replica"`
	// TornWrites and Restores count the torn checkpoint writes and the
	// replicas restored from checkpoints.
	TornWrites int     `json:"torn_writes"`
	Restores   int     `json:"restores"`
	VirtualS   float64 `json:"virtual_s"`
	WallS      float64 `json:"wall_s"`
	// Failures lists each broken seed's first violation.
	Failures []sim.Result `json:"failures"`
}

func runSim(cmd *cobra.Command, _ []string) error {
	cfg := sim.DefaultConfig()
	cfg.Nodes, cfg.Faults, cfg.Steps, cfg.CkptEvery = simFlags.nodes, simFlags.faults, simFlags.steps, simFlags.ckptEvery
	cfg.PP, cfg.TP, cfg.Zero, cfg.ZeroGroup = simFlags.pp, simFlags.tp, simFlags.zero, simFlags.zeroGroup
	// A world smaller than one replica (pp × tp members, times the ZeRO
	// shard group) trains nothing: the rendezvous waits for that many.
	zg := simFlags.zeroGroup
	if simFlags.zero > 0 && zg == 0 {
		zg = 2
	}
	cfg.MinNodes = max(cfg.MinNodes, simFlags.pp*simFlags.tp*max(1, zg))
	if cfg.MinNodes > cfg.Nodes {
		cfg.MinNodes = cfg.Nodes
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	switch {
	case simFlags.trace != "" && simFlags.seed == 0:
		return fmt.Errorf("%w: --trace needs --seed: it writes one seed's trace", errUsage)
	case simFlags.seeds < 1:
		return fmt.Errorf("%w: --seeds %d: want at least 1", errUsage, simFlags.seeds)
	}
	ref, err := sim.NewReference(cfg)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	first, count := simFlags.from, simFlags.seeds
	if simFlags.seed != 0 {
		first, count = simFlags.seed, 1
	}
	sum := simSummary{Seeds: count, From: first, Failures: []sim.Result{}}
	start := time.Now()
	for i := range count {
		seed := first + uint64(i)
		var trace bytes.Buffer
		var w io.Writer // nil: no trace (a nil *bytes.Buffer would not be)
		if simFlags.trace != "" {
			w = &trace
		}
		r, err := sim.Run(cfg, seed, w, ref)
		if err != nil {
			return err
		}
		if w != nil {
			if err := os.WriteFile(simFlags.trace, trace.Bytes(), 0o644); err != nil {
				return fmt.Errorf("sim: writing the trace: %w", err)
			}
		}
		sum.Faults += r.Faults
		sum.TornWrites += r.TornWrites
		sum.Restores += r.Restores
		sum.VirtualS += r.Virtual.Seconds()
		switch {
		case r.Outcome == "finished":
			sum.Finished++
		case strings.HasPrefix(r.Outcome, "stalled"):
			sum.Stalled++
		case r.Violation == nil:
			sum.Lost++
		}
		if r.Violation != nil {
			sum.Violations++
			sum.Failures = append(sum.Failures, r)
			if !simFlags.json {
				fmt.Fprintf(out, "seed %d: %s: %s (replay: %s)\n", seed, r.Violation.Invariant, r.Violation.Detail, simReplay(cmd.Flags(), seed))
			}
		}
		if (i+1)%1000 == 0 && !simFlags.json {
			fmt.Fprintf(cmd.ErrOrStderr(), "%d of %d seeds, %d violations\n", i+1, count, sum.Violations)
		}
	}
	sum.WallS = time.Since(start).Seconds()
	if simFlags.json {
		if err := writeJSON(out, sum); err != nil {
			return err
		}
	} else {
		restored, replica := "replicas", "replica"
		if cfg.PP*cfg.TP > 1 {
			restored, replica = "parts", "replica of a part"
		}
		if cfg.Zero > 0 {
			restored, replica = "slots", "replica of a slot"
		}
		fmt.Fprintf(out, "%d seeds from %d: %d faults (%d torn checkpoint writes), %d violations; %d finished training (%d %s restored from checkpoints), %d stalled (without a quorum, or with fewer live nodes than the smallest world), %d lost every %s before a checkpoint; %.0f s virtual in %.2f s\n",
			sum.Seeds, sum.From, sum.Faults, sum.TornWrites, sum.Violations, sum.Finished, sum.Restores, restored, sum.Stalled, sum.Lost, replica, sum.VirtualS, sum.WallS)
		if simFlags.trace != "" {
			fmt.Fprintf(out, "trace: %s\n", simFlags.trace)
		}
	}
	if sum.Violations > 0 {
		return fmt.Errorf("%w: %d of %d seeds", errViolations, sum.Violations, sum.Seeds)
	}
	return nil
}

// simJobFlags are the flags that shape the simulated job (not which seeds
// run or how they are reported): a replay of a seed needs each of them
// that the sweep set, or it replays another job.
var simJobFlags = []string{"nodes", "pp", "tp", "zero", "zero-group", "faults", "steps", "ckpt-every"}

// simReplay is the command that replays seed of the sweep run with flags
// fs: every job flag whose value is not its default, then the seed and a
// trace file.
func simReplay(fs *pflag.FlagSet, seed uint64) string {
	args := []string{"troupe", "sim"}
	for _, name := range simJobFlags {
		if f := fs.Lookup(name); f != nil && f.Value.String() != f.DefValue {
			args = append(args, "--"+name, f.Value.String())
		}
	}
	args = append(args, "--seed", fmt.Sprint(seed), "--trace", fmt.Sprintf("seed%d.txt", seed))
	return strings.Join(args, " ")
}

package leader

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/internal/scripttest"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/elastic"
	"github.com/troupe-ml/troupe/failure"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// TestLeaderInteraction runs the scripts in testdata/*.txt against
// the leader core, in the style of elastic's interaction tests: each block
// is a command, a "----" line and the output it must print (up to a blank
// line); lines starting with # are comments. Every node has its own core;
// simulated members answer the leader's calls with what worker.Holding.Plan
// makes of them. Commands:
//
//	config stages=P micro=M batch=B target=T [zero=S [zero3]] [lost-timeout=D] [retry=D] [linear-lr] [resume] [resume-required]
//	       [max-restarts=N] [rdzv-timeout=D]
//	start n1 n2 ...      new members, holding nothing
//	commit n1 n2 ...     a world of these members (in rank order) commits
//	deliver [only=n1,n2] the leader's pending call reaches every live member
//	                     (or only those listed, and its answers never come)
//	deliver stale        the answers to the call before the last commit come
//	train [steps=N] [torn=n2,...] [fail=CODE:message] [diverge=RANK]
//	                     the leader's step loop trains N steps (default: to
//	                     the target); torn members miss the last one's update;
//	                     fail ends the loop with that failure; diverge with
//	                     the replica checksums showing rank RANK apart
//	kill n2              n2 dies: it answers nothing more
//	late n2,n3 batch=B   n2 and n3 apply one more step (of batch B): a step
//	                     of the previous generation's loop that reached
//	                     them after they answered this generation's status
//	perturb n2           n2's parameters change (a divergence)
//	checkpoint [none]    a checkpoint of the newest step the members hold
//	                     (none: the checkpoints are gone)
//	tick D               the clock moves D on every node
//	waiting n1 [REASON]  n1's membership keeps it out of any world for
//	                     REASON (none: no longer)
//	state                every member's holding
//
// After every command the invariants are checked: once a generation is
// formed and after every step that did not tear, the replicas of every
// stage hold the same parameters at the same step; no member holds a step
// past the target.
func TestLeaderInteraction(t *testing.T) {
	scripttest.Run(t, "testdata/*.txt", func() scripttest.Sim { return newLeaderSim() })
}

// Exec runs one script command (scripttest.Sim).
func (s *leaderSim) Exec(cmd string) (string, error) {
	s.out.Reset()
	if err := s.exec(cmd); err != nil {
		fmt.Fprintf(&s.out, "error: %v\n", err)
	}
	return s.out.String(), s.check()
}

type leaderSim struct {
	cfg     Config
	now     time.Time
	members map[string]*simMember
	cores   map[string]*Core
	world   elastic.World
	ckpt    Checkpoint
	// The leader's pending call (and the one before the last commit, whose
	// answers come late) and running step loop.
	call   *Call
	stale  *Call
	leader string
	train  *TrainOrder
	formed bool // the current generation's form call was answered
	out    strings.Builder
}

func newLeaderSim() *leaderSim {
	return &leaderSim{
		cfg: Config{PP: 1, MicroBatches: 1, Batch: 8, Target: 10, LostStageTimeout: 10 * time.Second, RetryDelay: 3 * time.Second},
		now: time.Unix(1000, 0), members: map[string]*simMember{}, cores: map[string]*Core{},
		ckpt: Checkpoint{Err: fmt.Errorf("%w: none written", checkpoint.ErrNoCheckpoint)},
	}
}

func (s *leaderSim) exec(line string) error {
	f := strings.Fields(line)
	args := map[string]string{}
	var pos []string
	for _, a := range f[1:] {
		if k, v, ok := strings.Cut(a, "="); ok {
			args[k] = v
		} else {
			pos = append(pos, a)
		}
	}
	switch f[0] {
	case "config":
		return s.config(args, pos)
	case "start":
		for _, n := range pos {
			if s.members[n] != nil && s.members[n].alive {
				return fmt.Errorf("%s runs already", n)
			}
			s.members[n] = &simMember{name: n, h: worker.NoHolding, built: -1, rank: -1, alive: true}
			s.cores[n] = New(s.cfg, s.now)
		}
	case "commit":
		return s.commit(pos)
	case "deliver":
		if slices.Contains(pos, "stale") {
			return s.deliverStale()
		}
		var only []string
		if v, ok := args["only"]; ok {
			only = strings.Split(v, ",")
		}
		return s.deliver(only)
	case "train":
		return s.runTrain(args)
	case "kill":
		for _, n := range pos {
			m := s.members[n]
			if m == nil {
				return fmt.Errorf("no member %s", n)
			}
			m.alive = false
		}
	case "late":
		batch, err := strconv.Atoi(args["batch"])
		if err != nil {
			return fmt.Errorf("late: batch: %v", err)
		}
		for _, n := range strings.Split(pos[0], ",") {
			m := s.members[n]
			if m == nil {
				return fmt.Errorf("no member %s", n)
			}
			m.undo, m.h.Undo, m.h.UndoCursor = m.version, s.cfg.PP > 1 || s.cfg.ZeroGroup > 0, m.h.Cursor
			m.h.Applied++
			m.h.Cursor += data.Cursor(batch)
			m.version++
		}
	case "perturb":
		s.members[pos[0]].perturbed = true
	case "checkpoint":
		if slices.Contains(pos, "none") {
			s.ckpt = Checkpoint{Err: fmt.Errorf("%w: none written", checkpoint.ErrNoCheckpoint)}
			return nil
		}
		return s.checkpoint()
	case "waiting":
		c := s.cores[pos[0]]
		if c == nil {
			return fmt.Errorf("no member %s", pos[0])
		}
		c.Waiting(strings.Join(pos[1:], " "))
		s.drain(pos[0])
	case "tick":
		d, err := time.ParseDuration(pos[0])
		if err != nil {
			return err
		}
		s.now = s.now.Add(d)
		for _, n := range s.alive() {
			s.cores[n].Tick(s.now)
			s.drain(n)
		}
	case "state":
		for _, n := range s.names() {
			m := s.members[n]
			status := "alive"
			if !m.alive {
				status = "dead"
			}
			if m.ended != "" {
				status = m.ended
			}
			shard := ""
			if s.cfg.ZeroGroup > 0 && m.h.Part >= 0 {
				shard = fmt.Sprintf(" shard %d", m.h.ZeroShard)
			}
			fmt.Fprintf(&s.out, "%s: stage %d%s step %d cursor %d undo %v rank %d (%s)\n", n, m.h.Part, shard, m.h.Applied, m.h.Cursor, m.h.Undo, m.rank, status)
		}
	default:
		return fmt.Errorf("unknown command %q", f[0])
	}
	return nil
}

func (s *leaderSim) config(args map[string]string, pos []string) error {
	for key, dst := range map[string]*int{"stages": &s.cfg.PP, "micro": &s.cfg.MicroBatches, "batch": &s.cfg.Batch, "target": &s.cfg.Target, "zero": &s.cfg.ZeroGroup} {
		if v, ok := args[key]; ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return err
			}
			*dst = n
		}
	}
	if v, ok := args["max-restarts"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return err
		}
		s.cfg.MaxRestarts = n
	}
	for key, dst := range map[string]*time.Duration{"lost-timeout": &s.cfg.LostStageTimeout, "retry": &s.cfg.RetryDelay, "rdzv-timeout": &s.cfg.RdzvTimeout} {
		if v, ok := args[key]; ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return err
			}
			*dst = d
		}
	}
	s.cfg.LinearLR, s.cfg.Resume = slices.Contains(pos, "linear-lr"), slices.Contains(pos, "resume")
	s.cfg.ResumeRequired = slices.Contains(pos, "resume-required")
	s.cfg.Resume = s.cfg.Resume || s.cfg.ResumeRequired
	if slices.Contains(pos, "zero3") {
		s.cfg.ZeroShards = s.cfg.ZeroGroup // ZeRO-3: replicas of a shard group hold different weights
	}
	fmt.Fprintf(&s.out, "%d stages, %d micro-batches, batch %d, target %d, lost-stage timeout %s, retry %s, linear-lr %v, resume %v\n",
		s.cfg.PP, s.cfg.MicroBatches, s.cfg.Batch, s.cfg.Target, s.cfg.LostStageTimeout, s.cfg.RetryDelay, s.cfg.LinearLR, s.cfg.Resume)
	if s.cfg.ResumeRequired {
		fmt.Fprintln(&s.out, "a checkpoint is required")
	}
	if s.cfg.MaxRestarts > 0 || s.cfg.RdzvTimeout > 0 {
		fmt.Fprintf(&s.out, "max restarts %d, rendezvous timeout %s\n", s.cfg.MaxRestarts, s.cfg.RdzvTimeout)
	}
	if s.cfg.ZeroGroup > 0 {
		fmt.Fprintf(&s.out, "ZeRO shard groups of %d, stage 3 %v\n", s.cfg.ZeroGroup, s.cfg.ZeroShards > 0)
	}
	return nil
}

func (s *leaderSim) names() []string {
	var out []string
	for n := range s.members {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (s *leaderSim) alive() []string {
	var out []string
	for _, n := range s.names() {
		if s.members[n].alive && s.members[n].ended == "" {
			out = append(out, n)
		}
	}
	return out
}

// commit delivers a new world to every live node's core.
func (s *leaderSim) commit(names []string) error {
	w := elastic.World{Gen: s.world.Gen + 1, Reason: "test"}
	for _, n := range names {
		m := s.members[n]
		if m == nil || !m.alive {
			return fmt.Errorf("no live member %s", n)
		}
		w.Members = append(w.Members, elastic.Member{ID: n, Name: n, ActorAddr: "addr-" + n})
	}
	if s.call != nil {
		s.stale = s.call
	}
	s.world, s.call, s.train, s.formed, s.leader = w, nil, nil, false, names[0]
	for _, n := range s.alive() {
		s.cores[n].Commit(w, n == names[0], s.ckpt)
		s.drain(n)
	}
	return nil
}

// drain prints what node n's core asked for and keeps the call or step
// loop it started.
func (s *leaderSim) drain(n string) {
	for _, o := range s.cores[n].Ready() {
		switch {
		case o.Call != nil:
			s.call = o.Call
			fmt.Fprintf(&s.out, "%s: %s\n", n, s.describeCall(o.Call))
		case o.Train != nil:
			s.train = o.Train
			l := o.Train.Layout
			fmt.Fprintf(&s.out, "%s: train generation %d, %v from step %d (%s), batch %d, lr ×%g\n", n, o.Train.Gen, l.Mesh, l.Step,
				o.Train.StateFrom, o.Train.Batch, o.Train.LRScale)
		case o.Stop != 0:
			fmt.Fprintf(&s.out, "%s: stop the step loop of generation %d\n", n, o.Stop)
		case o.Request != "":
			fmt.Fprintf(&s.out, "%s: request a new generation: %s\n", n, o.Request)
		case o.Wait != "":
			fmt.Fprintf(&s.out, "%s: wait: %s\n", n, o.Wait)
		case o.Done:
			if o.Err != nil {
				fmt.Fprintf(&s.out, "%s: job failed (%s): %v\n", n, failure.CodeOf(o.Err), o.Err)
			} else {
				fmt.Fprintf(&s.out, "%s: job finished\n", n)
			}
		}
	}
}

func (s *leaderSim) describeCall(c *Call) string {
	var parts []string
	for i, msg := range c.Msgs {
		name := s.world.Members[i].Name
		switch m := msg.(type) {
		case *workerpb.StatusRequest:
			parts = append(parts, name)
		case *workerpb.Form:
			if m.Rank < 0 {
				parts = append(parts, fmt.Sprintf("%s standby", name))
				continue
			}
			p := fmt.Sprintf("%s rank %d", name, m.Rank)
			switch worker.SourceKind(m.Source) {
			case worker.FromReplica:
				mm, _ := mesh.New(int(m.Dp), int(m.Pp), max(1, int(m.Tp)))
				p += fmt.Sprintf(" root %d", m.Roots[mm.Slot(int(m.Rank), int(m.ZeroGroup))])
			case worker.FromCheckpoint:
				p += fmt.Sprintf(" checkpoint %d", m.CheckpointStep)
			}
			if m.RollBack {
				p += " roll-back"
			}
			parts = append(parts, p)
		case *workerpb.Finish:
			parts = append(parts, name)
		}
	}
	head := fmt.Sprintf("call %s, generation %d", c.Phase, c.Gen)
	if f, ok := c.Msgs[0].(*workerpb.Form); ok {
		head += fmt.Sprintf(", dp%d×pp%d at step %d", max(f.Dp, 1), max(f.Pp, 1), f.Step)
	}
	if f, ok := c.Msgs[0].(*workerpb.Finish); ok && f.Failure != nil {
		head += fmt.Sprintf(", failed (%s)", failure.Code(f.Failure.Code))
	}
	return head + ": " + strings.Join(parts, " | ")
}

// TestLeaderEnded: the core reports the job's end from the moment it
// decided it (the call that tells every member) on, and not before:
// with no error when the job reached its target with identical replicas,
// with the failure when it failed. The agent reads the other nodes' going
// in that window as the end's consequence (they exit as they hear it).
func TestLeaderEnded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []string // after the world formed and training started
		fails bool
	}{
		{"target", []string{"train", "deliver"}, false},
		{"diverged", []string{"perturb n2", "train steps=3 diverge=1"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newLeaderSim()
			run := func(cmd string) string {
				t.Helper()
				out, err := s.Exec(cmd)
				if err != nil {
					t.Fatalf("%s: %v\n%s", cmd, err, out)
				}
				return out
			}
			run("config stages=1 micro=1 batch=12 target=10")
			run("start n1 n2 n3")
			for _, cmd := range append([]string{"commit n1 n2 n3", "deliver", "deliver"}, tc.steps...) {
				if ended, _ := s.cores["n1"].Ended(); ended {
					t.Fatalf("ended before %q", cmd)
				}
				run(cmd)
			}
			if out := s.call; out == nil || out.Phase != PhaseFinish {
				t.Fatalf("the leader's pending call is %+v, want the finish call", out)
			}
			ended, err := s.cores["n1"].Ended()
			if !ended || (err != nil) != tc.fails {
				t.Fatalf("Ended() = %v, %v while telling every member", ended, err)
			}
			for _, n := range []string{"n2", "n3"} {
				if e, _ := s.cores[n].Ended(); e {
					t.Fatalf("%s, not leading, reports the end", n)
				}
			}
			run("deliver")
			if e, err2 := s.cores["n1"].Ended(); !e || (err2 != nil) != tc.fails {
				t.Fatalf("Ended() = %v, %v after the end", e, err2)
			}
		})
	}
}

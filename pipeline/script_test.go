package pipeline

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/internal/scripttest"
)

// TestScripts runs the interaction scripts in testdata/*.txt, in the style
// of etcd's raft interaction tests: each block is a command, a "----" line
// and the output it must print (up to a blank line). A failing block can be
// replayed by hand, message by message. Commands:
//
//	schedule kind=gpipe|1f1b stages=P micro=M [recompute]
//	    build a schedule, one Cursor per stage, an empty network
//	run stage=S        run stage S's ops until it waits or finishes
//	deliver [n=N]      hand the first N (default all) in-flight messages on
//	inject kind=K micro=I from=A to=B
//	                   hand a forged message to stage B
//	state              every stage's position and what it waits for
//	gantt kind=… stages=P micro=M [fwd= bwd= rec= send= recv= latency= unit= recompute]
//	                   simulate and draw the timeline, then the stats
//
// Run with -rewrite to rewrite the expected output after a deliberate
// change, and read the diff.
func TestScripts(t *testing.T) {
	scripttest.Run(t, "testdata/*.txt", func() scripttest.Sim { return &scriptSim{} })
}

// Exec runs one script command (scripttest.Sim).
func (s *scriptSim) Exec(cmd string) (string, error) { return s.exec(cmd), nil }

// scriptSim is the state a script acts on.
type scriptSim struct {
	s       *Schedule
	cursors []*Cursor
	net     []Message
}

func scriptArgs(fields []string) map[string]string {
	args := map[string]string{}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		args[k] = v
	}
	return args
}

func argInt(args map[string]string, k string, def int) int {
	v, ok := args[k]
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		panic(fmt.Sprintf("argument %s=%q is not a number", k, v))
	}
	return n
}

func argFloat(args map[string]string, k string, def float64) float64 {
	v, ok := args[k]
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		panic(fmt.Sprintf("argument %s=%q is not a number", k, v))
	}
	return f
}

func scriptConfig(args map[string]string) (Config, error) {
	k, err := ParseKind(args["kind"])
	if err != nil {
		return Config{}, err
	}
	_, rc := args["recompute"]
	return Config{Kind: k, Stages: argInt(args, "stages", 1), MicroBatches: argInt(args, "micro", 1), Recompute: rc}, nil
}

func (sim *scriptSim) exec(cmd string) string {
	fields := strings.Fields(cmd)
	args := scriptArgs(fields[1:])
	var b strings.Builder
	switch fields[0] {
	case "schedule":
		cfg, err := scriptConfig(args)
		if err != nil {
			return err.Error()
		}
		s, err := Build(cfg)
		if err != nil {
			return err.Error()
		}
		sim.s, sim.net, sim.cursors = s, nil, make([]*Cursor, s.Stages)
		for i := range sim.cursors {
			sim.cursors[i], _ = NewCursor(s, i)
		}
		return s.String()
	case "run":
		st := argInt(args, "stage", 0)
		cur := sim.cursors[st]
		for {
			op, ok := cur.Next()
			if !ok {
				break
			}
			fmt.Fprintf(&b, "stage %d: %v\n", st, op)
			if op.Kind.IsSend() {
				sim.net = append(sim.net, MessageOf(st, op))
			}
			if err := cur.Done(op); err != nil {
				fmt.Fprintln(&b, err)
			}
		}
		b.WriteString(sim.stageState(st))
	case "deliver":
		n := argInt(args, "n", len(sim.net))
		for _, m := range sim.net[:min(n, len(sim.net))] {
			fmt.Fprintf(&b, "%v: ", m)
			if err := sim.cursors[m.To].Deliver(m); err != nil {
				fmt.Fprintln(&b, err)
			} else {
				fmt.Fprintln(&b, "ok")
			}
		}
		sim.net = sim.net[min(n, len(sim.net)):]
		if b.Len() == 0 {
			b.WriteString("nothing in flight")
		}
	case "inject":
		var kind OpKind
		for k := range numOpKinds {
			if k.String() == args["kind"] {
				kind = k
			}
		}
		m := Message{Kind: kind, Micro: argInt(args, "micro", 0), From: argInt(args, "from", 0), To: argInt(args, "to", 0)}
		if err := sim.cursors[m.To].Deliver(m); err != nil {
			return err.Error()
		}
		return "ok"
	case "state":
		for st := range sim.cursors {
			b.WriteString(sim.stageState(st))
		}
		for _, m := range sim.net {
			fmt.Fprintf(&b, "in flight: %v\n", m)
		}
	case "gantt":
		cfg, err := scriptConfig(args)
		if err != nil {
			return err.Error()
		}
		s, err := Build(cfg)
		if err != nil {
			return err.Error()
		}
		c := StageCost{Forward: argFloat(args, "fwd", 1), Backward: argFloat(args, "bwd", 2), Recompute: argFloat(args, "rec", 1),
			Send: argFloat(args, "send", 0), Recv: argFloat(args, "recv", 0)}
		costs := UniformCosts(s.Stages, c)
		costs.Latency = argFloat(args, "latency", 0)
		tl, err := Simulate(s, costs)
		if err != nil {
			return err.Error()
		}
		if err := tl.Gantt(&b, argFloat(args, "unit", 1)); err != nil {
			return err.Error()
		}
		st := tl.Stats()
		fmt.Fprintf(&b, "makespan %g, compute %g, comm %g, idle %g, bubble %.4f, formula %.4f, peak in flight %v",
			st.Makespan, st.Compute, st.Comm, st.Idle, st.BubbleFraction, FormulaBubble(s.Stages, s.MicroBatches), st.PeakInFlight())
	default:
		return "unknown command " + fields[0]
	}
	return b.String()
}

func (sim *scriptSim) stageState(st int) string {
	cur := sim.cursors[st]
	switch op, waiting := cur.Waiting(); {
	case cur.Finished():
		return fmt.Sprintf("stage %d: finished (%d ops)\n", st, cur.Len())
	case waiting:
		return fmt.Sprintf("stage %d: op %d of %d, waits for %v\n", st, cur.Position(), cur.Len(), op)
	default:
		op, _ := cur.Next()
		return fmt.Sprintf("stage %d: op %d of %d, can run %v\n", st, cur.Position(), cur.Len(), op)
	}
}

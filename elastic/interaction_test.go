package elastic

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/internal/scripttest"
)

// TestInteraction runs the scripts in testdata/*.txt, in the style of
// etcd's raft interaction tests: each block is a command, a "----" line
// and the output it must print (up to a blank line); lines starting with
// # are comments. A failure can be replayed by hand, message by message.
// Nodes are n1, n2, ...; a restarted node's new process is n2@2. Commands:
//
//	config [min=A] [max=B] [quorum=majority|any] [settle=T] [retry=T]
//	                     settings for the nodes created after it
//	add-nodes N          start N new nodes that see each other
//	join ID              start node ID (e.g. 5 or n5)
//	crash ID             kill ID; the nodes that reach it see it fail
//	kill ID              kill ID; nobody notices until "detect ID"
//	detect ID            the nodes that reach ID see it fail
//	leave ID             ID leaves gracefully: it stops leading, the
//	                     others stop proposing it, and it answers as an
//	                     acceptor until it committed a world without
//	                     itself; then it goes (after every command)
//	restart ID           kill ID and start its next process (n2@2)
//	partition 1,2 | 3,4,5
//	                     split the network; each side sees the other fail
//	heal                 reconnect everything
//	deliver [n=K]        deliver queued messages in order (all, or K)
//	drop [from=ID] [to=ID] [type=T]
//	                     drop the queued messages that match
//	net                  list the queued messages
//	tick [N]             N clock ticks on every live node
//	hold ID / release ID the trainer on ID enters a step / reaches its end
//	request ID REASON    the trainer on ID asks for a new generation
//	learn ID FROM        the trainer on ID gets a call of the world FROM
//	                     committed last (Core.Learn), FROM live or not
//	state                every node's status
//
// After every command the safety invariants are checked (one world per
// generation, generations grow, a majority of the previous world). Run
// with -rewrite to regenerate the expected output after a deliberate
// change, and read the diff.
func TestInteraction(t *testing.T) {
	scripttest.Run(t, "testdata/*.txt", func() scripttest.Sim { return newSim() })
}

// Exec runs one script command (scripttest.Sim).
func (s *sim) Exec(cmd string) (string, error) {
	s.out.Reset()
	if err := s.exec(cmd); err != nil {
		fmt.Fprintf(s.out, "error: %v\n", err)
	}
	s.goLeavers()
	return s.out.String(), s.violation
}

// nodeID reads "5", "n5" or "n5@2".
func nodeID(s string) string {
	if _, err := strconv.Atoi(s); err == nil {
		return "n" + s
	}
	return s
}

func (s *sim) node(arg string) (*simNode, error) {
	id := nodeID(arg)
	n, ok := s.nodes[id]
	if !ok || !n.up {
		return nil, fmt.Errorf("no live node %s", id)
	}
	return n, nil
}

func (s *sim) exec(line string) error {
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
	atoi := func(key string, def int) (int, error) {
		v, ok := args[key]
		if !ok {
			return def, nil
		}
		return strconv.Atoi(v)
	}
	switch f[0] {
	case "config":
		var err error
		for _, kv := range []struct {
			key string
			dst *int
		}{{"min", &s.cfg.MinNodes}, {"max", &s.cfg.MaxNodes}, {"settle", &s.cfg.SettleTicks}, {"retry", &s.cfg.RetryTicks}} {
			if *kv.dst, err = atoi(kv.key, *kv.dst); err != nil {
				return err
			}
		}
		if q, ok := args["quorum"]; ok {
			if s.cfg.Quorum, err = ParseQuorum(q); err != nil {
				return err
			}
			s.anyQuorum = s.anyQuorum || s.cfg.Quorum == QuorumAny
		}
		fmt.Fprintf(s.out, "min %d, max %d, quorum %s, settle %d, retry %d\n", s.cfg.MinNodes, s.cfg.MaxNodes, s.cfg.Quorum, s.cfg.SettleTicks, s.cfg.RetryTicks)
	case "add-nodes":
		k, err := strconv.Atoi(pos[0])
		if err != nil {
			return err
		}
		for range k {
			if err := s.start(fmt.Sprintf("n%d", len(s.names())+1), 1); err != nil {
				return err
			}
		}
	case "join":
		return s.start(nodeID(pos[0]), 1)
	case "crash":
		return s.stop(nodeID(pos[0]), false)
	case "leave":
		return s.leave(nodeID(pos[0]))
	case "kill":
		return s.kill(nodeID(pos[0]))
	case "detect":
		s.detect(nodeID(pos[0]), false)
	case "restart":
		id := nodeID(pos[0])
		n, ok := s.nodes[id]
		if !ok {
			return fmt.Errorf("no node %s", id)
		}
		if n.up {
			if err := s.kill(id); err != nil {
				return err
			}
		}
		return s.start(n.m.Name, int(n.m.Start)+1)
	case "partition":
		var groups [][]string
		for _, side := range strings.Split(strings.TrimPrefix(line, "partition"), "|") {
			var g []string
			for _, id := range strings.Split(strings.TrimSpace(side), ",") {
				g = append(g, nodeID(strings.TrimSpace(id)))
			}
			groups = append(groups, g)
		}
		s.partition(groups)
	case "heal":
		s.heal()
	case "deliver":
		k, err := atoi("n", -1)
		if err != nil {
			return err
		}
		s.deliverAll(k)
	case "drop":
		kept := s.net[:0]
		for _, m := range s.net {
			if (args["from"] == "" || nodeID(args["from"]) == m.From) && (args["to"] == "" || nodeID(args["to"]) == m.To) &&
				(args["type"] == "" || args["type"] == m.Type.String()) {
				fmt.Fprintf(s.out, "dropped %s\n", m)
				continue
			}
			kept = append(kept, m)
		}
		s.net = kept
	case "net":
		for _, m := range s.net {
			fmt.Fprintln(s.out, m)
		}
	case "tick":
		k := 1
		if len(pos) > 0 {
			var err error
			if k, err = strconv.Atoi(pos[0]); err != nil {
				return err
			}
		}
		before := len(s.net)
		for range k {
			s.tick()
		}
		if q := len(s.net); q > before {
			fmt.Fprintf(s.out, "%d messages queued\n", q)
		}
	case "hold", "release":
		n, err := s.node(pos[0])
		if err != nil {
			return err
		}
		if f[0] == "hold" {
			n.core.Hold()
		} else {
			n.core.Release()
		}
		s.flush(n)
	case "request":
		n, err := s.node(pos[0])
		if err != nil {
			return err
		}
		n.core.Request(strings.Join(pos[1:], " "))
		s.flush(n)
	case "learn":
		n, err := s.node(pos[0])
		if err != nil {
			return err
		}
		from, ok := s.nodes[nodeID(pos[1])]
		if !ok {
			return fmt.Errorf("no node %s", nodeID(pos[1]))
		}
		n.core.Learn(from.core.Committed())
		s.flush(n)
	case "state":
		s.state()
	default:
		return fmt.Errorf("unknown command %q", f[0])
	}
	return nil
}

// names lists the distinct node names created so far.
func (s *sim) names() map[string]bool {
	names := map[string]bool{}
	for _, n := range s.nodes {
		names[n.m.Name] = true
	}
	return names
}

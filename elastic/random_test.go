package elastic

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
)

var (
	simSeed  = flag.Uint64("seed", 0, "run the randomized simulation with this seed only, printing every step")
	simSeeds = flag.Int("seeds", 400, "how many seeds the randomized simulation runs")
)

// TestRandomized drives simulated clusters through random schedules of
// joins, crashes, undetected kills, leaves, restarts, partitions and heals,
// with messages delivered out of order, dropped and duplicated, and
// trainers holding steps. After every step it checks the safety
// invariants (sim.observe): never two different worlds for one
// generation, generations only grow on every node, each world holds a
// strict majority of the previous one, sizes within min..max. At the end it
// heals the network, releases the holds and checks liveness: if a quorum
// of the last world is alive, every live node commits one world with the
// nodes it should hold. A failure names its seed; rerun it with
// -seed=N -v to read the schedule message by message.
func TestRandomized(t *testing.T) {
	if *simSeed != 0 {
		s, err := runRandom(*simSeed, true)
		t.Log(s.out.String())
		if err != nil {
			t.Fatalf("seed %d: %v", *simSeed, err)
		}
		return
	}
	n := *simSeeds
	if testing.Short() {
		n /= 4
	}
	live := 0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		s, err := runRandom(seed, false)
		if err != nil {
			t.Fatalf("seed %d: %v (rerun with -run TestRandomized -seed=%d -v)", seed, err, seed)
		}
		if s.liveness {
			live++
		}
	}
	// A schedule so harsh that no quorum survives checks safety only; make
	// sure enough of them check liveness too.
	t.Logf("%d seeds, %d ended with a quorum alive and converged", n, live)
	if live < n/4 {
		t.Errorf("only %d of %d seeds checked liveness", live, n)
	}
}

func runRandom(seed uint64, verbose bool) (*sim, error) {
	r := rand.New(rand.NewPCG(seed, 0x7e1a5))
	s := newSim()
	s.quiet = !verbose
	s.cfg.MinNodes = 1 + r.IntN(2)
	if r.IntN(3) == 0 {
		s.cfg.MaxNodes = s.cfg.MinNodes + 2 + r.IntN(3)
	}
	s.cfg.SettleTicks = r.IntN(3)
	s.cfg.RetryTicks = 2 + r.IntN(4)
	s.printf("seed %d: min %d max %d settle %d retry %d\n", seed, s.cfg.MinNodes, s.cfg.MaxNodes, s.cfg.SettleTicks, s.cfg.RetryTicks)

	nextName := 1
	newNode := func() {
		_ = s.start(fmt.Sprintf("n%d", nextName), 1)
		nextName++
	}
	for range 3 + r.IntN(3) {
		newNode()
	}
	// A partition before the first world forms would form one world per
	// side: the protocol's documented limit (only --min-nodes above half
	// prevents it), so partitions wait for the first commit.
	formed := func() bool { return len(s.worlds) > 0 }
	pick := func() (string, bool) {
		up := s.upIDs()
		if len(up) == 0 {
			return "", false
		}
		return up[r.IntN(len(up))], true
	}
	held := map[string]bool{}
	steps := 150 + r.IntN(150)
	for step := 0; step < steps && s.violation == nil; step++ {
		// Each action has a share of 1000; faults are rare enough that most
		// schedules end with a quorum alive, so liveness gets checked too.
		k := r.IntN(1000)
		switch {
		case k < 300: // deliver a random message (reordering)
			if len(s.net) > 0 {
				s.deliverAt(r.IntN(len(s.net)))
			}
		case k < 450:
			s.tick()
		case k < 500: // drop
			if len(s.net) > 0 {
				i := r.IntN(len(s.net))
				s.printf("drop %s\n", s.net[i])
				s.net = append(s.net[:i], s.net[i+1:]...)
			}
		case k < 540: // duplicate
			if len(s.net) > 0 {
				m := s.net[r.IntN(len(s.net))]
				s.printf("duplicate %s\n", m)
				s.net = append(s.net, m)
			}
		case k < 590:
			if len(s.upIDs()) < 7 {
				s.printf("join n%d\n", nextName)
				newNode()
			}
		case k < 598:
			if id, ok := pick(); ok {
				s.printf("crash %s\n", id)
				_ = s.stop(id, false)
			}
		case k < 603:
			if id, ok := pick(); ok {
				s.printf("leave %s\n", id)
				_ = s.leave(id)
			}
		case k < 613:
			if id, ok := pick(); ok {
				n := s.nodes[id]
				s.printf("restart %s\n", id)
				_ = s.kill(id)
				_ = s.start(n.m.Name, int(n.m.Start)+1)
				if r.IntN(2) == 0 {
					s.printf("detect %s\n", id)
					s.detect(id, false)
				}
			}
		case k < 665:
			if formed() {
				up := s.upIDs()
				var a, b []string
				for _, id := range up {
					if r.IntN(2) == 0 {
						a = append(a, id)
					} else {
						b = append(b, id)
					}
				}
				s.printf("partition %v | %v\n", a, b)
				s.partition([][]string{a, b})
			}
		case k < 715:
			s.printf("heal\n")
			s.heal()
		case k < 755:
			if id, ok := pick(); ok {
				n := s.nodes[id]
				if held[id] {
					n.core.Release()
				} else {
					n.core.Hold()
				}
				held[id] = !held[id]
				s.printf("hold %s %v\n", id, held[id])
				s.flush(n)
			}
		case k < 775:
			// memberlist's periodic push/pull between two live nodes
			a, okA := pick()
			b, okB := pick()
			if okA && okB && a != b && s.reach(a, b) {
				s.pushPull(s.nodes[a], s.nodes[b])
			}
		case k < 790:
			if id, ok := pick(); ok {
				s.printf("request %s\n", id)
				s.nodes[id].core.Request("random")
				s.flush(s.nodes[id])
			}
		default:
			s.deliverAll(1 + r.IntN(5))
		}
		s.goLeavers()
	}
	if s.violation != nil {
		return s, s.violation
	}
	// Liveness: the network heals, undetected kills get detected, the
	// trainers release, and time passes with every message delivered.
	s.heal()
	for _, id := range s.order {
		if !s.nodes[id].up {
			s.detect(id, false)
		}
	}
	for id, h := range held {
		if h && s.nodes[id].up {
			s.nodes[id].core.Release()
			s.flush(s.nodes[id])
		}
	}
	rounds := 20 * (s.cfg.RetryTicks + s.cfg.SettleTicks + 2)
	for i := range rounds {
		s.deliverAll(-1)
		s.goLeavers()
		if i == rounds/2 {
			// A leaver whose world cannot form without it (too few
			// nodes) goes when its Leave times out.
			for _, id := range s.upIDs() {
				if s.nodes[id].leaving {
					s.printf("%s's leave times out\n", id)
					_ = s.stop(id, true)
				}
			}
		}
		s.tick()
		if i%10 == 0 {
			up := s.upIDs()
			for j := 1; j < len(up); j++ {
				s.pushPull(s.nodes[up[j-1]], s.nodes[up[j]])
			}
		}
	}
	s.deliverAll(-1)
	if s.violation != nil {
		return s, s.violation
	}
	if verbose {
		s.state()
	}
	if !s.quorumAlive() {
		s.printf("no quorum of the last world is alive: liveness not expected\n")
		return s, nil
	}
	if len(s.upIDs()) < s.cfg.MinNodes {
		return s, nil
	}
	s.liveness = true
	return s, s.converged()
}

// quorumAlive: can the live nodes decide anything? A strict majority of
// the newest world a live node knows must be alive (its slot needs it),
// and of the newest world committed anywhere (a world only dead nodes
// learned is decided again from the live acceptors, and its successor
// needs its majority).
func (s *sim) quorumAlive() bool {
	var newest, known World
	for g, w := range s.worlds {
		if g > newest.Gen {
			newest = w
		}
	}
	for _, id := range s.upIDs() {
		if w := s.nodes[id].core.committed; w.Gen > known.Gen {
			known = w
		}
	}
	return s.majorityUp(newest) && s.majorityUp(known)
}

func (s *sim) majorityUp(w World) bool {
	if w.Gen == 0 {
		return true
	}
	k := 0
	for _, m := range w.Members {
		if n, ok := s.nodes[m.ID]; ok && n.up {
			k++
		}
	}
	return 2*k > len(w.Members)
}

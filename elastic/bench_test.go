package elastic

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors"
)

// BenchmarkDetection measures, with FastTimings on loopback, how long the
// survivors of a 3-node cluster take to see a member go, and to commit the
// world without it. The member is a separate process (this test binary,
// TestHelperNode) so that it can be frozen or killed for real:
//
//	hang   SIGSTOP: nothing answers, no connection resets (a hung process,
//	       a lost host); only the failure detector can tell
//	kill   SIGKILL: the kernel closes its sockets
//	leave  SIGTERM: the helper calls Node.Leave
//
// Metrics per signal: detect-ms (signal to EventFailed/EventLeft at the
// leader) and world-ms (signal to the new world committed there).
//
//	go test ./elastic -run XXX -bench Detection -benchtime 5x
func BenchmarkDetection(b *testing.B) {
	for _, mode := range []string{"hang", "kill", "leave"} {
		b.Run(mode, func(b *testing.B) {
			var detect, world []time.Duration
			for range b.N {
				d, w := detectOnce(b, mode)
				detect, world = append(detect, d), append(world, w)
			}
			b.ReportMetric(msAvg(detect), "detect-ms")
			b.ReportMetric(msAvg(world), "world-ms")
			slices.Sort(detect)
			slices.Sort(world)
			b.Logf("%s: detection %v..%v, new world %v..%v over %d runs", mode, detect[0], detect[len(detect)-1], world[0], world[len(world)-1], len(detect))
		})
	}
}

func msAvg(ds []time.Duration) float64 {
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return float64(s.Microseconds()) / 1000 / float64(len(ds))
}

// detectOnce runs one cluster (two nodes here, one helper process) and
// measures one departure.
func detectOnce(b *testing.B, mode string) (detect, world time.Duration) {
	sc := actors.DefaultSystemConfig()
	sc.Remote = true
	sys, err := actors.NewSystem(sc)
	if err != nil {
		b.Fatal(err)
	}
	defer sys.Close()
	cfg := DefaultConfig()
	cfg.MinNodes, cfg.Key = 2, testKey(0)
	var nodes []*Node
	for _, name := range []string{"a", "b"} {
		cfg.Name = name
		n, err := Start(context.Background(), cfg, sys, WithLogger(zap.NewNop()))
		if err != nil {
			b.Fatal(err)
		}
		defer n.Close()
		nodes = append(nodes, n)
		cfg.Join = []string{nodes[0].GossipAddr()}
	}
	a := nodes[0]
	drain(nodes[1])
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperNode$")
	cmd.Env = append(os.Environ(), "ELASTIC_HELPER_JOIN="+a.GossipAddr())
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	sc2 := bufio.NewScanner(out)
	if !sc2.Scan() || !strings.HasPrefix(sc2.Text(), "ready") {
		b.Fatalf("helper: %q", sc2.Text())
	}
	waitWorldB(b, a, func(w World) bool { return namesOf(w) == "a b c" })

	sig := map[string]os.Signal{"hang": syscall.SIGSTOP, "kill": syscall.SIGKILL, "leave": syscall.SIGTERM}[mode]
	t0 := time.Now()
	if err := cmd.Process.Signal(sig); err != nil {
		b.Fatal(err)
	}
	deadline := time.After(waitLimit)
	for detect == 0 || world == 0 {
		select {
		case e := <-a.Events():
			switch {
			case (e.Kind == EventFailed || e.Kind == EventLeft) && e.Member.Name == "c" && detect == 0:
				detect = e.Time.Sub(t0)
			case e.Kind == EventCommitted && namesOf(e.World) == "a b":
				world = e.Time.Sub(t0)
			}
		case <-deadline:
			b.Fatalf("%s: no departure seen within %v", mode, waitLimit)
		}
	}
	if mode == "hang" {
		cmd.Process.Signal(syscall.SIGCONT)
	}
	return detect, world
}

func waitWorldB(b *testing.B, n *Node, ok func(World) bool) {
	deadline := time.After(waitLimit)
	for {
		select {
		case e := <-n.Events():
			if e.Kind == EventCommitted && ok(e.World) {
				return
			}
		case <-deadline:
			b.Fatalf("no world within %v (last %s)", waitLimit, n.World())
		}
	}
}

// TestHelperNode is the member that BenchmarkDetection freezes, kills or
// stops: node "c" in its own process, joining ELASTIC_HELPER_JOIN. It
// prints "ready" once started, and leaves gracefully on SIGTERM. Without
// the variable it does nothing.
func TestHelperNode(t *testing.T) {
	join := os.Getenv("ELASTIC_HELPER_JOIN")
	if join == "" {
		t.Skip("helper process for BenchmarkDetection")
	}
	sc := actors.DefaultSystemConfig()
	sc.Remote = true
	sys, err := actors.NewSystem(sc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Name, cfg.MinNodes, cfg.Key, cfg.Join = "c", 2, testKey(0), []string{join}
	n, err := Start(context.Background(), cfg, sys, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	drain(n)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	fmt.Println("ready", n.GossipAddr())
	<-term
	n.Leave(time.Second)
	sys.Close()
	os.Exit(0)
}

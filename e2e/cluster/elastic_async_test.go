//go:build long

package cluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// The elastic asynchronous job: the elastic tests' MLP, every replica's
// computation slowed by 2 ms (the test straggler hook names rank 0, which
// every replica is in its world of one) so that the job outlasts the
// membership changes on any machine, with the parameter servers'
// checkpoints every 1,000 steps.
const asyncElasticSteps, asyncBound = 8000, 4

func asyncCluster(t *testing.T, nodes int) *cluster {
	c := newCluster(t, nodes, 2)
	c.extra = []string{"--sync", "async", "--max-staleness", fmt.Sprint(asyncBound), "--steps", fmt.Sprint(asyncElasticSteps),
		"--ckpt-dir", filepath.Join(c.dir, "ckpt"), "--ckpt-every", "1000"}
	c.env = []string{"TROUPE_TEST_STRAGGLER=0:2ms"}
	return c
}

// elasticAsyncLine is what the tests read of a leader's metrics line.
type elasticAsyncLine struct {
	e2etest.AsyncLine
	World      int    `json:"world"`
	Generation uint64 `json:"generation"`
}

// asyncLines reads agent name's metrics lines (the steps it led); the
// last line of an agent that was killed may be torn, and is then dropped.
func (c *cluster) asyncLines(name string, killed bool) []elasticAsyncLine {
	c.t.Helper()
	f, err := os.Open(c.agents[name].metrics)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	var out []elasticAsyncLine
	var bad error
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if bad != nil {
			c.t.Fatal(bad) // a bad line before the last
		}
		var l elasticAsyncLine
		if bad = json.Unmarshal(sc.Bytes(), &l); bad == nil {
			out = append(out, l)
		}
	}
	if bad != nil && !killed {
		c.t.Fatal(bad)
	}
	return out
}

// meanLoss is the mean loss of lines.
func meanLoss(lines []elasticAsyncLine) float64 {
	s := 0.0
	for _, l := range lines {
		s += l.Loss
	}
	return s / float64(len(lines))
}

// checkAsyncSteps asserts that lines are steps from+1 … the job's last,
// each applying one batch of the run from cursor from×48 on exactly once,
// within the staleness bound, and that the loss fell to less than half of
// start, the mean loss of the run's first 100 steps (the run's own start:
// a segment that begins late begins with a loss near its end's).
func (c *cluster) checkAsyncSteps(lines []elasticAsyncLine, from int, start float64) {
	c.t.Helper()
	const batch = 48
	if len(lines) != asyncElasticSteps-from {
		c.t.Fatalf("%d steps logged after step %d, want %d", len(lines), from, asyncElasticSteps-from)
	}
	seen := map[uint64]bool{}
	for i, l := range lines {
		if l.Step != from+i+1 || seen[l.Cursor] || l.Cursor%batch != 0 || l.Cursor < uint64(from*batch) || l.Cursor >= asyncElasticSteps*batch ||
			l.Async == nil || l.Async.Staleness > asyncBound {
			c.t.Fatalf("line %d: step %d, batch at %d (trained before: %v), async %+v: want step %d, each of the batches after step %d once within the bound",
				i+1, l.Step, l.Cursor, seen[l.Cursor], l.Async, from+i+1, from)
		}
		seen[l.Cursor] = true
	}
	if last := meanLoss(lines[len(lines)-100:]); !(last < start/2) {
		c.t.Errorf("mean loss of the run's first 100 steps %.4f, of its last 100 %.4f: want it halved", start, last)
	}
}

// TestElasticAsync: asynchronous training on elastic agents (--sync
// async): every member a replica, the parameter servers on the leader.
// kill -9 of a member: its batch goes to another replica, the next
// generation goes on from the servers (nothing is lost, no step is
// repeated); a new agent joins and computes updates. Every batch of the
// run is applied exactly once, within the staleness bound, and the job
// ends 0 on every survivor.
func TestElasticAsync(t *testing.T) {
	c := asyncCluster(t, 4)
	c.startWorld(3)
	c.agents["n3"].cmd.Process.Kill()
	two := c.waitWorld(2, 300)
	c.start(3)
	three := c.waitWorld(3, two.Step)
	t.Logf("kill -9 of n3: a world of 2 from step %d; n4 joined: a world of 3 from step %d", two.Step, three.Step)
	sums := c.finish("n1", "n2", "n4")
	for _, s := range sums {
		if s.Step != asyncElasticSteps {
			t.Errorf("agent %s ended at step %d, want %d", s.Name, s.Step, asyncElasticSteps)
		}
	}
	lines := c.asyncLines("n1", false) // n1 led every generation
	c.checkAsyncSteps(lines, 0, meanLoss(lines[:100]))
	// n4 is replica 2 of the last generation (members n1, n2, n4).
	var last uint64
	n4 := 0
	for _, l := range lines {
		last = max(last, l.Generation)
	}
	for _, l := range lines {
		if l.Generation == last && l.World == 3 && l.Async.Replica == 2 {
			n4++
		}
	}
	if n4 == 0 {
		t.Errorf("the agent that joined applied no update in generation %d", last)
	}
	t.Logf("n4 computed %d of the updates of generation %d", n4, last)
}

// TestElasticAsyncLeaderKilled: kill -9 of the leader, which holds the
// parameter servers: the next member leads, starts the servers from the
// latest checkpoint and trains from there to the end; the updates after
// that checkpoint are trained again, each batch once.
func TestElasticAsyncLeaderKilled(t *testing.T) {
	c := asyncCluster(t, 3)
	c.startWorld(3)
	c.waitSteps(2500) // past a checkpoint
	c.agents["n1"].cmd.Process.Kill()
	c.finish("n2", "n3")
	lines := c.asyncLines("n2", false)
	if len(lines) == 0 {
		t.Fatal("n2 led no step")
	}
	from := lines[0].Step - 1
	if from < 2000 || from%1000 != 0 {
		t.Fatalf("n2 led from step %d, want a checkpoint's (a multiple of 1000, at least 2000)", from)
	}
	if !strings.Contains(c.agents["n2"].stderr.String(), fmt.Sprintf(`"state_from":"checkpoint step %d"`, from)) {
		t.Errorf("n2's log does not say it took the state from checkpoint step %d", from)
	}
	first := c.asyncLines("n1", true) // the run's start, led by n1 before it was killed
	if len(first) < 100 {
		t.Fatalf("n1 logged %d steps, want at least the first 100", len(first))
	}
	c.checkAsyncSteps(lines, from, meanLoss(first[:100]))
	t.Logf("n2 continued from the checkpoint at step %d", from)
}

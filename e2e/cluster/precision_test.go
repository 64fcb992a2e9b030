//go:build long

package cluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"sort"
	"testing"
)

// fp16 in an elastic job whose leader is killed: the new leader continues
// the loss scaler where the old one left it, so that the scale every
// step ran with, over both leaders' lines, is GradScaler's arithmetic
// driven by the steps skipped (one injected at step 100, and whatever
// overflows the growing scale brings); every step is logged once, but for
// the one the killed leader may have run without reporting (the next
// line's scale then follows from one of its two outcomes), and the
// replicas end identical.
func TestElasticFP16ScalerSurvivesTheLeader(t *testing.T) {
	t.Setenv("TROUPE_TEST_OVERFLOW", "0:100")
	c := newCluster(t, 3, 2)
	c.extra = []string{"--precision", "fp16", "--loss-scale-window", "50"}
	c.startWorld(3)
	c.agents["n1"].cmd.Process.Kill()
	c.waitWorld(2, 300)
	checkReplicas(t, c.finish("n2", "n3"))
	type line struct {
		Step      int     `json:"step"`
		LossScale float64 `json:"loss_scale"`
		Skipped   bool    `json:"skipped"`
	}
	var lines []line
	for _, n := range []string{"n1", "n2", "n3"} {
		b, err := os.ReadFile(c.agents[n].metrics)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			var l line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, l)
		}
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].Step < lines[j].Step })
	if len(lines) == 0 || lines[len(lines)-1].Step != elasticSteps {
		t.Fatalf("%d lines, the last not step %d", len(lines), elasticSteps)
	}
	scale, tracker, skips, step := 65536.0, 0, 0, 0
	update := func(skipped bool, scale float64, tracker int) (float64, int) {
		if skipped {
			return scale / 2, 0
		}
		if tracker++; tracker == 50 {
			return scale * 2, 0
		}
		return scale, tracker
	}
	for _, l := range lines {
		switch {
		case l.Step == step+2:
			// The step the killed leader ran but did not report: its
			// outcome is unknown here; the next line's scale must follow
			// from one of the two.
			s0, t0 := update(false, scale, tracker)
			s1, t1 := update(true, scale, tracker)
			switch {
			case l.LossScale == s0:
				scale, tracker = s0, t0
			case l.LossScale == s1:
				scale, tracker = s1, t1
			default:
				t.Fatalf("step %d ran with scale %g after an unreported step at %g: want %g or %g", l.Step, l.LossScale, scale, s0, s1)
			}
			t.Logf("step %d was run but not reported by the killed leader", step+1)
		case l.Step != step+1:
			t.Fatalf("step %d follows step %d", l.Step, step)
		}
		step = l.Step
		if l.LossScale != scale {
			t.Fatalf("step %d ran with scale %g, GradScaler's arithmetic gives %g", l.Step, l.LossScale, scale)
		}
		if l.Skipped {
			skips++
		}
		scale, tracker = update(l.Skipped, scale, tracker)
	}
	if i := slices.IndexFunc(lines, func(l line) bool { return l.Step == 100 }); i >= 0 && !lines[i].Skipped {
		t.Error("step 100 was not skipped")
	}
	t.Logf("%d steps skipped; final scale %g", skips, scale)
}

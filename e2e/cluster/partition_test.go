//go:build long

package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/internal/wait"
)

// waitLog waits until agent name's log holds text.
func (c *cluster) waitLog(name, text string) {
	c.t.Helper()
	if wait.Until(60*time.Second, func() bool { return strings.Contains(c.agents[name].stderr.String(), text) }) {
		return
	}
	c.dump()
	c.t.Fatalf("agent %s never logged %q", name, text)
}

// lastStep is the last step any leader logged (0: none).
func (c *cluster) lastStep() int {
	if s := c.steps(); len(s) > 0 {
		return s[len(s)-1].Step
	}
	return 0
}

// worldsBelow fails the test when a step ran in a world of fewer than
// n members (a side of a partition that should not have trained).
func (c *cluster) noWorldBelow(n int) {
	c.t.Helper()
	for _, r := range c.steps() {
		if r.World < n {
			c.t.Errorf("step %d ran in a world of %d (generation %d): a side without a quorum trained", r.Step, r.World, r.Generation)
		}
	}
}

// The partition scenarios slow every step by 5 ms (rank 0 of each world
// computes longer), so that the job outlasts a detection, a heal and a
// rejoin (about 15 s of training instead of 5).
var slowSteps = []string{"TROUPE_TEST_STRAGGLER=0:5ms"}

// A host cut off from the others (its packets dropped silently, no
// reset), under each preset meant for these links: the two others
// re-form and train on; the cut-off minority trains nothing (it logs that
// it lacks a quorum); after the heal it rejoins, and the job ends with
// identical replicas, every sample trained once, and the fault-free run's
// losses. The log lines give the preset's times: cut → a world of two
// trained a step (detection and re-forming), heal → a world of three
// trained a step (the lan preset reconnects every 5 s, so its steps are
// slowed more, for the job to outlast its detection and rejoin).
func TestNetMinorityCutAndHeal(t *testing.T) {
	ref := faultFree(t)
	for _, tc := range []struct {
		timings string
		slow    []string
	}{
		{"loopback", slowSteps},
		{"lan", []string{"TROUPE_TEST_STRAGGLER=0:12ms"}},
		// wan finds a silent node in ~40 s and reconnects every 15 s:
		// the job must outlast that (2.5 minutes in all), so it runs
		// when asked for (TROUPE_E2E_WAN=1), not in every suite.
		{"wan", []string{"TROUPE_TEST_STRAGGLER=0:30ms"}},
	} {
		t.Run(tc.timings, func(t *testing.T) {
			if tc.timings == "wan" && os.Getenv("TROUPE_E2E_WAN") == "" {
				t.Skip("the wan preset's measurement takes 2.5 minutes: TROUPE_E2E_WAN=1 runs it")
			}
			c, tn := newNetCluster(t, 3, 2)
			c.env, c.extra = tc.slow, []string{"--timings", tc.timings}
			c.startWorld(3)
			tn.cut(2)
			cut := time.Now()
			r := c.waitWorld(2, 300)
			t.Logf("%s: n3 cut off; a world of 2 completed step %d %.0f ms later", tc.timings, r.Step, float64(time.Since(cut).Milliseconds()))
			c.waitLog("n3", "no quorum")
			tn.heal()
			healed := time.Now()
			back := c.waitWorld(3, c.lastStep())
			t.Logf("%s: healed: n3 training again in a world of 3 from step %d, %.0f ms after the heal", tc.timings, back.Step, float64(time.Since(healed).Milliseconds()))
			c.noWorldBelow(2)
			c.check(c.finish("n1", "n2", "n3"), ref)
		})
	}
}

// An even split, 2 | 2: neither side has a strict majority of the
// generation of 4, so neither trains a step (each logs that it lacks a
// quorum); after the heal one world of 4 forms again, and the job ends
// with identical replicas, every sample trained once, and the fault-free
// run's losses.
func TestNetEvenSplitAndHeal(t *testing.T) {
	ref := faultFree(t)
	c, tn := newNetCluster(t, 4, 2)
	c.env = slowSteps
	c.startWorld(4)
	tn.split(0, 1)
	c.waitLog("n1", "no quorum")
	c.waitLog("n3", "no quorum")
	before := c.lastStep()
	t.Logf("split 2 | 2 after step %d: both sides lack a quorum", before)
	tn.heal()
	healed := time.Now()
	back := c.waitWorld(4, before)
	t.Logf("healed: a world of 4 trained step %d, %.0f ms after the heal", back.Step, float64(time.Since(healed).Milliseconds()))
	// A side is two nodes: no world of two may train. A world of three
	// may, after the heal: the heal removes the split's rules one at a
	// time, and three nodes that reach each other first are a majority of
	// the four (a suite run saw steps 305–308 in such a world, then the
	// world of four from step 310).
	c.noWorldBelow(3)
	c.check(c.finish("n1", "n2", "n3", "n4"), ref)
}

// Links of 100 ms one way (every packet a host sends waits 100 ms in the
// router): with the lan timings (probes answered within 500 ms) no member
// is falsely found failing, so the whole job runs in its first
// generation, with identical replicas and the fault-free run's losses.
// (The loopback preset's 100 ms probe timeout is below this round trip.) A
// step pays the ring's four hops and the leader's round trips: the job is
// cut to 30 steps.
func TestNetDelayedLinks(t *testing.T) {
	const steps = 30
	ref := faultFreeSteps(t, steps)
	c, tn := newNetCluster(t, 3, 3)
	c.extra = []string{"--steps", fmt.Sprint(steps), "--timings", "lan"}
	for i := range 3 {
		tn.impair(i, 100*time.Millisecond, 0)
	}
	for i := range 3 {
		c.start(i)
	}
	c.check(c.finish("n1", "n2", "n3"), ref)
	if gens := generationsOf(c.steps()); len(gens) != 1 || gens[0] != 3 {
		t.Errorf("worlds by generation %v: a member was found failing over the delayed links", gens)
	}
}

// 20 % of the packets one host sends are lost (one-way, as a bad cable or
// a congested uplink): TCP's retransmissions carry the data plane and the
// control messages through, and whatever the failure detector makes of
// the lost probes, training continues to the last step with identical
// replicas, each sample trained once and the fault-free run's losses.
// The lossy host may be found failing (its acks are lost too) and the two
// others may then finish the job before it rejoins (a CI run saw them do
// the last 48 steps in 0.2 s): it must then exit non-zero within a bounded
// time saying that the job ended without it, not wait for ever (it did,
// once: each dial whose SYN its link lost restarted the give-up count).
func TestNetLossyLink(t *testing.T) {
	const steps = 60
	ref := faultFreeSteps(t, steps)
	c, tn := newNetCluster(t, 3, 2)
	c.extra = []string{"--steps", fmt.Sprint(steps)}
	tn.impair(1, 0, 0.2)
	for i := range 3 {
		c.start(i)
	}
	sums := c.finish("n1", "n3")
	lossy := c.agents["n2"]
	select {
	case err := <-lossy.done:
		if err == nil {
			var s agentSummary
			if err := json.Unmarshal(lossy.stdout.Bytes(), &s); err != nil {
				t.Fatalf("n2 printed %q: %v", lossy.stdout.String(), err)
			}
			sums = append(sums, s)
			break
		}
		if !strings.Contains(lossy.stderr.String(), "the job ended without this node") {
			c.dump()
			t.Fatalf("n2 exited %v without saying the job ended without it", err)
		}
		t.Logf("n2 was found failing and the job ended without it; it exited: %v", err)
	case <-time.After(60 * time.Second):
		c.dump()
		t.Fatal("n2 still running 60 s after the others finished the job")
	}
	c.check(sums, ref)
}

// One host's link capped at 20 Mbit/s both ways (tc tbf, 100 ms of
// queue at most): its data plane and gossip share the slow link, every
// step waits for it, and with the lan timings no member is falsely found
// failing: the job runs in its first generation to the last step, with
// identical replicas, each sample once and the fault-free run's losses.
func TestNetSlowLink(t *testing.T) {
	const steps = 60
	ref := faultFreeSteps(t, steps)
	c, tn := newNetCluster(t, 3, 3)
	c.extra = []string{"--steps", fmt.Sprint(steps), "--timings", "lan"}
	tn.limit(2, "20mbit")
	t0 := time.Now()
	for i := range 3 {
		c.start(i)
	}
	c.check(c.finish("n1", "n2", "n3"), ref)
	if gens := generationsOf(c.steps()); len(gens) != 1 || gens[0] != 3 {
		t.Errorf("worlds by generation %v: a member was found failing over the slow link", gens)
	}
	t.Logf("%d steps over a 20 Mbit/s link in %.1f s", steps, time.Since(t0).Seconds())
}

// A host cut off until the job ended without it: the two others finish
// the job (the fault-free run's losses, each sample once); when the link
// heals nothing listens at their addresses any more, and the stale agent
// exits within 30 s of the heal, non-zero, saying that the job ended
// without it (elastic.Timings.Gone: 5 s of refused connections). While
// it was cut off (no answer at all, a partition) it waited.
func TestNetStaleNodeAfterTheJobEnded(t *testing.T) {
	ref := faultFree(t)
	c, tn := newNetCluster(t, 3, 2)
	c.env = slowSteps
	c.startWorld(3)
	tn.cut(2)
	c.waitWorld(2, 300)
	sums := c.finish("n1", "n2")
	c.check(sums, ref)
	stale := c.agents["n3"]
	select {
	case err := <-stale.done:
		t.Fatalf("n3 exited while still cut off (%v): a partition must keep it waiting\n%s", err, stale.stderr.String())
	default:
	}
	tn.heal()
	healed := time.Now()
	select {
	case err := <-stale.done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("n3 after the heal: %v, want a non-zero exit", err)
		}
		if !strings.Contains(stale.stderr.String(), "the job ended without this node") {
			t.Errorf("n3 exited %v without saying the job ended without it:\n%s", err, stale.stderr.String())
		}
		t.Logf("n3 exited (%v) %.1f s after the heal", err, time.Since(healed).Seconds())
	case <-time.After(30 * time.Second):
		c.dump()
		t.Fatal("n3 still running 30 s after the heal, its job long ended")
	}
}

// The leader cut off mid-rendezvous: three agents train, a fourth joins,
// and the moment the leader (n1, whose link is slowed by 100 ms so that
// its proposal is still on its way) logs the proposal of the world of
// four, its host is cut off. Whatever the others had accepted, they form
// a world without it under a new leader (n1 alone lacks a quorum and
// trains nothing), n1 comes back after the heal, and the job ends with
// identical replicas, every sample trained once and the fault-free run's
// losses: no generation committed twice, no step half-applied.
func TestNetLeaderCutMidRendezvous(t *testing.T) {
	ref := faultFree(t)
	c, tn := newNetCluster(t, 4, 2)
	c.env, c.extra = slowSteps, []string{"--timings", "lan"}
	slow := tn.impair(0, 100*time.Millisecond, 0)
	for i := range 3 {
		c.start(i)
	}
	c.waitWorld(3, 0)
	c.start(3)
	c.waitLine("n1", func(l string) bool { return strings.Contains(l, "new world proposed") && strings.Contains(l, `"n4"`) })
	tn.cut(0)
	cut := time.Now()
	slow()
	r := c.waitWorld(3, c.lastStep())
	t.Logf("n1 cut off with its proposal in flight; a world of 3 trained step %d %.0f ms later", r.Step, float64(time.Since(cut).Milliseconds()))
	// Heal while the job has steps left (the lan preset takes n1 ~30 s
	// to find the others failed: it is not waited for).
	c.waitSteps(r.Step + 100)
	tn.heal()
	healed := time.Now()
	back := c.waitWorld(4, c.lastStep())
	t.Logf("healed: a world of 4 trained step %d, %.0f ms after the heal", back.Step, float64(time.Since(healed).Milliseconds()))
	c.check(c.finish("n1", "n2", "n3", "n4"), ref)
}

// waitLine waits until a line of agent name's log satisfies ok.
func (c *cluster) waitLine(name string, ok func(string) bool) {
	c.t.Helper()
	if wait.Until(60*time.Second, func() bool {
		return slices.ContainsFunc(strings.Split(c.agents[name].stderr.String(), "\n"), ok)
	}) {
		return
	}
	c.dump()
	c.t.Fatalf("agent %s never logged the line waited for", name)
}

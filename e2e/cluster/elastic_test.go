//go:build long

package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/e2e/e2etest"
	"github.com/troupe-ml/troupe/internal/wait"
)

// The elastic job of these tests: a small MLP on synthetic data, every
// agent with the same flags. The global batch stays the same in every
// world (keep-global-batch), so losses differ from a fault-free run only in
// float32 summation order.
const elasticSteps = 3000

func elasticTrainArgs() []string {
	return []string{"--model", "mlp", "--layers", "784,64,10", "--data", "synthetic-mlp", "--batch", "48",
		"--steps", fmt.Sprint(elasticSteps), "--log-every", "250", "--threads", "1"}
}

type agentProc struct {
	name    string
	cmd     *exec.Cmd
	stdout  bytes.Buffer
	stderr  syncBuffer // read while the agent runs
	metrics string
	done    chan error
	started time.Time
}

// syncBuffer is a bytes.Buffer that the process's writes and the test's
// reads may use at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type cluster struct {
	t      *testing.T
	dir    string
	ports  []string
	minN   int
	mu     sync.Mutex
	agents map[string]*agentProc
	ctx    context.Context
	// extra flags every agent of this cluster gets.
	extra []string
	// net, when set, holds the test hosts agent i runs on: host i, or
	// host i/perHost when perHost > 1.
	net     *testNet
	perHost int
	// env is added to every agent's environment.
	env []string
	// train replaces elasticTrainArgs() as the agents' job (nil: that).
	train []string
}

func newCluster(t *testing.T, nodes, minNodes int) *cluster {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	c := &cluster{t: t, dir: t.TempDir(), minN: minNodes, agents: map[string]*agentProc{}, ctx: ctx}
	for i := 0; i < nodes; i++ {
		c.ports = append(c.ports, e2etest.FreePort(t))
	}
	t.Cleanup(c.killAll)
	return c
}

// start launches agent i (0-based) with the cluster's join list.
func (c *cluster) start(i int) *agentProc { return c.startWith(i) }

// startWith launches agent i with extra flags of its own (after the
// cluster's, so they win).
func (c *cluster) startWith(i int, own ...string) *agentProc {
	name := fmt.Sprintf("n%d", i+1)
	a := &agentProc{name: name, metrics: filepath.Join(c.dir, name+".jsonl"), done: make(chan error, 1), started: time.Now()}
	args := append([]string{"agent", "--name", name, "--listen", c.ports[i], "--join", strings.Join(c.ports, ","),
		"--min-nodes", fmt.Sprint(c.minN), "--key", "passphrase:e2e-cluster-key", "--metrics-out", a.metrics,
		"--log-format", "json"}, elasticTrainArgs()...)
	if c.train != nil {
		args = append(args[:len(args)-len(elasticTrainArgs())], c.train...)
	}
	args = append(append(args, c.extra...), own...)
	a.cmd = exec.CommandContext(c.ctx, e2etest.Bin, args...)
	if c.net != nil {
		// `ip netns exec` execs the agent: the process is the agent's.
		a.cmd = c.net.command(c.ctx, i/max(1, c.perHost), e2etest.Bin, args...)
	}
	a.cmd.Stdout, a.cmd.Stderr = &a.stdout, &a.stderr
	if c.env != nil {
		a.cmd.Env = append(os.Environ(), c.env...)
	}
	if err := a.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { a.done <- a.cmd.Wait() }()
	c.mu.Lock()
	c.agents[name] = a
	c.mu.Unlock()
	return a
}

func (c *cluster) killAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.agents {
		if a.cmd.ProcessState == nil {
			a.cmd.Process.Signal(syscall.SIGCONT)
			a.cmd.Process.Kill()
		}
	}
}

// stepRecord is what the tests read of a leader's metrics line.
type stepRecord struct {
	Step       int     `json:"step"`
	Loss       float64 `json:"loss"`
	World      int     `json:"world"`
	Generation uint64  `json:"generation"`
	Cursor     uint64  `json:"cursor"`
	Batch      int     `json:"batch"`
	ResumeMs   float64 `json:"resume_ms"`
	EvalLoss   float64 `json:"eval_loss"`
}

// steps merges every agent's metrics (each leader logs the steps it drove).
func (c *cluster) steps() []stepRecord {
	var out []stepRecord
	for i := range c.ports {
		b, err := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("n%d.jsonl", i+1)))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			var r stepRecord
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				out = append(out, r)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Step < out[j].Step })
	return out
}

// waitSteps waits until some leader logged step n (or later).
func (c *cluster) waitSteps(n int) {
	c.t.Helper()
	if wait.Until(90*time.Second, func() bool {
		s := c.steps()
		return len(s) > 0 && s[len(s)-1].Step >= n
	}) {
		return
	}
	c.dump()
	c.t.Fatalf("no leader reached step %d", n)
}

// startWorld starts agents n1…nN, waits for their world of n and for
// step 300, the point every fault scenario strikes after.
func (c *cluster) startWorld(n int) {
	c.t.Helper()
	for i := 0; i < n; i++ {
		c.start(i)
	}
	c.waitWorld(n, 0)
	c.waitSteps(300)
}

// waitWorld waits until a step ran in a world of size n after step after,
// and returns its first record.
func (c *cluster) waitWorld(n, after int) stepRecord {
	c.t.Helper()
	var first stepRecord
	if wait.Until(60*time.Second, func() bool {
		steps := c.steps()
		i := slices.IndexFunc(steps, func(r stepRecord) bool { return r.Step > after && r.World == n })
		if i >= 0 {
			first = steps[i]
		}
		return i >= 0
	}) {
		return first
	}
	c.dump()
	c.t.Fatalf("no step in a world of %d after step %d", n, after)
	return stepRecord{}
}

// waitGeneration waits until a step of generation gen (or later) ran, and
// a step after step after.
func (c *cluster) waitGeneration(gen uint64, after int) {
	c.t.Helper()
	if wait.Until(60*time.Second, func() bool {
		s := c.steps()
		return len(s) > 0 && s[len(s)-1].Generation >= gen && s[len(s)-1].Step > after
	}) {
		return
	}
	c.dump()
	c.t.Fatalf("no step of generation %d after step %d", gen, after)
}

type agentSummary struct {
	Name     string `json:"name"`
	Step     int    `json:"step"`
	Stage    int    `json:"stage"`
	Shard    int    `json:"shard"`
	Zero     int    `json:"zero_shard"`
	Checksum string `json:"checksum"`
	Left     bool   `json:"left"`
}

// finish waits for the named agents to exit 0 and returns their summaries.
func (c *cluster) finish(names ...string) []agentSummary {
	c.t.Helper()
	var out []agentSummary
	for _, n := range names {
		a := c.agents[n]
		select {
		case err := <-a.done:
			if err != nil {
				c.dump()
				c.t.Fatalf("agent %s: %v", n, err)
			}
		case <-c.ctx.Done():
			c.dump()
			c.t.Fatalf("agent %s did not finish", n)
		}
		var s agentSummary
		if err := json.Unmarshal(a.stdout.Bytes(), &s); err != nil {
			c.t.Fatalf("agent %s printed %q: %v", n, a.stdout.String(), err)
		}
		out = append(out, s)
	}
	return out
}

func (c *cluster) dump() {
	for _, a := range c.agents {
		lines := strings.Split(a.stderr.String(), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		c.t.Logf("--- %s stderr (tail):\n%s", a.name, strings.Join(lines, "\n"))
	}
}

// check asserts what every scenario must show: the target step reached by
// the survivors with bit-identical replicas, every sample of the stream
// trained exactly once (the cursor advances by exactly one batch per
// completed step), and losses within 1e-3 relative of a fault-free run
// (the same global batches; float32 sums in another order only). It logs
// the world size of each generation.
func (c *cluster) check(sums []agentSummary, ref []float64) {
	c.t.Helper()
	target := len(ref)
	checkReplicasAt(c.t, sums, target)
	recs := c.steps()
	if len(recs) == 0 {
		c.t.Fatal("no steps logged")
	}
	seen := map[int]bool{}
	for i, r := range recs {
		if seen[r.Step] {
			c.t.Fatalf("step %d logged twice", r.Step)
		}
		seen[r.Step] = true
		if i > 0 {
			p := recs[i-1]
			if want := p.Cursor + uint64(p.Batch)*uint64(r.Step-p.Step); r.Cursor != want {
				c.t.Fatalf("step %d starts at sample %d, want %d: samples skipped or trained twice", r.Step, r.Cursor, want)
			}
		}
		if d := math.Abs(r.Loss - ref[r.Step-1]); d > 1e-3*ref[r.Step-1] {
			c.t.Errorf("step %d: loss %v, fault-free %v", r.Step, r.Loss, ref[r.Step-1])
		}
	}
	if last := recs[len(recs)-1]; last.Step != target {
		c.t.Errorf("last logged step %d, want %d", last.Step, target)
	} else if target != elasticSteps {
		// A shortened job (faultFreeSteps): its held-out loss has no
		// reference.
	} else if d := math.Abs(last.EvalLoss - refEval); !(d <= 1e-3*refEval) {
		// The held-out loss after the last step, as troupe train reports
		// it, within the training losses' tolerance.
		c.t.Errorf("last step: eval_loss %v, fault-free %v", last.EvalLoss, refEval)
	} else {
		c.t.Logf("last step: eval_loss %v, fault-free %v", last.EvalLoss, refEval)
	}
	c.t.Logf("worlds by generation: %v", generationsOf(recs))
}

var (
	refOnce   sync.Once
	refLosses []float64
	refEval   float64 // the held-out loss after the last step
)

// faultFree is the same training in one process with one worker.
func faultFree(t *testing.T) []float64 {
	refOnce.Do(func() {
		m := filepath.Join(t.TempDir(), "m.jsonl")
		e2etest.Troupe(t, 5*time.Minute, append(append([]string{"train"}, elasticTrainArgs()...), "--metrics-out", m)...)
		text := e2etest.ReadFile(t, m)
		refLosses = e2etest.Field(t, text, "loss")
		lines := strings.Split(strings.TrimSpace(text), "\n")
		var last stepRecord
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
			t.Fatal(err)
		}
		refEval = last.EvalLoss
	})
	if len(refLosses) != elasticSteps {
		t.Fatalf("fault-free run logged %d steps", len(refLosses))
	}
	return refLosses
}

// faultFreeSteps is the elastic job cut to n steps, in one process with
// one worker: its losses.
func faultFreeSteps(t *testing.T, n int) []float64 {
	m := filepath.Join(t.TempDir(), "m.jsonl")
	e2etest.Troupe(t, 2*time.Minute, append(append([]string{"train"}, elasticTrainArgs()...), "--steps", fmt.Sprint(n), "--metrics-out", m)...)
	ref := e2etest.Field(t, e2etest.ReadFile(t, m), "loss")
	if len(ref) != n {
		t.Fatalf("the fault-free run of %d steps logged %d", n, len(ref))
	}
	return ref
}

func generationsOf(recs []stepRecord) []int {
	var worlds []int
	var gen uint64
	for _, r := range recs {
		if r.Generation != gen {
			gen = r.Generation
			worlds = append(worlds, r.World)
		}
	}
	return worlds
}

// (1) Three agents train; a fourth joins and contributes within seconds.
func TestElasticJoin(t *testing.T) {
	ref := faultFree(t)
	c := newCluster(t, 4, 3)
	for i := 0; i < 3; i++ {
		c.start(i)
	}
	c.waitSteps(200)
	late := c.start(3)
	r := c.waitWorld(4, 200)
	t.Logf("n4 started; a world of 4 completed step %d %.2f s later (resume %.0f ms after the commit)", r.Step, time.Since(late.started).Seconds(), r.ResumeMs)
	if d := time.Since(late.started); d > 20*time.Second {
		t.Errorf("join to contributing took %v", d)
	}
	c.check(c.finish("n1", "n2", "n3", "n4"), ref)
}

// (2) SIGTERM one agent: it leaves at a step boundary, the rest continue.
func TestElasticGracefulLeave(t *testing.T) {
	ref := faultFree(t)
	c := newCluster(t, 3, 2)
	c.startWorld(3)
	leaver := c.agents["n3"]
	leaver.cmd.Process.Signal(syscall.SIGTERM)
	sent := time.Now()
	r := c.waitWorld(2, 300)
	t.Logf("SIGTERM to n3; a world of 2 completed step %d %.0f ms later", r.Step, float64(time.Since(sent).Milliseconds()))
	if err := <-leaver.done; err != nil {
		t.Fatalf("n3 after SIGTERM: %v\n%s", err, leaver.stderr.String())
	}
	var s agentSummary
	if err := json.Unmarshal(leaver.stdout.Bytes(), &s); err != nil || !s.Left {
		t.Errorf("n3's summary %q: want left", leaver.stdout.String())
	}
	c.check(c.finish("n1", "n2"), ref)
}

// A job that allows a world of one (--quorum any --min-nodes 1) of two
// nodes: the node the other joined through leaves (SIGTERM). The survivor
// is then alone, and every address it knows refuses connections, as for a
// node cut off until its job ended without it; but it trains in a
// committed world of its own, so it is not left behind: it trains on to
// the end and exits 0.
func TestElasticSurvivorOfALeaveTrainsAlone(t *testing.T) {
	ref := faultFree(t)
	c := newCluster(t, 2, 1)
	c.extra = []string{"--quorum", "any"}
	c.env = slowSteps // the rest of the job outlasts the failure detector's Gone
	c.startWorld(2)
	at := c.lastStep() // n1 may have trained alone before n2 joined
	leaver := c.agents["n1"]
	leaver.cmd.Process.Signal(syscall.SIGTERM)
	r := c.waitWorld(1, at)
	t.Logf("SIGTERM to n1; n2 alone trained step %d", r.Step)
	if err := <-leaver.done; err != nil {
		t.Fatalf("n1 after SIGTERM: %v\n%s", err, leaver.stderr.String())
	}
	c.check(c.finish("n2"), ref)
}

// Three nodes with --min-nodes 3; one leaves (SIGTERM): the two others
// cannot form a world and, instead of waiting for ever, exit non-zero
// within --rdzv-timeout + 5 s, naming the cause.
func TestElasticRendezvousTimeout(t *testing.T) {
	c := newCluster(t, 3, 3)
	c.extra = []string{"--rdzv-timeout", "3s"}
	c.env = slowSteps // the job outlasts the leave and the timeout
	c.startWorld(3)
	leaver := c.agents["n3"]
	leaver.cmd.Process.Signal(syscall.SIGTERM)
	left := time.Now()
	if err := <-leaver.done; err != nil {
		t.Fatalf("n3 after SIGTERM: %v\n%s", err, leaver.stderr.String())
	}
	for _, n := range []string{"n1", "n2"} {
		a := c.agents[n]
		select {
		case err := <-a.done:
			if err == nil {
				t.Fatalf("%s exited 0 without a world to train in", n)
			}
			if !strings.Contains(a.stderr.String(), "rendezvous timeout") {
				c.dump()
				t.Fatalf("%s: %v, but its log does not name the rendezvous timeout", n, err)
			}
			t.Logf("%s exited non-zero %.1f s after the leave: %v", n, time.Since(left).Seconds(), err)
		case <-time.After(time.Until(left.Add(3*time.Second + 5*time.Second))):
			c.dump()
			t.Fatalf("%s still runs %s after the leave (--rdzv-timeout 3s)", n, time.Since(left).Round(time.Millisecond))
		}
	}
}

// checkReplay asserts what a job that rolled back to a checkpoint must
// show: the named agents finish with bit-identical replicas, a generation
// took its state from the checkpoint, every step was logged, and the steps
// trained again after the restore repeated their losses bit for bit (the
// same state and data).
func (c *cluster) checkReplay(names ...string) {
	c.t.Helper()
	checkReplicas(c.t, c.finish(names...))
	logs := ""
	for _, n := range names {
		logs += c.agents[n].stderr.String()
	}
	if !strings.Contains(logs, `"state_from":"checkpoint step`) {
		c.dump()
		c.t.Fatal("no generation took its state from the checkpoint")
	}
	first := map[int]float64{}
	redone := 0
	for _, r := range c.steps() {
		if l, ok := first[r.Step]; ok {
			redone++
			if l != r.Loss {
				c.t.Errorf("step %d trained again after the restore: loss %v, first %v", r.Step, r.Loss, l)
			}
			continue
		}
		first[r.Step] = r.Loss
	}
	for s := 1; s <= elasticSteps; s++ {
		if _, ok := first[s]; !ok {
			c.t.Fatalf("step %d never logged", s)
		}
	}
	c.t.Logf("%d steps since the checkpoint trained again, with the same losses", redone)
}

// (3) kill -9 of one agent mid-step: the rest abort, re-form and continue.
func TestElasticKill(t *testing.T) {
	ref := faultFree(t)
	c := newCluster(t, 3, 2)
	c.startWorld(3)
	c.agents["n2"].cmd.Process.Kill()
	killed := time.Now()
	r := c.waitWorld(2, 300)
	t.Logf("kill -9 of n2; a world of 2 completed step %d %.0f ms later (resume %.0f ms after the commit)", r.Step, float64(time.Since(killed).Milliseconds()), r.ResumeMs)
	c.check(c.finish("n1", "n3"), ref)
}

// (4) SIGSTOP one agent (a hung host: no connection reset) past the
// detection time: it is dropped; after SIGCONT it is re-admitted.
func TestElasticHungNode(t *testing.T) {
	ref := faultFree(t)
	c := newCluster(t, 3, 2)
	c.startWorld(3)
	hung := c.agents["n2"]
	hung.cmd.Process.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	r := c.waitWorld(2, 300)
	t.Logf("SIGSTOP of n2; a world of 2 completed step %d %.0f ms later", r.Step, float64(time.Since(stopped).Milliseconds()))
	time.Sleep(time.Second) // stopped well past the detection time
	hung.cmd.Process.Signal(syscall.SIGCONT)
	back := c.waitWorld(3, r.Step)
	t.Logf("SIGCONT: n2 training again in a world of 3 from step %d", back.Step)
	c.check(c.finish("n1", "n2", "n3"), ref)
}

// (5) The leader is killed: the next lowest member leads from its replica.
func TestElasticLeaderKilled(t *testing.T) {
	ref := faultFree(t)
	c := newCluster(t, 3, 2)
	c.startWorld(3)
	c.agents["n1"].cmd.Process.Kill()
	killed := time.Now()
	r := c.waitWorld(2, 300)
	t.Logf("kill -9 of the leader n1; n2 led a world of 2 to step %d %.0f ms later", r.Step, float64(time.Since(killed).Milliseconds()))
	c.check(c.finish("n2", "n3"), ref)
}

// A node without the cluster key cannot join: the cluster drops its
// gossip (and logs it), the node gives up naming the key, and the job goes
// on unchanged.
func TestElasticWrongKeyRefused(t *testing.T) {
	c := newCluster(t, 3, 2)
	c.extra = []string{"--steps", "1000000"} // train until told to stop
	c.start(0)
	c.start(1)
	c.waitWorld(2, 0)
	args := append([]string{"agent", "--name", "intruder", "--listen", c.ports[2], "--join", strings.Join(c.ports[:2], ","),
		"--min-nodes", "2", "--key", "passphrase:not-the-cluster-key", "--join-timeout", "3s", "--log-format", "json"}, elasticTrainArgs()...)
	_, errs, err := e2etest.Run(t, time.Minute, e2etest.Bin, args...)
	if err == nil {
		t.Fatal("an agent with the wrong key joined")
	}
	last := e2etest.LastLine(errs)
	if !strings.Contains(last, "key") {
		t.Errorf("the refusal does not mention the key: %q", last)
	}
	t.Logf("refused: %s", last)
	before := c.steps()
	for _, r := range before {
		if r.World != 2 {
			t.Fatalf("step %d ran in a world of %d: the intruder changed the job", r.Step, r.World)
		}
	}
	c.waitSteps(before[len(before)-1].Step + 50) // the job goes on
	if !strings.Contains(c.agents["n1"].stderr.String()+c.agents["n2"].stderr.String(), "could decrypt") {
		t.Error("the cluster logged nothing about the undecryptable gossip")
	}
	// Both leave at once, so they may stop one step apart: only a clean
	// exit is checked here (bit-identical replicas are the other tests').
	for _, n := range []string{"n1", "n2"} {
		c.agents[n].cmd.Process.Signal(syscall.SIGTERM)
	}
	c.finish("n1", "n2")
}

// --rescale linear-lr keeps each rank's batch: when a third agent joins a
// job of two, the global batch grows by half, and the cursor still
// advances by exactly one (larger) batch per step.
func TestElasticLinearLR(t *testing.T) {
	c := newCluster(t, 3, 2)
	c.extra = []string{"--rescale", "linear-lr"}
	c.start(0)
	c.start(1)
	c.waitWorld(2, 0)
	c.waitSteps(200)
	c.start(2)
	r := c.waitWorld(3, 200)
	sums := c.finish("n1", "n2", "n3")
	for _, s := range sums {
		if s.Checksum != sums[0].Checksum {
			t.Fatalf("replicas differ: %+v", sums)
		}
	}
	recs := c.steps()
	two, three := 0, 0
	for i, rec := range recs {
		switch rec.World {
		case 2:
			two = rec.Batch
		case 3:
			three = rec.Batch
		}
		if i > 0 {
			p := recs[i-1]
			if rec.Cursor != p.Cursor+uint64(p.Batch)*uint64(rec.Step-p.Step) {
				t.Fatalf("step %d starts at sample %d after step %d at %d + %d", rec.Step, rec.Cursor, p.Step, p.Cursor, p.Batch)
			}
		}
	}
	if two != 48 || three != 72 {
		t.Errorf("global batch %d with 2 ranks and %d with 3, want 48 and 72 (24 per rank)", two, three)
	}
	t.Logf("third agent from step %d: batch %d → %d", r.Step, two, three)
}

// checkReplicas: every agent reached the target, not having left, and the
// agents holding the same pipeline stage (all of them without pipelining)
// hold the same bits.
func checkReplicas(t *testing.T, sums []agentSummary) {
	t.Helper()
	checkReplicasAt(t, sums, elasticSteps)
}

// checkReplicasAt is checkReplicas for a job of target steps.
func checkReplicasAt(t *testing.T, sums []agentSummary, target int) {
	t.Helper()
	byPart := map[[3]int]string{}
	for _, s := range sums {
		if s.Step != target || s.Left {
			t.Errorf("agent %s ended at step %d (left %v); want step %d", s.Name, s.Step, s.Left, target)
		}
		if s.Stage < 0 {
			continue // on standby at the end
		}
		part := [3]int{s.Stage, s.Shard, s.Zero}
		if want, ok := byPart[part]; ok && s.Checksum != want {
			t.Errorf("agent %s (stage %d, shard %d, ZeRO-3 shard %d) has checksum %s, another replica of it %s", s.Name, s.Stage, s.Shard, s.Zero, s.Checksum, want)
		}
		byPart[part] = s.Checksum
	}
}

// Model parts on agents: four agents hold 2 replicas × 2 parts, pipeline
// stages or tensor-parallel shards; one is killed, and the three survivors
// re-form as one replica of the 2 parts with one standby, each part's state
// taken from a surviving holder of it; the losses are the fault-free run's.
func TestElasticPartKill(t *testing.T) {
	ref := faultFree(t)
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"pipeline", []string{"--pp", "2", "--micro-batches", "2"}},
		{"tensor-parallel", []string{"--tp", "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 4, 2)
			c.extra = tc.extra
			c.startWorld(4)
			c.agents["n4"].cmd.Process.Kill()
			r := c.waitWorld(2, 300)
			t.Logf("kill -9 of n4 (part 1 of replica 1): one replica of 2 parts completed step %d", r.Step)
			c.check(c.finish("n1", "n2", "n3"), ref)
			if !strings.Contains(c.agents["n1"].stderr.String()+c.agents["n2"].stderr.String()+c.agents["n3"].stderr.String(), `"state_from":"surviving replicas"`) {
				t.Error("no generation took its state from surviving replicas")
			}
		})
	}
}

// A lost tensor-parallel shard: with one replica of two shards and a
// standby, a shard's only holder is killed; every member then loads its
// part from the latest checkpoint (its shard's blocks of the whole
// tensors) and the job goes on, the steps since the checkpoint repeating
// their losses bit for bit.
func TestElasticLostShardFromCheckpoint(t *testing.T) {
	c := newCluster(t, 3, 2)
	ckpt := t.TempDir()
	c.extra = []string{"--tp", "2", "--ckpt-dir", ckpt, "--ckpt-every", "100"}
	c.start(0)
	c.start(1)
	formed := c.waitWorld(2, 0)
	c.start(2)
	c.waitGeneration(formed.Generation+1, 350)
	c.agents["n2"].cmd.Process.Kill()
	c.checkReplay("n1", "n3")
}

// A lost pipeline stage: with one replica of two stages and a standby, the
// stage-1 agent is killed; no survivor holds that stage, so every member
// loads its part from the latest checkpoint (resharded by name) and the
// job goes on from there. The steps since the checkpoint are trained again
// from exactly the same state and data: their losses repeat bit for bit.
func TestElasticLostStageFromCheckpoint(t *testing.T) {
	c := newCluster(t, 3, 2)
	ckpt := t.TempDir()
	c.extra = []string{"--pp", "2", "--micro-batches", "2", "--ckpt-dir", ckpt, "--ckpt-every", "100"}
	c.start(0)
	c.start(1)
	formed := c.waitWorld(2, 0)
	c.start(2) // n3 joins as standby: 3 members make one 2-stage pipeline
	// Kill only once n3 is a member: a world of two cannot lose one under
	// the majority quorum (it would wait for quorum, by design), and steps
	// are fast enough here to pass any step count before n3's join
	// commits.
	c.waitGeneration(formed.Generation+1, 350)
	c.agents["n2"].cmd.Process.Kill() // the only holder of stage 1
	c.checkReplay("n1", "n3")
}

// A pipeline stage lost with every holder and no checkpoint to restore it
// from ends the job: after --lost-stage-timeout every survivor exits
// non-zero naming the stage, instead of forming failing generations
// forever.
func TestElasticLostStageWithoutCheckpointFails(t *testing.T) {
	c := newCluster(t, 3, 2)
	c.extra = []string{"--pp", "2", "--micro-batches", "2", "--lost-stage-timeout", "2s"}
	c.start(0)
	c.start(1)
	first := c.waitWorld(2, 0)
	c.start(2) // standby: it holds no stage
	// Kill only once n3 is a member (generation 2): a world of two cannot
	// lose one under the majority quorum, and would wait for quorum instead.
	c.waitGeneration(first.Generation+1, 0)
	c.agents["n2"].cmd.Process.Kill() // the only holder of stage 1
	for n, msg := range c.failed(time.Minute, "n1", "n3") {
		for _, want := range []string{"a pipeline stage is lost", "pipeline stage 1", "--lost-stage-timeout"} {
			if !strings.Contains(msg, want) {
				c.dump()
				t.Fatalf("agent %s: no %q in its error output", n, want)
			}
		}
	}
}

// Both holders of a pipeline's state (one replica of two stages) are
// killed at once, and there is no checkpoint. The three standbys left
// hold nothing, but heard of every step the job trained, so they do not
// lay the job out from the seed and train it again from step 0: after
// --lost-stage-timeout each exits non-zero naming both stages.
func TestElasticEveryHolderLostFails(t *testing.T) {
	c := newCluster(t, 5, 3)
	// One replica: a row per micro-batch and 48 micro-batches of a batch
	// of 48 leave room for one.
	c.extra = []string{"--pp", "2", "--micro-batches", "48", "--lost-stage-timeout", "2s"}
	for i := range 5 {
		c.start(i)
	}
	c.waitFormedWith("n5")
	c.waitSteps(c.lastStep() + 20) // the standbys heard of steps
	c.agents["n1"].cmd.Process.Kill()
	c.agents["n2"].cmd.Process.Kill()
	for n, msg := range c.failed(time.Minute, "n3", "n4", "n5") {
		for _, want := range []string{"a pipeline stage is lost", "pipeline stage 0, 1", "--lost-stage-timeout"} {
			if !strings.Contains(msg, want) {
				c.dump()
				t.Fatalf("agent %s: no %q in its error output", n, want)
			}
		}
		// n3 leads only after the loss.
		if strings.Contains(msg, `"state_from":"seed"`) {
			t.Errorf("agent %s: a generation after the loss took its state from the seed", n)
		}
	}
	if recs := c.steps(); recs[0].Step != 1 || slices.ContainsFunc(recs[1:], func(r stepRecord) bool { return r.Step == 1 }) {
		t.Error("step 1 was trained again after the holders died")
	}
}

// waitFormedWith waits until the leader n1 formed a generation with name
// among its members or standbys.
func (c *cluster) waitFormedWith(name string) {
	c.t.Helper()
	if wait.Until(60*time.Second, func() bool {
		return slices.ContainsFunc(strings.Split(c.agents["n1"].stderr.String(), "\n"), func(line string) bool {
			return strings.Contains(line, `"generation formed"`) && strings.Contains(line, `"`+name+`"`)
		})
	}) {
		return
	}
	c.dump()
	c.t.Fatalf("n1 formed no generation with %s", name)
}

// Graceful hand-over: with one replica of two parts (pipeline stages or
// tensor-parallel shards) and a standby, the only holder of part 1 leaves
// (SIGTERM). Before it goes it hands its part's state to the standby, so
// the next generation takes every part from a survivor: no restore from
// the checkpoint the job has, every step trained once, with the
// fault-free run's losses.
func TestElasticHandOverOnLeave(t *testing.T) {
	ref := faultFree(t)
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"pipeline", []string{"--pp", "2", "--micro-batches", "2"}},
		{"tensor-parallel", []string{"--tp", "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3, 2)
			c.extra = append(tc.extra, "--ckpt-dir", t.TempDir(), "--ckpt-every", "100")
			c.start(0)
			c.start(1)
			formed := c.waitWorld(2, 0)
			c.start(2) // standby: 3 members make one replica of 2 parts
			// Leave only once n3 is a member: a world of two cannot lose
			// one under the majority quorum.
			c.waitGeneration(formed.Generation+1, 350)
			leaver := c.agents["n2"]
			leaver.cmd.Process.Signal(syscall.SIGTERM)
			sent := time.Now()
			if err := <-leaver.done; err != nil {
				t.Fatalf("n2 after SIGTERM: %v\n%s", err, leaver.stderr.String())
			}
			if !strings.Contains(leaver.stderr.String(), `"model part handed over"`) {
				t.Error("n2 did not log handing its part over")
			}
			t.Logf("n2 left %.0f ms after SIGTERM", float64(time.Since(sent).Milliseconds()))
			c.check(c.finish("n1", "n3"), ref)
			logs := c.agents["n1"].stderr.String() + c.agents["n3"].stderr.String()
			if strings.Contains(logs, `"state_from":"checkpoint step`) {
				t.Error("a generation restored from the checkpoint")
			}
			if !strings.Contains(c.agents["n3"].stderr.String(), `"model part taken over"`) {
				t.Error("n3 did not log taking the part over")
			}
		})
	}
}

// Package cluster starts troupe agent processes on loopback for the elastic
// and chaos examples, and reads back what they did.
package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
)

// Cluster is a set of agents of one job on loopback.
type Cluster struct {
	Troupe string   // the troupe binary
	Dir    string   // metrics files
	Args   []string // training and agent flags every agent gets
	ports  []string
	mu     sync.Mutex
	procs  map[string]*Agent
	ctx    context.Context
}

// Agent is one agent process.
type Agent struct {
	Name   string
	Cmd    *exec.Cmd
	Stdout bytes.Buffer
	Done   chan error
}

// New reserves n gossip ports on loopback; agents exit when ctx ends.
func New(ctx context.Context, troupe, dir string, n int, args []string) (*Cluster, error) {
	c := &Cluster{Troupe: troupe, Dir: dir, Args: args, procs: map[string]*Agent{}, ctx: ctx}
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		c.ports = append(c.ports, ln.Addr().String())
		ln.Close()
	}
	return c, nil
}

// Start launches agent i (named n<i+1>); a restarted agent reuses its name.
func (c *Cluster) Start(i int) (*Agent, error) {
	name := fmt.Sprintf("n%d", i+1)
	args := append([]string{"agent", "--name", name, "--listen", c.ports[i], "--join", strings.Join(c.ports, ","),
		"--metrics-out", filepath.Join(c.Dir, name+".jsonl"), "--log-level", "warn"}, c.Args...)
	a := &Agent{Name: name, Done: make(chan error, 1)}
	a.Cmd = exec.CommandContext(c.ctx, c.Troupe, args...)
	a.Cmd.Stdout, a.Cmd.Stderr = &a.Stdout, os.Stderr
	if err := a.Cmd.Start(); err != nil {
		return nil, err
	}
	go func() { a.Done <- a.Cmd.Wait() }()
	c.mu.Lock()
	c.procs[name] = a
	c.mu.Unlock()
	return a, nil
}

// Signal sends sig to agent name.
func (c *Cluster) Signal(name string, sig syscall.Signal) error {
	c.mu.Lock()
	a := c.procs[name]
	c.mu.Unlock()
	if a == nil {
		return fmt.Errorf("no agent %s", name)
	}
	return a.Cmd.Process.Signal(sig)
}

// Step is one logged step of the job.
type Step struct {
	Step       int     `json:"step"`
	Loss       float64 `json:"loss"`
	World      int     `json:"world"`
	Generation uint64  `json:"generation"`
	Cursor     uint64  `json:"cursor"`
	Batch      int     `json:"batch"`
}

// Steps merges the leaders' metrics files, in step order.
func (c *Cluster) Steps() []Step {
	var out []Step
	files, _ := filepath.Glob(filepath.Join(c.Dir, "*.jsonl"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			var s Step
			if json.Unmarshal(sc.Bytes(), &s) == nil {
				out = append(out, s)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Step < out[j].Step })
	return out
}

// LastStep is the latest step any leader logged.
func (c *Cluster) LastStep() int {
	s := c.Steps()
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1].Step
}

// Summary is an agent's final JSON line.
type Summary struct {
	Name string `json:"name"`
	Step int    `json:"step"`
	// Stage is the pipeline stage the agent held (0 without --pp, -1 on
	// standby): checksums compare within a stage.
	Stage    int    `json:"stage"`
	Checksum string `json:"checksum"`
	Left     bool   `json:"left"`
}

// Wait waits for agent name and returns its summary.
func (c *Cluster) Wait(name string) (Summary, error) {
	c.mu.Lock()
	a := c.procs[name]
	c.mu.Unlock()
	var s Summary
	if err := <-a.Done; err != nil {
		return s, fmt.Errorf("agent %s: %w", name, err)
	}
	err := json.Unmarshal(a.Stdout.Bytes(), &s)
	return s, err
}

// KillAll stops every agent still running.
func (c *Cluster) KillAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.procs {
		if a.Cmd.ProcessState == nil {
			a.Cmd.Process.Signal(syscall.SIGCONT)
			a.Cmd.Process.Kill()
		}
	}
}

// Worlds summarises the generations the job went through, in order: the
// world size of each and the step it started from, marking a generation
// that started at or below a step an earlier one had logged (it restored a
// checkpoint and replayed the steps since).
func Worlds(steps []Step) []string {
	first := map[uint64]Step{}
	top := map[uint64]int{}
	for _, s := range steps {
		if f, ok := first[s.Generation]; !ok || s.Step < f.Step {
			first[s.Generation] = s
		}
		top[s.Generation] = max(top[s.Generation], s.Step)
	}
	gens := make([]uint64, 0, len(first))
	for g := range first {
		gens = append(gens, g)
	}
	sort.Slice(gens, func(i, j int) bool { return gens[i] < gens[j] })
	var out []string
	reached := 0 // the highest step the earlier generations logged
	for _, g := range gens {
		f := first[g]
		line := fmt.Sprintf("gen %d: %d workers from step %d", g, f.World, f.Step)
		if f.Step <= reached {
			line += " (a checkpoint restore: the steps since replayed)"
		}
		out = append(out, line)
		reached = max(reached, top[g])
	}
	return out
}

// ExactlyOnce checks that the cursor advanced by exactly one batch per
// completed step: every sample of the stream trained once.
func ExactlyOnce(steps []Step) error {
	for i := 1; i < len(steps); i++ {
		p, s := steps[i-1], steps[i]
		if want := p.Cursor + uint64(p.Batch)*uint64(s.Step-p.Step); s.Cursor != want {
			return fmt.Errorf("step %d starts at sample %d, want %d", s.Step, s.Cursor, want)
		}
	}
	return nil
}

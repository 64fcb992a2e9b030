// Command chaos runs an elastic job on loopback and hits it with faults at
// random moments: kill -9, SIGSTOP then SIGCONT (a hung host), SIGTERM, and
// restarts of the killed agents. It is bounded: --faults faults, each at
// most a few seconds apart, and a deadline. At the end the survivors must
// hold bit-identical weights (per pipeline stage with --pp) and every
// sample must have been trained exactly once (a step replayed after a
// checkpoint restore starts at the same sample both times).
//
//	go build -o /tmp/troupe ./cmd/troupe
//	go run ./examples/chaos --troupe /tmp/troupe --faults 6 --seed 1
//	go run ./examples/chaos --troupe /tmp/troupe --faults 6 --seed 1 --pp 2
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/troupe-ml/troupe/examples/internal/cluster"
)

func main() {
	troupe := flag.String("troupe", "troupe", "the troupe binary")
	faults := flag.Int("faults", 6, "number of faults to inject")
	seed := flag.Uint64("seed", 1, "seed of the fault schedule (printed; rerun it with the same seed)")
	pp := flag.Int("pp", 1, "pipeline stages: from 2 the agents hold stages, and checkpoint every 100 steps for a stage whose every holder dies")
	flag.Parse()
	if *pp < 1 || *pp > 3 {
		log.Fatalf("--pp %d: want 1, 2 or 3 (four agents, at least two alive)", *pp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "troupe-chaos-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	const n = 4
	// One Linear per pipeline stage: 784-64-…-64-10.
	layers := "784" + strings.Repeat(",64", *pp-1) + ",10"
	args := []string{"--min-nodes", "2", "--key", "passphrase:chaos-example-key",
		"--model", "mlp", "--layers", layers, "--data", "synthetic-mlp", "--batch", "48", "--steps", "20000"}
	if *pp > 1 {
		args = append(args, "--pp", strconv.Itoa(*pp), "--micro-batches", "2",
			"--ckpt-dir", filepath.Join(dir, "ckpt"), "--ckpt-every", "100")
	}
	c, err := cluster.New(ctx, *troupe, dir, n, args)
	if err != nil {
		log.Fatal(err)
	}
	defer c.KillAll()
	alive := map[int]bool{}
	for i := 0; i < n; i++ {
		if _, err := c.Start(i); err != nil {
			log.Fatal(err)
		}
		alive[i] = true
	}
	r := rand.New(rand.NewPCG(*seed, 0))
	log.Printf("chaos seed %d, %d faults", *seed, *faults)
	for f := 0; f < *faults && ctx.Err() == nil; f++ {
		time.Sleep(time.Duration(500+r.IntN(2500)) * time.Millisecond)
		var live []int
		for i, ok := range alive {
			if ok {
				live = append(live, i)
			}
		}
		victim := fmt.Sprintf("n%d", live[r.IntN(len(live))]+1)
		vi := int(victim[1] - '1')
		switch r.IntN(3) {
		case 0:
			if len(live) <= 2 {
				continue // keep a majority of the world alive
			}
			log.Printf("step %d: kill -9 %s, restart it in 1 s", c.LastStep(), victim)
			c.Signal(victim, syscall.SIGKILL)
			time.Sleep(time.Second)
			if _, err := c.Start(vi); err != nil {
				log.Fatal(err)
			}
		case 1:
			log.Printf("step %d: SIGSTOP %s for 2 s", c.LastStep(), victim)
			c.Signal(victim, syscall.SIGSTOP)
			time.Sleep(2 * time.Second)
			c.Signal(victim, syscall.SIGCONT)
		case 2:
			if len(live) <= 2 {
				continue
			}
			log.Printf("step %d: SIGTERM %s", c.LastStep(), victim)
			c.Signal(victim, syscall.SIGTERM)
			alive[vi] = false
		}
	}
	first := map[int]string{} // stage → the first checksum seen
	for i := 0; i < n; i++ {
		s, err := c.Wait(fmt.Sprintf("n%d", i+1))
		if err != nil {
			log.Printf("%v (killed agents exit non-zero)", err)
			continue
		}
		fmt.Printf("%s: step %d, stage %d, checksum %s, left %v\n", s.Name, s.Step, s.Stage, s.Checksum, s.Left)
		if !s.Left && s.Stage >= 0 {
			if f, ok := first[s.Stage]; !ok {
				first[s.Stage] = s.Checksum
			} else if s.Checksum != f {
				log.Fatalf("replicas of stage %d differ: %s has %s, another %s", s.Stage, s.Name, s.Checksum, f)
			}
		}
	}
	all := c.Steps()
	for _, w := range cluster.Worlds(all) {
		fmt.Println(w)
	}
	if err := cluster.ExactlyOnce(all); err != nil {
		log.Fatal(err)
	}
	fmt.Println("replicas bit-identical; every sample of the stream trained exactly once")
}

// Command elastic runs an elastic job on loopback that grows and shrinks:
// two agents start it, a third joins, then one leaves (SIGTERM), and the
// job goes on to its target step through each change, printing its worlds.
//
//	go build -o /tmp/troupe ./cmd/troupe
//	go run ./examples/elastic --troupe /tmp/troupe
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"syscall"
	"time"

	"github.com/troupe-ml/troupe/examples/internal/cluster"
)

func main() {
	troupe := flag.String("troupe", "troupe", "the troupe binary")
	steps := flag.Int("steps", 3000, "target step")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "troupe-elastic-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	c, err := cluster.New(ctx, *troupe, dir, 3, []string{"--min-nodes", "2", "--key", "passphrase:elastic-example-key",
		"--model", "mlp", "--layers", "784,64,10", "--data", "synthetic-mlp", "--batch", "48", "--steps", fmt.Sprint(*steps)})
	if err != nil {
		log.Fatal(err)
	}
	defer c.KillAll()
	waitStep := func(n int) {
		for c.LastStep() < n && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i := 0; i < 2; i++ {
		if _, err := c.Start(i); err != nil {
			log.Fatal(err)
		}
	}
	waitStep(*steps / 5)
	log.Printf("step %d: scaling up: n3 joins", c.LastStep())
	if _, err := c.Start(2); err != nil {
		log.Fatal(err)
	}
	waitStep(*steps / 2)
	log.Printf("step %d: scaling down: SIGTERM to n2", c.LastStep())
	if err := c.Signal("n2", syscall.SIGTERM); err != nil {
		log.Fatal(err)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		s, err := c.Wait(n)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: step %d, checksum %s, left %v\n", s.Name, s.Step, s.Checksum, s.Left)
	}
	all := c.Steps()
	for _, w := range cluster.Worlds(all) {
		fmt.Println(w)
	}
	if err := cluster.ExactlyOnce(all); err != nil {
		log.Fatal(err)
	}
	fmt.Println("every sample of the stream trained exactly once")
}

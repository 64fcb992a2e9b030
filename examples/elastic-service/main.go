// Command elastic-service is a Go HTTP service that is a node of an
// elastic troupe job: it runs train.RunAgent in the background (no troupe
// binary, no sidecar), serves the job's membership and progress as this
// node sees them on /status, and on SIGTERM leaves the job at a step
// boundary: the other nodes go on without it at once.
//
// Start one per node, every one with the same --join list (--min-nodes 1:
// when one of the two leaves, the other trains on alone):
//
//	go run ./examples/elastic-service --name n1 --listen 127.0.0.1:7101 --http 127.0.0.1:8081 --join 127.0.0.1:7101,127.0.0.1:7102 --min-nodes 1
//	go run ./examples/elastic-service --name n2 --listen 127.0.0.1:7102 --http 127.0.0.1:8082 --join 127.0.0.1:7101,127.0.0.1:7102 --min-nodes 1
//	curl 127.0.0.1:8081/status
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	_ "github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/train"
)

// status is what /status reports.
type status struct {
	State string `json:"state"` // joining, training, finished, left, failed
	// World is the generation this node is part of: its members, the
	// layout, where its state came from.
	World   *train.WorldInfo    `json:"world,omitempty"`
	Step    int                 `json:"step"`
	Loss    float64             `json:"loss"`
	Summary *train.AgentSummary `json:"summary,omitempty"`
	Error   string              `json:"error,omitempty"`
}

func main() {
	name := flag.String("name", "", "this node's name, unique in the job")
	listen := flag.String("listen", "127.0.0.1:7101", "gossip address of this node")
	join := flag.String("join", "", "comma-separated gossip addresses of the job's nodes")
	httpAddr := flag.String("http", "127.0.0.1:8081", "HTTP listen address")
	minNodes := flag.Int("min-nodes", 2, "the job forms once this many nodes are present")
	steps := flag.Int("steps", 2000, "the job's optimizer steps")
	key := flag.String("key", "passphrase:elastic-service-example", "cluster key (the same on every node)")
	flag.Parse()
	if *name == "" {
		log.Fatal("--name is needed")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var mu sync.Mutex
	st := status{State: "joining"}

	cfg, err := train.DefaultConfigFor("mlp") // a small MLP: quick to train on a laptop
	if err != nil {
		log.Fatal(err)
	}
	cfg.Data, cfg.Steps, cfg.Epochs = "synthetic-mlp", *steps, 0
	ac := train.AgentConfig{Train: cfg, Name: *name, Listen: *listen, Join: strings.Split(*join, ","), MinNodes: *minNodes, Key: *key}
	logger, _ := zap.NewProduction()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// RunAgent calls OnWorld and OnStep on this goroutine, for every
		// generation and step of the job while this node is a member.
		sum, err := train.RunAgent(ctx, ac, train.Options{
			Logger:  logger.With(zap.String("node", *name)),
			OnWorld: func(w train.WorldInfo) { mu.Lock(); st.State, st.World = "training", &w; mu.Unlock() },
			OnStep:  func(m train.StepMetrics) { mu.Lock(); st.Step, st.Loss = m.Step, m.Loss; mu.Unlock() },
		})
		mu.Lock()
		defer mu.Unlock()
		st.Summary = sum
		switch {
		case err != nil:
			st.State, st.Error = "failed", err.Error()
		case sum.Left:
			st.State = "left"
		default:
			st.State = "finished"
		}
	}()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	})
	srv := &http.Server{Addr: *httpAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-done // the node's part is over: left, finished or failed
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	log.Printf("node %s: status on http://%s/status", *name, *httpAddr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
	<-done
	mu.Lock()
	defer mu.Unlock()
	b, _ := json.Marshal(st)
	os.Stdout.Write(append(b, '\n'))
	if st.State == "failed" {
		os.Exit(1)
	}
}

// Command service is a Go HTTP service that embeds troupe: it trains a
// model in the background (its workers are actors of this process) while
// serving live progress, and stops training cleanly on SIGTERM or on
// POST /stop. Stopped or finished, it keeps the weights it trained: they
// are written to --save (the last step the workers completed), and
// /progress says where and of which step.
//
//	go run ./examples/service --addr 127.0.0.1:8080 --dp 2 --save weights.safetensors
//	curl 127.0.0.1:8080/progress
//	curl -X POST 127.0.0.1:8080/stop
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
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	_ "github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/train"
)

// status is what /progress reports.
type status struct {
	State      string  `json:"state"` // training, done, stopped, failed
	Step       int     `json:"step"`
	Loss       float64 `json:"loss"`
	TokensPerS float64 `json:"tokens_per_s"`
	World      string  `json:"world"`
	// Saved is where the weights are, and SavedStep the step they are of.
	Saved     string `json:"saved,omitempty"`
	SavedStep int    `json:"saved_step,omitempty"`
	Error     string `json:"error,omitempty"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "HTTP listen address")
	dp := flag.Int("dp", 2, "data-parallel worker actors")
	steps := flag.Int("steps", 300, "training steps")
	save := flag.String("save", "service-weights.safetensors", "where the trained weights go (also when stopped)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	trainCtx, stopTraining := context.WithCancel(ctx)
	defer stopTraining()

	var mu sync.Mutex
	st := status{State: "training"}

	cfg := train.DefaultConfig() // the GPT on the Go specification
	cfg.DP, cfg.Steps, cfg.Save = *dp, *steps, *save
	logger, _ := zap.NewProduction()
	done := make(chan struct{})
	go func() {
		defer close(done)
		sum, err := train.Run(trainCtx, cfg, train.Options{
			Logger:  logger,
			OnWorld: func(w train.WorldInfo) { mu.Lock(); st.World = w.Mesh; mu.Unlock() },
			OnStep: func(m train.StepMetrics) {
				mu.Lock()
				st.Step, st.Loss, st.TokensPerS = m.Step, m.Loss, m.TokensPerS
				mu.Unlock()
			},
		})
		mu.Lock()
		defer mu.Unlock()
		if sum != nil {
			st.Saved, st.SavedStep = sum.Saved, sum.SavedStep
		}
		switch {
		case err == nil:
			st.State = "done"
		case errors.Is(err, context.Canceled):
			st.State = "stopped"
			if sum == nil || sum.Saved == "" {
				st.Error = err.Error() // why nothing was saved
			}
		default:
			st.State, st.Error = "failed", err.Error()
		}
	}()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /progress", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, _ *http.Request) {
		stopTraining()
		w.WriteHeader(http.StatusAccepted)
	})
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	log.Printf("serving progress on http://%s/progress", *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
	stopTraining()
	<-done
	mu.Lock()
	log.Printf("training %s at step %d; weights of step %d in %s", st.State, st.Step, st.SavedStep, st.Saved)
	mu.Unlock()
}

// Command service is a Go HTTP service that embeds troupe: it trains a
// model in the background (its workers are actors of this process) while
// serving live progress, and stops training cleanly on SIGTERM or on
// POST /stop, keeping the weights trained so far.
//
//	go run ./examples/service --addr 127.0.0.1:8080 --dp 2
//	curl 127.0.0.1:8080/progress
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

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "HTTP listen address")
	dp := flag.Int("dp", 2, "data-parallel worker actors")
	steps := flag.Int("steps", 300, "training steps")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	trainCtx, stopTraining := context.WithCancel(ctx)
	defer stopTraining()

	var mu sync.Mutex
	var last train.StepMetrics
	state := "training"

	cfg := train.DefaultConfig() // the GPT on the Go specification
	cfg.DP, cfg.Steps = *dp, *steps
	logger, _ := zap.NewProduction()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := train.Run(trainCtx, cfg, train.Options{
			Logger: logger,
			OnStep: func(m train.StepMetrics) { mu.Lock(); last = m; mu.Unlock() },
		})
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			state = "done"
		case errors.Is(err, context.Canceled):
			state = "stopped"
		default:
			state = "failed: " + err.Error()
		}
	}()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /progress", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"state": state, "step": last.Step, "loss": last.Loss,
			"tokens_per_s": last.TokensPerS, "world": last.World})
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
}

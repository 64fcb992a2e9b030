// Command quickstart trains the MLP 784-256-10 on MNIST for two epochs with
// troupe's trainer, in this process, and prints the held-out accuracy.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"log"

	"go.uber.org/zap"

	_ "github.com/troupe-ml/troupe/kernels/cpu" // the CPU kernels backend
	"github.com/troupe-ml/troupe/train"
)

func main() {
	cfg, err := train.DefaultConfigFor("mlp") // MLP 784-256-10, SGD momentum 0.9, batch 64, 2 epochs
	if err != nil {
		log.Fatal(err)
	}
	cfg.Data = "mnist" // the real MNIST, from the Go module cache
	logger, _ := zap.NewDevelopment()
	sum, err := train.Run(context.Background(), cfg, train.Options{Logger: logger})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %d steps, test accuracy %.2f%%, %.0f samples/s\n", sum.Model, sum.Steps, 100*sum.EvalAcc, sum.SamplesPerS)
}

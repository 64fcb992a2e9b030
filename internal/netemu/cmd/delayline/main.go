// Command delayline delays every packet routed into a TUN device by a
// fixed time and drops a share at random (netem's delay and loss, for
// kernels without sch_netem): see package
// netemu and scripts/netns-sync-bench.sh, which runs it in the router
// namespace of its test hosts.
//
//	delayline --dev tun0 --delay 20ms [--limit 10000] [--loss 0.2 --seed 1]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/internal/netemu"
)

func main() {
	dev := flag.String("dev", "tun0", "the TUN device the packets to delay are routed to")
	delay := flag.Duration("delay", 20*time.Millisecond, "how long each packet is held")
	limit := flag.Int("limit", 10000, "packets held at most (more are dropped)")
	loss := flag.Float64("loss", 0, "the share of packets dropped at random, 0 to 1")
	seed := flag.Uint64("seed", 1, "seed of the losses")
	flag.Parse()
	if *delay < 0 || *limit < 1 || !(*loss >= 0 && *loss <= 1) {
		fmt.Fprintf(os.Stderr, "delayline: --delay %v, --limit %d, --loss %v: want a delay ≥ 0, a limit ≥ 1 and a loss in [0, 1]\n", *delay, *limit, *loss)
		os.Exit(2)
	}
	log, _ := zap.NewProduction()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Info("delay line up", zap.String("dev", *dev), zap.Duration("delay", *delay), zap.Int("limit", *limit), zap.Float64("loss", *loss))
	passed, dropped, err := netemu.Run(ctx, *dev, &netemu.Line{Delay: *delay, Limit: *limit, Loss: *loss, Seed: *seed})
	log.Info("delay line down", zap.Int64("passed", passed), zap.Int64("dropped", dropped), zap.Error(err))
	if err != nil {
		os.Exit(1)
	}
}

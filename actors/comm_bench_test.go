package actors

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/troupe-ml/troupe/collective"
)

// BenchmarkLocalAllReduce measures the local (pointer-passing) transport;
// troupe bench allreduce is the full measurement, this one is for profiles.
func BenchmarkLocalAllReduce(b *testing.B) {
	for _, P := range []int{2, 4} {
		for _, mib := range []int{1, 64} {
			b.Run(fmt.Sprintf("P=%d/%dMiB", P, mib), func(b *testing.B) {
				sys, err := NewSystem(DefaultSystemConfig())
				if err != nil {
					b.Fatal(err)
				}
				defer sys.Close()
				comms, err := StartLocal(sys, P, DefaultCommConfig())
				if err != nil {
					b.Fatal(err)
				}
				defer func() {
					for _, c := range comms {
						c.Close()
					}
				}()
				n := mib << 20 / 4
				bufs := make([][]float32, P)
				for r := range bufs {
					bufs[r] = make([]float32, n)
				}
				benchAllReduce(b, comms, bufs)
			})
		}
	}
}

// BenchmarkRemoteAllReduce runs two remote systems in this process, talking
// over loopback (gRPC control, data plane or protoactor chunks), for
// profiles of the cross-process transports.
func BenchmarkRemoteAllReduce(b *testing.B) {
	for _, tr := range []Transport{TransportTCP, TransportActor} {
		b.Run(fmt.Sprintf("%s/16MiB", tr), func(b *testing.B) {
			if raceEnabled {
				b.Skip("see raceEnabled")
			}
			const P = 2
			systems := make([]*System, P)
			addrs := make([]string, P)
			for r := range systems {
				sc := DefaultSystemConfig()
				sc.Remote = true
				sys, err := NewSystem(sc)
				if err != nil {
					b.Fatal(err)
				}
				systems[r], addrs[r] = sys, sys.Address()
			}
			defer closeSystems(systems)
			cfg := DefaultCommConfig()
			cfg.Transport = tr
			if tr == TransportActor {
				cfg.Collective.SubChunkBytes = 1 << 20
			}
			comms := make([]collective.Communicator, P)
			var wg sync.WaitGroup
			for r := range systems {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := StartRemote(systems[r], RemoteWorld{Rank: r, Addrs: addrs}, cfg)
					if err != nil {
						b.Error(err)
					}
					comms[r] = c
				}()
			}
			wg.Wait()
			defer func() {
				for _, c := range comms {
					if c != nil {
						c.Close()
					}
				}
			}()
			n := 16 << 20 / 4
			bufs := [][]float32{make([]float32, n), make([]float32, n)}
			benchAllReduce(b, comms, bufs)
		})
	}
}

// benchAllReduce times b.N all-reduces of bufs[r] on every rank's comm at
// once.
func benchAllReduce(b *testing.B, comms []collective.Communicator, bufs [][]float32) {
	b.SetBytes(int64(4 * len(bufs[0])))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := c.AllReduce(context.Background(), bufs[r], collective.Sum).Wait(); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
	}
}

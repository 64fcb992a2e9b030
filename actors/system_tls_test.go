package actors

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/internal/pki"
)

// TestRemoteTLS: ranks whose systems and data planes run over TLS with
// certificates of one CA all-reduce correctly; a rank whose certificate
// another CA signed cannot form a world with a cluster node, both ends
// fail within the handshake timeout, and the cluster node logs the refusal.
func TestRemoteTLS(t *testing.T) {
	skipIfRace(t)
	ca, other := testCA(t, "cluster"), testCA(t, "intruder-ca")
	core, logs := observer.New(zapcore.WarnLevel)
	start := func(id *pki.Identity, log *zap.Logger) *System {
		sc := DefaultSystemConfig()
		sc.Remote, sc.TLS, sc.Logger = true, id, log
		sys, err := NewSystem(sc)
		if err != nil {
			t.Fatal(err)
		}
		return sys
	}
	var systems []*System
	t.Cleanup(func() { closeSystems(systems) })
	ids := []*pki.Identity{testIdentity(t, ca, "n0"), testIdentity(t, ca, "n1"), testIdentity(t, ca, "n2"), testIdentity(t, other, "rogue")}
	for i, id := range ids {
		log := zap.NewNop()
		if i == 2 {
			log = zap.New(core)
		}
		systems = append(systems, start(id, log))
	}
	world := func(names string, sys ...*System) ([]collective.Communicator, []error) {
		addrs := make([]string, len(sys))
		for i, s := range sys {
			addrs[i] = s.Address()
		}
		comms, errs := make([]collective.Communicator, len(sys)), make([]error, len(sys))
		var wg sync.WaitGroup
		for r, s := range sys {
			cfg := DefaultCommConfig()
			cfg.World = names
			cfg.Transport = TransportTCP
			cfg.DataPlane.TLS = s.cfg.TLS
			cfg.HandshakeTimeout = 2 * time.Second
			wg.Add(1)
			go func() {
				defer wg.Done()
				comms[r], errs[r] = StartRemote(s, RemoteWorld{Rank: r, Addrs: addrs}, cfg)
			}()
		}
		wg.Wait()
		t.Cleanup(func() {
			for _, c := range comms {
				if c != nil {
					c.Close()
				}
			}
		})
		return comms, errs
	}

	comms, errs := world("good", systems[0], systems[1])
	for r, err := range errs {
		if err != nil {
			t.Fatalf("cluster rank %d: %v", r, err)
		}
	}
	bufs := [][]float32{{1, 2, 3}, {10, 20, 30}}
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = c.AllReduce(context.Background(), bufs[r], collective.Sum).Wait()
		}()
	}
	wg.Wait()
	for r := range comms {
		if errs[r] != nil || bufs[r][0] != 11 || bufs[r][2] != 33 {
			t.Fatalf("rank %d over TLS: %v %v", r, bufs[r], errs[r])
		}
	}

	_, errs = world("mixed", systems[2], systems[3])
	for r, err := range errs {
		if !errors.Is(err, ErrHandshake) {
			t.Fatalf("rank %d with a node of another CA: %v, want ErrHandshake", r, err)
		}
	}
	// The cluster node dials the rogue too (every rank greets every
	// other) and refuses its certificate.
	if !logged(logs, "actors: refused a peer") || !logged(logs, `issuer "intruder-ca"`) {
		t.Fatalf("the cluster node logged %v, want its refusal of the rogue", logs.All())
	}
}

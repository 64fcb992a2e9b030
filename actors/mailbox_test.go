package actors

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// A message that names an actor while protoactor's spawner is between
// registering its process and giving its mailbox a dispatcher (held open
// here by an init hook, as a remote peer's hello can land there) waits for
// the actor to start and arrives after Started; with protoactor's own
// mailbox the send schedules on a nil dispatcher and panics (seen: a node
// of an elastic e2e test crashed so, a peer's message arriving while its
// Comm actor for a new generation was being spawned).
func TestMessageBeforeTheActorStarts(t *testing.T) {
	sys := newLocalSystem(t)
	entered, gate := make(chan struct{}), make(chan struct{})
	got := make(chan any, 4)
	props := Props(func() actor.Actor {
		return actor.ReceiveFunc(func(c actor.Context) {
			switch m := c.Message().(type) {
			case *actor.Started, string:
				got <- m
			}
		})
	}, actor.WithOnInit(func(actor.Context) {
		close(entered)
		<-gate
	}))
	spawned := make(chan error, 1)
	go func() {
		_, err := sys.Root().SpawnNamed(props, "early")
		spawned <- err
	}()
	<-entered // registered under its name, not started
	sys.Root().Send(actor.NewPID(sys.Address(), "early"), "hello")
	close(gate)
	if err := <-spawned; err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"started", "hello"} {
		select {
		case m := <-got:
			if _, ok := m.(*actor.Started); (ok && want != "started") || (!ok && m != want) {
				t.Fatalf("message %d: %#v, want %s", i, m, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("message %d (%s) never arrived", i, want)
		}
	}
}

package actors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-ml/troupe/actors/actorspb"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/failure"
)

// ping and pong are a test request and reply.
type ping struct {
	peer uint32
	fail error
	hang bool
	n    int
}

type pong struct {
	peer uint32
	err  error
	n    int
}

func (p *pong) GetPeer() uint32 { return p.peer }
func (p *pong) Failed() error   { return p.err }

// spawnPeers starts n peers that answer a ping with a pong (n+1), fail it,
// or never answer.
func spawnPeers(t *testing.T, sys *System, n int) []*actor.PID {
	t.Helper()
	pids := make([]*actor.PID, n)
	for i := range pids {
		props := actor.PropsFromFunc(func(c actor.Context) {
			if m, ok := c.Message().(*ping); ok && !m.hang {
				c.Respond(&pong{peer: m.peer, err: m.fail, n: m.n + 1})
			}
		})
		var err error
		if pids[i], err = sys.Root().SpawnNamed(props, fmt.Sprintf("%s-peer-%d", t.Name(), i)); err != nil {
			t.Fatal(err)
		}
	}
	return pids
}

func pings(n int, edit func(p int, m *ping)) []any {
	msgs := make([]any, n)
	for p := range msgs {
		m := &ping{peer: uint32(p), n: 10 * p}
		if edit != nil {
			edit(p, m)
		}
		msgs[p] = m
	}
	return msgs
}

func startGroup(t *testing.T, n int, timeout time.Duration) (*System, []*actor.PID, *Group) {
	t.Helper()
	sys, err := NewSystem(SystemConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Close() })
	peers := spawnPeers(t, sys, n)
	g, err := NewGroup(sys, GroupConfig{Name: "group-" + t.Name(), Peers: peers, CallTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return sys, peers, g
}

// A call collects every asked peer's reply by peer index; peers given no
// request are left out.
func TestGroupCallGathers(t *testing.T) {
	_, _, g := startGroup(t, 3, time.Minute)
	replies, err := g.Call(context.Background(), pings(3, nil))
	if err != nil {
		t.Fatal(err)
	}
	for p, r := range replies {
		if got := r.(*pong).n; got != 10*p+1 {
			t.Errorf("peer %d answered %d", p, got)
		}
	}
	msgs := pings(3, nil)
	msgs[1] = nil
	replies, err = g.Call(context.Background(), msgs)
	if err != nil || replies[1] != nil || replies[2] == nil {
		t.Fatalf("a call skipping peer 1: %v, %v", replies, err)
	}
}

// A peer's failure fails the call, naming the peer and keeping its code.
func TestGroupCallFailsWithThePeersError(t *testing.T) {
	_, _, g := startGroup(t, 3, time.Minute)
	bad := failure.New(failure.Output, "test: cannot write")
	_, err := g.Call(context.Background(), pings(3, func(p int, m *ping) {
		if p == 2 {
			m.fail = bad
		}
	}))
	if !errors.Is(err, bad) || !strings.Contains(err.Error(), "peer 2") || failure.CodeOf(err) != failure.Output {
		t.Fatalf("err %v (%s)", err, failure.CodeOf(err))
	}
	if _, err := g.Call(context.Background(), pings(3, nil)); err != nil {
		t.Fatalf("the next call: %v", err)
	}
}

// A silent peer fails the call after the call timeout, named; its late
// answer (it never comes here) could not be taken for a later call's.
func TestGroupSilentPeer(t *testing.T) {
	_, _, g := startGroup(t, 2, 200*time.Millisecond)
	_, err := g.Call(context.Background(), pings(2, func(p int, m *ping) { m.hang = p == 1 }))
	if !errors.Is(err, ErrPeerSilent) || !strings.Contains(err.Error(), "peer 1") || !failure.Transient(err) {
		t.Fatalf("err %v", err)
	}
}

// A call whose peers finish together (CallWithin): once peer 0 answered,
// silent peer 2 fails it after the lag, named, long before the call
// timeout; peers that all answer pass, and the group takes the next call.
func TestGroupCallWithinLag(t *testing.T) {
	_, _, g := startGroup(t, 3, time.Minute)
	start := time.Now()
	_, err := g.CallWithin(context.Background(), pings(3, func(p int, m *ping) { m.hang = p == 2 }), 100*time.Millisecond)
	if !errors.Is(err, ErrPeerSilent) || !strings.Contains(err.Error(), "peer 2 did not answer within 100ms of peer") || !failure.Transient(err) {
		t.Fatalf("err %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the call waited %v: the lag did not bound it", d)
	}
	replies, err := g.CallWithin(context.Background(), pings(3, nil), 100*time.Millisecond)
	if err != nil || replies[2].(*pong).n != 21 {
		t.Fatalf("a call every peer answers: %v, %v", replies, err)
	}
}

// A stopped peer fails the call in flight and every later one.
func TestGroupLostPeer(t *testing.T) {
	sys, peers, g := startGroup(t, 2, time.Minute)
	done := make(chan error, 1)
	go func() {
		_, err := g.Call(context.Background(), pings(2, func(p int, m *ping) { m.hang = true }))
		done <- err
	}()
	if err := sys.Root().StopFuture(peers[0]).Wait(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, collective.ErrPeerLost) || !strings.Contains(err.Error(), "peer 0") {
			t.Fatalf("call in flight: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not fail when its peer stopped")
	}
	if _, err := g.Call(context.Background(), pings(2, nil)); !errors.Is(err, collective.ErrPeerLost) {
		t.Fatalf("a later call: %v", err)
	}
	g.Lost(1, "test: process exited")
	if _, err := g.Call(context.Background(), pings(2, nil)); !strings.Contains(fmt.Sprint(err), "process exited") {
		t.Fatalf("after Lost: %v", err)
	}
}

// Cancelling the caller's context fails the call at once; the next call
// is not confused by the abandoned one's replies.
func TestGroupCancel(t *testing.T) {
	_, _, g := startGroup(t, 2, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := g.Call(ctx, pings(2, func(p int, m *ping) { m.hang = p == 0 }))
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, ErrCanceled) && !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled call did not return")
	}
	replies, err := g.Call(context.Background(), pings(2, func(p int, m *ping) { m.n = 100 }))
	if err != nil || replies[0].(*pong).n != 101 || replies[1].(*pong).n != 101 {
		t.Fatalf("the call after a cancelled one: %v, %v", replies, err)
	}
}

// Peers that start on their own say hello; Ready waits for all of them,
// and a hello with another protocol or for a taken slot is refused.
func TestGroupHello(t *testing.T) {
	sys, err := NewSystem(SystemConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	peers := spawnPeers(t, sys, 2)
	g, err := NewGroup(sys, GroupConfig{Name: "hello", Peers: make([]*actor.PID, 2), Protocol: 7, CallTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.Call(context.Background(), pings(2, nil)); err == nil {
		t.Fatal("a call before the hellos succeeded")
	}
	ready := make(chan error, 1)
	go func() { ready <- g.Ready(context.Background()) }()
	hello := func(p int, pid *actor.PID, protocol uint32) {
		sys.Root().Send(g.PID(), &actorspb.PeerHello{Peer: uint32(p), Address: pid.Address, Actor: pid.Id, Protocol: protocol})
	}
	hello(0, peers[0], 6) // refused: another protocol
	hello(0, peers[0], 7)
	hello(0, peers[1], 7) // refused: slot 0 is taken
	if _, err := g.Call(context.Background(), pings(2, nil)); err == nil {
		t.Fatal("a call with one peer unknown succeeded")
	}
	select {
	case err := <-ready:
		t.Fatalf("ready with one peer unknown: %v", err)
	default:
	}
	hello(1, peers[1], 7)
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not ready after every hello")
	}
	replies, err := g.Call(context.Background(), pings(2, nil))
	if err != nil || replies[1].(*pong).n != 11 {
		t.Fatalf("after the hellos: %v, %v", replies, err)
	}
}

// The call's core: a reply from a peer not asked, or a second one, changes
// nothing; the first failure ends the call.
func TestGatherCore(t *testing.T) {
	name := func(p int) string { return fmt.Sprintf("rank %d", p) }
	g := newGather([]any{&ping{}, nil, &ping{}})
	g.reply(&pong{peer: 1, n: 5}, name) // not asked
	g.reply(&pong{peer: 0, n: 1}, name)
	g.reply(&pong{peer: 0, n: 2}, name) // a second answer
	if g.done() || g.replies[1] != nil || g.replies[0].(*pong).n != 1 || g.silent(name) != "rank 2" {
		t.Fatalf("after peer 0: done %v, replies %v, silent %q", g.done(), g.replies, g.silent(name))
	}
	g.reply(&pong{peer: 9}, name) // out of range
	g.reply(&pong{peer: 2, err: errors.New("disk full")}, name)
	if !g.done() || g.err == nil || !strings.Contains(g.err.Error(), "rank 2: disk full") {
		t.Fatalf("after peer 2 failed: %v", g.err)
	}
	g.fail(errors.New("later"))
	if strings.Contains(g.err.Error(), "later") {
		t.Fatal("a later failure replaced the first")
	}
	if g := newGather([]any{nil, nil}); !g.done() {
		t.Fatal("a call that asks nobody is not done")
	}
}

// A reply whose Failed panics breaks the group: the call in flight fails
// at once naming the group, and so does every later call, instead of the
// caller waiting out the call timeout on a restarted actor.
func TestGroupPanicFailsTheCall(t *testing.T) {
	sys, err := NewSystem(SystemConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	bad := actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*ping); ok {
			c.Respond(&panicky{peer: m.peer})
		}
	})
	pid, err := sys.Root().SpawnNamed(bad, "panicky-peer")
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGroup(sys, GroupConfig{Name: "breaks", Peers: []*actor.PID{pid}, CallTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for range 2 {
		_, err := g.Call(context.Background(), pings(1, nil))
		if err == nil || !strings.Contains(err.Error(), "group breaks panicked") {
			t.Fatalf("%v", err)
		}
	}
}

// panicky is a reply that panics when the group reads it.
type panicky struct{ peer uint32 }

func (p *panicky) GetPeer() uint32 { return p.peer }
func (p *panicky) Failed() error   { panic("a bug in a reply") }

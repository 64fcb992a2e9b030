package elastic

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-ml/troupe/elastic/elasticpb"
)

// A commit proof teaches a node a world it never saw committed, and when
// Learn returns the node has taken it (Hold, asked next, is not refused as
// if a world were being formed); a forged, damaged or stale proof teaches
// nothing.
func TestNodesLearnCommitProof(t *testing.T) {
	_, ns := startDrained(t, "a", "b")
	a, b := ns[0], ns[1]
	w := waitWorld(t, b, "a b", hasNames("a b"))
	next := w.clone()
	next.Gen, next.Reason = w.Gen+1, "test"
	proof, err := a.CommitProof(next)
	if err != nil {
		t.Fatal(err)
	}

	var env elasticpb.Envelope
	if err := proto.Unmarshal(proof, &env); err != nil {
		t.Fatal(err)
	}
	env.Mac[0] ^= 1
	forged, _ := proto.Marshal(&env)
	stale, _ := a.CommitProof(World{})
	for name, p := range map[string][]byte{"forged": forged, "garbage": []byte("not a proof"), "no world": stale} {
		if err := b.Learn(p, time.Second); !errors.Is(err, ErrWire) {
			t.Errorf("%s proof: Learn gave %v, want ErrWire", name, err)
		}
	}
	old, _ := a.CommitProof(w)
	if err := b.Learn(old, time.Second); err != nil {
		t.Errorf("a proof of the world it holds: %v", err)
	}
	if got := b.World(); !got.Equal(w) {
		t.Fatalf("b holds %s after proofs it must not learn from, want %s", got, w)
	}

	if err := b.Learn(proof, time.Second); err != nil {
		t.Fatal(err)
	}
	if got := b.World(); !got.Equal(next) {
		t.Fatalf("b holds %s after Learn, want %s", got, next)
	}
	if !b.Hold() {
		t.Fatal("b refuses a step after learning the commit")
	}
	b.Release()
}

package elastic

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-ml/troupe/elastic/elasticpb"
)

// learnMsg hands the membership actor a world proven committed (Learn);
// the actor answers learnedMsg once its core has taken it.
type (
	learnMsg   struct{ w World }
	learnedMsg struct{}
)

// CommitProof is what a trainer that saw world w committed attaches to the
// calls it makes in w's generation: w sealed with the cluster key, so that
// a member that missed the commit (lost with its proposer) learns it from
// the call (Learn) instead of waiting for a commit that never comes. A
// node without the key cannot forge one.
func (n *Node) CommitProof(w World) ([]byte, error) {
	env, err := seal(n.key, n.protocol, n.self.ActorAddr, Message{Type: MsgCommit, From: n.self.ID, Value: w})
	if err != nil {
		return nil, err
	}
	return proto.Marshal(env)
}

// Learn takes a commit proof from a call (CommitProof): the world it names
// committed, since its leader calls its members only after its own node
// committed it. A world this node already committed or passed costs
// nothing; a newer one is handed to the membership actor, and Learn waits
// until the core has taken it (so that Hold, asked next, sees the world
// committed), at most timeout. A proof that does not decode or
// authenticate is an ErrWire error, and nothing is learned.
func (n *Node) Learn(proof []byte, timeout time.Duration) error {
	var env elasticpb.Envelope
	if err := proto.Unmarshal(proof, &env); err != nil {
		return fmt.Errorf("%w: commit proof: %v", ErrWire, err)
	}
	m, err := open(n.key, n.protocol, &env)
	if err != nil {
		return fmt.Errorf("commit proof: %w", err)
	}
	if m.Type != MsgCommit || m.Value.Gen == 0 || validWorld(m.Value) != nil {
		return fmt.Errorf("%w: commit proof holds %s", ErrWire, m)
	}
	if m.Value.Gen <= n.World().Gen {
		return nil
	}
	if err := n.Err(); err != nil {
		return err
	}
	if _, err := n.sys.Root().RequestFuture(n.pid, &learnMsg{w: m.Value}, timeout).Result(); err != nil {
		return fmt.Errorf("learning generation %d: %w", m.Value.Gen, err)
	}
	return nil
}

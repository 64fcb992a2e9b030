package elastic

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-ml/troupe/elastic/elasticpb"
)

func testWorld(gen uint64, ids ...string) World {
	w := World{Gen: gen, Proposer: ids[0], Reason: "join n4"}
	for i, id := range ids {
		w.Members = append(w.Members, Member{ID: id, Name: id, Start: int64(i + 1), ActorAddr: "127.0.0.1:7000",
			DataAddr: "127.0.0.1:7100", Devices: []string{"cpu:0"}, Protocol: ProtocolVersion})
	}
	return w
}

// wireCases are one message of every type with every field in use.
func wireCases() []Message {
	base, value := testWorld(3, "n1", "n2", "n3"), testWorld(4, "n1", "n2", "n3", "n4")
	return []Message{
		{Type: MsgPrepare, From: "n1", To: "n2", Slot: 3, Ballot: Ballot{2, "n1"}, Base: base},
		{Type: MsgPromise, From: "n2", To: "n1", Slot: 3, Ballot: Ballot{2, "n1"}, Value: value, Accepted: Ballot{0, "n3"}},
		{Type: MsgPropose, From: "n1", To: "n2", Slot: 3, Ballot: Ballot{0, "n1"}, Base: base, Value: value},
		{Type: MsgAck, From: "n2", To: "n1", Slot: 3, Ballot: Ballot{0, "n1"}},
		{Type: MsgNack, From: "n2", To: "n1", Slot: 3, Ballot: Ballot{1, "n1"}, Promised: Ballot{5, "n3"}},
		{Type: MsgCommit, From: "n1", To: "n2", Value: value},
		{Type: MsgRequest, From: "n3", To: "n1", Slot: 3, Reason: "all-reduce timed out"},
		{Type: MsgState, From: "n3", Slot: 0},
	}
}

func sameMessage(a, b Message) bool {
	return a.Type == b.Type && a.From == b.From && a.To == b.To && a.Slot == b.Slot && a.Ballot == b.Ballot &&
		sameWorld(a.Base, b.Base) && sameWorld(a.Value, b.Value) && a.Accepted == b.Accepted && a.Promised == b.Promised && a.Reason == b.Reason
}

func sameWorld(a, b World) bool {
	return a.Gen == b.Gen && a.Proposer == b.Proposer && a.Reason == b.Reason &&
		slices.EqualFunc(a.Members, b.Members, func(x, y Member) bool { return x.Equal(y) })
}

// Every message survives seal and open, with and without a key.
func TestWireRoundTrip(t *testing.T) {
	for _, key := range [][]byte{nil, macKey(make([]byte, 32))} {
		for _, m := range wireCases() {
			env, err := seal(key, ProtocolVersion, "127.0.0.1:7000", m)
			if err != nil {
				t.Fatal(err)
			}
			b, err := proto.Marshal(env)
			if err != nil {
				t.Fatal(err)
			}
			var back elasticpb.Envelope
			if err := proto.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			got, err := open(key, ProtocolVersion, &back)
			if err != nil {
				t.Fatalf("%s: %v", m.Type, err)
			}
			if !sameMessage(got, m) {
				t.Fatalf("round trip of %s:\n got %+v\nwant %+v", m.Type, got, m)
			}
		}
	}
}

// open refuses what it must, naming the reason.
func TestWireRefuses(t *testing.T) {
	key, other := macKey([]byte("0123456789abcdef")), macKey([]byte("fedcba9876543210"))
	m := wireCases()[2]
	env, _ := seal(key, ProtocolVersion, "a:1", m)
	for name, tc := range map[string]struct {
		key []byte
		env *elasticpb.Envelope
	}{
		"wrong key":       {other, env},
		"no key here":     {nil, env},
		"unsigned":        {key, &elasticpb.Envelope{Protocol: ProtocolVersion, SenderAddr: "a:1", Body: env.Body}},
		"other protocol":  {key, func() *elasticpb.Envelope { e, _ := seal(key, ProtocolVersion+1, "a:1", m); return e }()},
		"tampered body":   {key, &elasticpb.Envelope{Protocol: ProtocolVersion, SenderAddr: "a:1", Body: append(slices.Clone(env.Body), 0), Mac: env.Mac}},
		"tampered sender": {key, &elasticpb.Envelope{Protocol: ProtocolVersion, SenderAddr: "b:1", Body: env.Body, Mac: env.Mac}},
		"garbage body":    {nil, &elasticpb.Envelope{Protocol: ProtocolVersion, Body: []byte{0xff, 0xff, 0xff}}},
		"unknown type": {nil, func() *elasticpb.Envelope {
			e, _ := seal(nil, ProtocolVersion, "", Message{Type: 99, From: "x"})
			return e
		}()},
		"no sender": {nil, func() *elasticpb.Envelope { e, _ := seal(nil, ProtocolVersion, "", Message{Type: MsgAck}); return e }()},
		"members unordered": {nil, func() *elasticpb.Envelope {
			e, _ := seal(nil, ProtocolVersion, "", Message{Type: MsgCommit, From: "x", Value: testWorld(2, "n2", "n1")})
			return e
		}()},
	} {
		if _, err := open(tc.key, ProtocolVersion, tc.env); !errors.Is(err, ErrWire) {
			t.Errorf("%s: got %v, want ErrWire", name, err)
		}
	}
}

// FuzzOpen feeds arbitrary bytes to the envelope decoder, as a peer (or
// anyone who reaches the actor port) could: it must never panic, and what
// it accepts must encode back to the same message.
func FuzzOpen(f *testing.F) {
	for _, m := range wireCases() {
		env, _ := seal(nil, ProtocolVersion, "127.0.0.1:1", m)
		b, _ := proto.Marshal(env)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x08, 0x01, 0x1a, 0x02, 0x08, 0x09})
	f.Fuzz(func(t *testing.T, b []byte) {
		var env elasticpb.Envelope
		if proto.Unmarshal(b, &env) != nil {
			return
		}
		m, err := open(nil, ProtocolVersion, &env)
		if err != nil {
			return
		}
		env2, err := seal(nil, ProtocolVersion, env.SenderAddr, m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := open(nil, ProtocolVersion, env2)
		if err != nil || !sameMessage(m, m2) {
			t.Fatalf("re-encoded %+v decodes to %+v, %v", m, m2, err)
		}
	})
}

package actors

import (
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-ml/troupe/actors/actorspb"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/kernels"
)

func TestWireRoundTrip(t *testing.T) {
	m := collective.Message{Type: collective.MsgData, Group: 3, From: 1, To: 2, Gen: 4, Op: 5, Seq: 6,
		Kind: collective.KindAllReduce, Len: 7, Root: 0, Wire: kernels.BF16, Payload: []float32{1.5, -2, 3e-7}, Culprit: -1}
	b, err := proto.Marshal(toWire(m, true))
	if err != nil {
		t.Fatal(err)
	}
	var pb actorspb.CollectiveMsg
	if err := proto.Unmarshal(b, &pb); err != nil {
		t.Fatal(err)
	}
	got, err := fromWire(&pb, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Payload, m.Payload) {
		t.Fatalf("payload %v, want %v", got.Payload, m.Payload)
	}
	got.Payload, m.Payload = nil, nil
	if got.String() != m.String() || got.Culprit != -1 || got.Kind != m.Kind || got.Len != m.Len || got.Wire != m.Wire {
		t.Fatalf("%v, want %v", got, m)
	}
	abort := collective.Message{Type: collective.MsgAbort, From: 0, To: 1, Code: 2, Culprit: 2, Reason: "rank 2 lost"}
	got, err = fromWire(toWire(abort, true), 3)
	if err != nil || got.Reason != abort.Reason || got.Culprit != 2 || got.Code != 2 {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []*actorspb.CollectiveMsg{
		{Type: 0},
		{Type: 99},
		{Type: 1, From: 3},
		{Type: 1, Payload: []byte{1, 2, 3}},
		{Type: 2, Payload: []byte{1, 2, 3, 4}},
		{Type: 1, Kind: 300},
		{Type: 1, Wire: 3},
	} {
		if _, err := fromWire(bad, 3); !errors.Is(err, ErrWire) {
			t.Fatalf("%v: %v", bad, err)
		}
	}
}

// FuzzFromWire: bytes off the wire, unmarshalled and checked, never crash
// the receiver, and what passes is safe to hand to the engine.
func FuzzFromWire(f *testing.F) {
	for _, m := range []collective.Message{
		{Type: collective.MsgData, From: 1, To: 0, Kind: collective.KindAllReduce, Len: 2, Payload: []float32{1, 2}},
		{Type: collective.MsgDone, From: 2, To: 1, Seq: 3},
		{Type: collective.MsgAbort, From: 0, To: 2, Code: 1, Culprit: -1, Reason: "timeout"},
	} {
		b, _ := proto.Marshal(toWire(m, true))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var pb actorspb.CollectiveMsg
		if proto.Unmarshal(in, &pb) != nil {
			return
		}
		m, err := fromWire(&pb, 4)
		if err != nil {
			return
		}
		if m.From < 0 || m.From >= 4 || m.To < 0 || m.To >= 4 || !m.Type.Valid() || 4*len(m.Payload) != len(pb.Payload) {
			t.Fatalf("accepted %+v", m)
		}
		e, err := collective.NewEngine(collective.DefaultConfig(), 0, 4, nopOutbox{})
		if err != nil {
			t.Fatal(err)
		}
		e.Deliver(timeZero, m)
	})
}

var timeZero = time.Unix(0, 0)

type nopOutbox struct{}

func (nopOutbox) Send(collective.Message) {}
func (nopOutbox) Cancel(uint32, uint64)   {}
func (nopOutbox) SharedPayloads() bool    { return false }

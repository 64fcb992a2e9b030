package elastic

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-ml/troupe/elastic/elasticpb"
)

// maxWorldMembers bounds the members of a world on the wire.
const maxWorldMembers = 4096

// seal wraps m in an authenticated envelope. senderAddr is where answers go.
func seal(key []byte, protocol uint32, senderAddr string, m Message) (*elasticpb.Envelope, error) {
	body, err := proto.Marshal(toPB(m))
	if err != nil {
		return nil, err
	}
	env := &elasticpb.Envelope{Protocol: protocol, SenderAddr: senderAddr, Body: body}
	env.Mac = mac(key, env)
	return env, nil
}

// mac authenticates an envelope's protocol, sender address and body; nil
// without a key.
func mac(key []byte, env *elasticpb.Envelope) []byte {
	if key == nil {
		return nil
	}
	h := hmac.New(sha256.New, key)
	var n [12]byte
	binary.LittleEndian.PutUint32(n[:4], env.Protocol)
	binary.LittleEndian.PutUint64(n[4:], uint64(len(env.SenderAddr)))
	h.Write(n[:])
	h.Write([]byte(env.SenderAddr))
	h.Write(env.Body)
	return h.Sum(nil)
}

// open checks an envelope from the network and decodes its message.
func open(key []byte, protocol uint32, env *elasticpb.Envelope) (Message, error) {
	if env.Protocol != protocol {
		return Message{}, fmt.Errorf("%w: protocol %d, this node speaks %d", ErrWire, env.Protocol, protocol)
	}
	if key != nil && !hmac.Equal(env.Mac, mac(key, env)) {
		return Message{}, fmt.Errorf("%w: authentication failed (another cluster key?)", ErrWire)
	}
	if key == nil && len(env.Mac) != 0 {
		return Message{}, fmt.Errorf("%w: authenticated by a cluster key this node does not have", ErrWire)
	}
	if len(env.SenderAddr) > maxAddrLen {
		return Message{}, fmt.Errorf("%w: sender address of %d bytes", ErrWire, len(env.SenderAddr))
	}
	var pb elasticpb.Rendezvous
	if err := proto.Unmarshal(env.Body, &pb); err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrWire, err)
	}
	return fromPB(&pb)
}

func toPB(m Message) *elasticpb.Rendezvous {
	return &elasticpb.Rendezvous{Type: uint32(m.Type), From: m.From, To: m.To, Slot: m.Slot,
		Ballot: ballotPB(m.Ballot), Base: worldPB(m.Base), Value: worldPB(m.Value),
		Accepted: ballotPB(m.Accepted), Promised: ballotPB(m.Promised), Reason: m.Reason}
}

func ballotPB(b Ballot) *elasticpb.Ballot {
	if b.IsZero() {
		return nil
	}
	return &elasticpb.Ballot{Round: b.Round, Id: b.ID}
}

func worldPB(w World) *elasticpb.World {
	if w.Gen == 0 && len(w.Members) == 0 {
		return nil
	}
	pb := &elasticpb.World{Gen: w.Gen, Proposer: w.Proposer, Reason: w.Reason, Members: make([]*elasticpb.Member, len(w.Members))}
	for i, m := range w.Members {
		pb.Members[i] = &elasticpb.Member{Id: m.ID, Name: m.Name, Start: m.Start, ActorAddr: m.ActorAddr,
			DataAddr: m.DataAddr, Devices: m.Devices, Protocol: m.Protocol}
	}
	return pb
}

// fromPB checks a decoded message: a known type, bounded strings, valid
// worlds. The core checks the rest (slots, ballots, who may propose).
func fromPB(pb *elasticpb.Rendezvous) (Message, error) {
	t := MsgType(pb.Type)
	if t < MsgPrepare || t > MsgState {
		return Message{}, fmt.Errorf("%w: message type %d", ErrWire, pb.Type)
	}
	if pb.From == "" || len(pb.From) > maxWireString || len(pb.To) > maxWireString || len(pb.Reason) > 4*maxWireString {
		return Message{}, fmt.Errorf("%w: %s from %q to %q with a %d-byte reason", ErrWire, t, pb.From, pb.To, len(pb.Reason))
	}
	m := Message{Type: t, From: pb.From, To: pb.To, Slot: pb.Slot, Reason: pb.Reason}
	var err error
	if m.Ballot, err = ballotFromPB(pb.Ballot); err != nil {
		return Message{}, err
	}
	if m.Accepted, err = ballotFromPB(pb.Accepted); err != nil {
		return Message{}, err
	}
	if m.Promised, err = ballotFromPB(pb.Promised); err != nil {
		return Message{}, err
	}
	if m.Base, err = worldFromPB(pb.Base); err != nil {
		return Message{}, err
	}
	if m.Value, err = worldFromPB(pb.Value); err != nil {
		return Message{}, err
	}
	return m, nil
}

func ballotFromPB(pb *elasticpb.Ballot) (Ballot, error) {
	if pb == nil {
		return Ballot{}, nil
	}
	if pb.Id == "" || len(pb.Id) > maxWireString {
		return Ballot{}, fmt.Errorf("%w: ballot %d with proposer ID %q", ErrWire, pb.Round, pb.Id)
	}
	return Ballot{Round: pb.Round, ID: pb.Id}, nil
}

func worldFromPB(pb *elasticpb.World) (World, error) {
	if pb == nil {
		return World{}, nil
	}
	if len(pb.Members) > maxWorldMembers || len(pb.Proposer) > maxWireString || len(pb.Reason) > 4*maxWireString {
		return World{}, fmt.Errorf("%w: world of %d members (at most %d), proposer of %d bytes, reason of %d bytes",
			ErrWire, len(pb.Members), maxWorldMembers, len(pb.Proposer), len(pb.Reason))
	}
	w := World{Gen: pb.Gen, Proposer: pb.Proposer, Reason: pb.Reason}
	if len(pb.Members) > 0 {
		w.Members = make([]Member, len(pb.Members))
	}
	for i, m := range pb.Members {
		if m == nil {
			return World{}, fmt.Errorf("%w: world %d: member %d missing", ErrWire, pb.Gen, i)
		}
		w.Members[i] = Member{ID: m.Id, Name: m.Name, Start: m.Start, ActorAddr: m.ActorAddr, DataAddr: m.DataAddr,
			Devices: m.Devices, Protocol: m.Protocol}
		if err := checkMember(w.Members[i]); err != nil {
			return World{}, fmt.Errorf("%w: world %d: %v", ErrWire, pb.Gen, err)
		}
	}
	if err := validWorld(w); err != nil {
		return World{}, fmt.Errorf("%w: %v", ErrWire, err)
	}
	return w, nil
}

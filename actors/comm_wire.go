package actors

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/troupe-ml/troupe/actors/actorspb"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/kernels"
)

// commProtocol is the version of the Comm actors' wire protocol (actorspb
// messages and the data plane framing); peers with another version refuse
// to talk.
const commProtocol = 4 // 4: references to registered memory on the shared-memory data plane

// littleEndian: float32 payloads go on the wire little-endian, which on
// such hosts is their memory layout, so they are written and read in place.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// floatBytes views p as bytes (little-endian hosts only).
func floatBytes(p []float32) []byte {
	if len(p) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&p[0])), 4*len(p))
}

// encodeFloats returns a fresh little-endian copy of p.
func encodeFloats(p []float32) []byte {
	b := make([]byte, 4*len(p))
	if littleEndian {
		copy(b, floatBytes(p))
		return b
	}
	for i, v := range p {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// decodeFloats reads little-endian float32s, in place when it can (b is not
// used afterwards by its owner: a freshly unmarshalled protobuf field).
func decodeFloats(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	if littleEndian && uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
	}
	p := make([]float32, len(b)/4)
	for i := range p {
		p[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return p
}

// toWire encodes a collective message; the payload is copied when
// withPayload (the "actor" transport), so the operation's buffer is free
// again as soon as this returns.
func toWire(m collective.Message, withPayload bool) *actorspb.CollectiveMsg {
	pb := &actorspb.CollectiveMsg{
		Type: uint32(m.Type), Group: m.Group, From: uint32(m.From), To: uint32(m.To),
		Gen: m.Gen, Op: m.Op, Seq: m.Seq, Kind: uint32(m.Kind), Algo: uint32(m.Algo), Len: m.Len, Root: uint32(m.Root), Wire: uint32(m.Wire),
		Code: m.Code, Culprit: int32(m.Culprit), Reason: m.Reason,
	}
	if withPayload && m.Type == collective.MsgData {
		pb.Payload = encodeFloats(m.Payload)
	}
	return pb
}

// fromWire decodes and checks a collective message from a world of size
// ranks. The core checks the rest (generation, op, sequence, lengths).
func fromWire(pb *actorspb.CollectiveMsg, size int) (collective.Message, error) {
	t := collective.MsgType(pb.Type)
	switch {
	case pb.Type > math.MaxUint8 || !t.Valid():
		return collective.Message{}, fmt.Errorf("%w: message type %d", ErrWire, pb.Type)
	case int64(pb.From) >= int64(size) || int64(pb.To) >= int64(size):
		return collective.Message{}, fmt.Errorf("%w: ranks %d→%d in a world of %d", ErrWire, pb.From, pb.To, size)
	case len(pb.Payload)%4 != 0:
		return collective.Message{}, fmt.Errorf("%w: payload of %d bytes is not float32s", ErrWire, len(pb.Payload))
	case len(pb.Payload) > 0 && t != collective.MsgData:
		return collective.Message{}, fmt.Errorf("%w: %s message with a payload", ErrWire, t)
	case pb.Kind > math.MaxUint8 || int64(pb.Root) >= int64(size) || len(pb.Reason) > 4096:
		return collective.Message{}, fmt.Errorf("%w: kind %d, root %d, reason of %d bytes", ErrWire, pb.Kind, pb.Root, len(pb.Reason))
	case pb.Wire > math.MaxUint8 || (kernels.DType(pb.Wire) != kernels.F32 && !kernels.DType(pb.Wire).Low()):
		return collective.Message{}, fmt.Errorf("%w: wire type %d", ErrWire, pb.Wire)
	case pb.Algo > math.MaxUint8 || !collective.Algorithm(pb.Algo).Valid():
		return collective.Message{}, fmt.Errorf("%w: algorithm %d", ErrWire, pb.Algo)
	}
	return collective.Message{
		Type: t, Group: pb.Group, From: int(pb.From), To: int(pb.To),
		Gen: pb.Gen, Op: pb.Op, Seq: pb.Seq, Kind: collective.Kind(pb.Kind), Algo: collective.Algorithm(pb.Algo), Len: pb.Len, Root: int(pb.Root), Wire: kernels.DType(pb.Wire),
		Payload: decodeFloats(pb.Payload), Code: pb.Code, Culprit: int(pb.Culprit), Reason: pb.Reason,
	}, nil
}

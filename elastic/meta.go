package elastic

import (
	"fmt"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/proto"

	"github.com/troupe-ml/troupe/elastic/elasticpb"
)

// metaFormat is the first byte of a member's memberlist metadata: the
// layout of what follows (a protobuf elasticpb.Meta). A decoder refuses
// other formats before reading further.
const metaFormat = 1

// Limits on what a peer may advertise, so that metadata fits memberlist's
// 512 bytes and a hostile peer cannot make us hold much.
const (
	maxNameLen    = 64
	maxAddrLen    = 128
	maxDevices    = 64
	maxDeviceLen  = 64
	maxWireString = 256
)

// encodeMeta is m's memberlist metadata; leaving announces a graceful
// leave.
func encodeMeta(m Member, leaving bool) ([]byte, error) {
	b, err := proto.Marshal(&elasticpb.Meta{Protocol: m.Protocol, Name: m.Name, Start: m.Start,
		ActorAddr: m.ActorAddr, DataAddr: m.DataAddr, Devices: m.Devices, Leaving: leaving})
	if err != nil {
		return nil, err
	}
	b = append([]byte{metaFormat}, b...)
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: metadata of %s is %d bytes, memberlist allows %d (shorten the name, addresses or device list)",
			ErrBadConfig, m.ID, len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

// decodeMeta reads the metadata of the memberlist member id and checks
// that it speaks protocol; leaving reports a graceful leave. The bytes
// come from the network.
func decodeMeta(id string, b []byte, protocol uint32) (m Member, leaving bool, err error) {
	if len(b) == 0 {
		return Member{}, false, fmt.Errorf("%w: %s has no metadata (not a troupe node?)", ErrBadMeta, id)
	}
	if b[0] != metaFormat {
		return Member{}, false, fmt.Errorf("%w: %s has metadata format %d, this node reads %d", ErrBadMeta, id, b[0], metaFormat)
	}
	var pb elasticpb.Meta
	if err := proto.Unmarshal(b[1:], &pb); err != nil {
		return Member{}, false, fmt.Errorf("%w: %s: %v", ErrBadMeta, id, err)
	}
	if pb.Protocol != protocol {
		return Member{}, false, fmt.Errorf("%w: %s speaks troupe protocol %d, this node %d", ErrBadMeta, id, pb.Protocol, protocol)
	}
	m = Member{ID: id, Name: pb.Name, Start: pb.Start, ActorAddr: pb.ActorAddr, DataAddr: pb.DataAddr,
		Devices: pb.Devices, Protocol: pb.Protocol}
	if err := checkMember(m); err != nil {
		return Member{}, false, fmt.Errorf("%w: %v", ErrBadMeta, err)
	}
	return m, pb.Leaving, nil
}

// checkMember bounds what a member may claim.
func checkMember(m Member) error {
	switch {
	case m.ID == "" || len(m.ID) > maxWireString:
		return fmt.Errorf("member ID %q: want 1..%d bytes", m.ID, maxWireString)
	case m.Name == "" || len(m.Name) > maxNameLen:
		return fmt.Errorf("member %s: name %q: want 1..%d bytes", m.ID, m.Name, maxNameLen)
	case m.ActorAddr == "" || len(m.ActorAddr) > maxAddrLen || len(m.DataAddr) > maxAddrLen:
		return fmt.Errorf("member %s: actor address %q, data address %q: want 1..%d and 0..%d bytes", m.ID, m.ActorAddr, m.DataAddr, maxAddrLen, maxAddrLen)
	case len(m.Devices) > maxDevices:
		return fmt.Errorf("member %s: %d devices, at most %d", m.ID, len(m.Devices), maxDevices)
	}
	for _, d := range m.Devices {
		if d == "" || len(d) > maxDeviceLen {
			return fmt.Errorf("member %s: device %q: want 1..%d bytes", m.ID, d, maxDeviceLen)
		}
	}
	return nil
}

// leaveNoticePrefix starts a leave notice: the memberlist user message a
// leaving node sends each member directly, over memberlist's TCP stream
// (encrypted with the cluster key), before memberlist's own leave
// broadcast. The "leaving" metadata travels by gossip and can arrive after
// that broadcast on a loaded machine; the notice makes the others record a
// leave, not a failure, either way.
const leaveNoticePrefix = "troupe-leave/1:"

func encodeLeaveNotice(id string) []byte { return []byte(leaveNoticePrefix + id) }

// decodeLeaveNotice returns the member ID a leave notice names. The bytes
// come from the network.
func decodeLeaveNotice(b []byte) (string, error) {
	s := string(b)
	if len(s) < len(leaveNoticePrefix) || s[:len(leaveNoticePrefix)] != leaveNoticePrefix {
		return "", fmt.Errorf("%w: a memberlist message that is not a troupe leave notice (%d bytes)", ErrBadMeta, len(b))
	}
	id := s[len(leaveNoticePrefix):]
	if id == "" || len(id) > maxWireString {
		return "", fmt.Errorf("%w: a leave notice naming a member ID of %d bytes, want 1..%d", ErrBadMeta, len(id), maxWireString)
	}
	return id, nil
}

package elastic

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

func TestMetaRoundTrip(t *testing.T) {
	m := Member{ID: "n1-abc-0001", Name: "n1", Start: 1700000000123456789, ActorAddr: "10.0.0.1:8090",
		DataAddr: "10.0.0.1:8091", Devices: []string{"cuda:0", "cuda:1"}, Protocol: ProtocolVersion}
	for _, leaving := range []bool{false, true} {
		b, err := encodeMeta(m, leaving)
		if err != nil {
			t.Fatal(err)
		}
		got, gotLeaving, err := decodeMeta(m.ID, b, ProtocolVersion)
		if err != nil || !got.Equal(m) || gotLeaving != leaving {
			t.Fatalf("got %+v leaving %v, %v; want %+v leaving %v", got, gotLeaving, err, m, leaving)
		}
		t.Logf("metadata: %d bytes", len(b))
	}
}

// The largest member Config allows fits memberlist's 512 bytes, and one
// that does not fit is refused at Start with the sizes.
func TestMetaSize(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	m := Member{ID: "id", Name: long(maxNameLen), Start: -1, ActorAddr: long(maxAddrLen), DataAddr: long(maxAddrLen),
		Devices: []string{"cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:4", "cuda:5", "cuda:6", "cuda:7"}, Protocol: ProtocolVersion}
	if b, err := encodeMeta(m, true); err != nil || len(b) > memberlist.MetaMaxSize {
		t.Fatalf("%d bytes, %v", len(b), err)
	}
	m.Devices = make([]string, maxDevices)
	for i := range m.Devices {
		m.Devices[i] = long(maxDeviceLen)
	}
	if _, err := encodeMeta(m, false); !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "512") {
		t.Fatalf("got %v, want ErrBadConfig naming the limit", err)
	}
}

func TestMetaRefuses(t *testing.T) {
	good, _ := encodeMeta(Member{ID: "a", Name: "a", ActorAddr: "h:1", Protocol: ProtocolVersion}, false)
	old, _ := encodeMeta(Member{ID: "a", Name: "a", ActorAddr: "h:1", Protocol: ProtocolVersion - 1}, false)
	noName, _ := encodeMeta(Member{ID: "a", ActorAddr: "h:1", Protocol: ProtocolVersion}, false)
	for name, tc := range map[string]struct {
		b    []byte
		want string
	}{
		"empty":        {nil, "no metadata"},
		"other format": {append([]byte{2}, good[1:]...), "format 2"},
		"old protocol": {old, fmt.Sprintf("protocol %d,", ProtocolVersion-1)},
		"garbage":      {[]byte{metaFormat, 0xff, 0xff}, "a"},
		"no name":      {noName, "name"},
	} {
		if _, _, err := decodeMeta("a", tc.b, ProtocolVersion); !errors.Is(err, ErrBadMeta) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want ErrBadMeta mentioning %q", name, err, tc.want)
		}
	}
}

// FuzzDecodeMeta: memberlist metadata comes from any node that gossips;
// the decoder must never panic, and what it accepts re-encodes the same.
func FuzzDecodeMeta(f *testing.F) {
	b, _ := encodeMeta(Member{ID: "n1", Name: "n1", Start: 5, ActorAddr: "h:1", DataAddr: "h:2", Devices: []string{"cpu:0"}, Protocol: ProtocolVersion}, true)
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{metaFormat})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, leaving, err := decodeMeta("n1", b, ProtocolVersion)
		if err != nil {
			return
		}
		b2, err := encodeMeta(m, leaving)
		if err != nil {
			if len(b) > memberlist.MetaMaxSize {
				return // memberlist never delivers more than its limit
			}
			t.Fatal(err)
		}
		m2, leaving2, err := decodeMeta("n1", b2, ProtocolVersion)
		if err != nil || !m2.Equal(m) || leaving2 != leaving {
			t.Fatalf("%+v re-encodes to %+v, %v", m, m2, err)
		}
	})
}

func TestLeaveNotice(t *testing.T) {
	id, err := decodeLeaveNotice(encodeLeaveNotice("n1-abc-1234"))
	if err != nil || id != "n1-abc-1234" {
		t.Fatalf("round trip: %q, %v", id, err)
	}
	for name, b := range map[string][]byte{
		"empty":        nil,
		"other prefix": []byte("troupe-join/1:n1"),
		"no ID":        []byte(leaveNoticePrefix),
		"ID too long":  []byte(leaveNoticePrefix + strings.Repeat("x", maxWireString+1)),
	} {
		if _, err := decodeLeaveNotice(b); !errors.Is(err, ErrBadMeta) {
			t.Errorf("%s: %v, want ErrBadMeta", name, err)
		}
	}
}

// FuzzDecodeLeaveNotice: memberlist user messages come from any node
// holding the cluster key; the decoder never panics and what it accepts
// re-encodes the same.
func FuzzDecodeLeaveNotice(f *testing.F) {
	f.Add(encodeLeaveNotice("n1"))
	f.Add([]byte{})
	f.Add([]byte(leaveNoticePrefix))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := decodeLeaveNotice(b)
		if err != nil {
			return
		}
		if got := encodeLeaveNotice(id); string(got) != string(b) {
			t.Fatalf("%q decodes to %q, which encodes to %q", b, id, got)
		}
	})
}

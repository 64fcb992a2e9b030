//go:build linux

package actors

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"unsafe"

	"github.com/troupe-ml/troupe/collective"
)

// readConn is a connection that reads r.
type readConn struct {
	net.Conn
	r io.Reader
}

func (c readConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// refPool is a receiver's pool with one segment of 4 KiB (id 7) mapped.
func refPool(t testing.TB) (*slotPool, *shmRegion) {
	t.Helper()
	if !shmSupported {
		t.Skip("no shared memory on this system")
	}
	r, fd, err := shmCreate(4096)
	if err != nil {
		t.Fatal(err)
	}
	shmClose(fd)
	p := &slotPool{segs: map[uint32]*shmRegion{7: r}}
	t.Cleanup(p.end)
	return p, r
}

func refBytes(seg uint32, off uint64) []byte {
	b := binary.LittleEndian.AppendUint32(nil, seg)
	return binary.LittleEndian.AppendUint64(b, off)
}

// TestSharedRefChecked: a reference to the sender's registered memory is
// read only where the receiver mapped it: an unknown segment, an
// unaligned offset or a range past the segment's end is an error naming
// it; a good one is the values where they lie, held until released.
func TestSharedRefChecked(t *testing.T) {
	p, region := refPool(t)
	for _, c := range []struct {
		seg   uint32
		off   uint64
		count uint32
		want  string
	}{
		{8, 0, 1, "segment 8, which it never handed over"},
		{7, 3, 1, "at byte 3 of segment 7"},
		{7, 4092, 2, "2 values at byte 4092 of segment 7, which holds 4096 bytes"},
		{7, 1 << 62, 1, "at byte 4611686018427387904"},
	} {
		h := frameHeader{typ: collective.MsgData, count: c.count, slot: dpSlotRef}
		var m collective.Message
		_, err := p.shared(readConn{r: bytes.NewReader(refBytes(c.seg, c.off))}, &h, &m)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("segment %d offset %d count %d: %v, want an error saying %q", c.seg, c.off, c.count, err, c.want)
		}
	}
	h := frameHeader{typ: collective.MsgData, count: 24, slot: dpSlotRef}
	var m collective.Message
	deliver, err := p.shared(readConn{r: bytes.NewReader(refBytes(7, 4000))}, &h, &m)
	if err != nil || !deliver {
		t.Fatalf("a good reference: %v, deliver %v", err, deliver)
	}
	region.floats(4000, 24)[5] = 2.5
	if len(m.Payload) != 24 || m.Payload[5] != 2.5 || p.held != 1 {
		t.Fatalf("payload of %d values, [5] = %v, %d held", len(m.Payload), m.Payload[5], p.held)
	}
	m.Release()
	if p.held != 0 {
		t.Fatalf("%d held after the release", p.held)
	}
	// a hand-over must carry no values, a size, and come on a Unix socket
	for _, h := range []frameHeader{
		{typ: collective.MsgData, count: 1, len: 4096, slot: dpSlotSegment},
		{typ: collective.MsgData, len: 0, slot: dpSlotSegment},
		{typ: collective.MsgData, len: 1 << 41, slot: dpSlotSegment},
		{typ: collective.MsgData, len: 4096, slot: dpSlotSegment},
	} {
		if _, err := p.shared(readConn{r: bytes.NewReader(nil)}, &h, &m); err == nil {
			t.Fatalf("hand-over %+v accepted", h)
		}
	}
}

// FuzzSharedRef: whatever a peer's reference frame says, the receiver
// either refuses it or hands out values inside the segment it mapped.
func FuzzSharedRef(f *testing.F) {
	f.Add(uint32(24), refBytes(7, 4000))
	f.Add(uint32(1), refBytes(8, 0))
	f.Add(uint32(1<<30), refBytes(7, 0))
	f.Add(uint32(0), []byte{7})
	f.Fuzz(func(t *testing.T, count uint32, ref []byte) {
		p, region := refPool(t)
		h := frameHeader{typ: collective.MsgData, count: count, slot: dpSlotRef}
		var m collective.Message
		deliver, err := p.shared(readConn{r: bytes.NewReader(ref)}, &h, &m)
		if err != nil {
			return
		}
		if !deliver || len(m.Payload) != int(count) {
			t.Fatalf("deliver %v, %d values for a count of %d", deliver, len(m.Payload), count)
		}
		if count > 0 {
			lo := uintptr(unsafe.Pointer(&region.mem[0]))
			at := uintptr(unsafe.Pointer(&m.Payload[0]))
			if at < lo || at+4*uintptr(count) > lo+uintptr(len(region.mem)) {
				t.Fatalf("%d values at %#x, outside the segment [%#x, %#x)", count, at, lo, lo+uintptr(len(region.mem)))
			}
		}
		m.Release()
	})
}

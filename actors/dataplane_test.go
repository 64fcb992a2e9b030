package actors

import (
	"bytes"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/internal/wait"
	"github.com/troupe-ml/troupe/kernels"
)

// planePair is a sender (rank 0) and a receiver (rank 1) data plane.
type planePair struct {
	tx, rx *DataPlane
	got    chan collective.Message
	lostMu sync.Mutex
	lost   []error
}

func newPlanePair(t *testing.T, txCfg, rxCfg DataPlaneConfig, txWorld, rxWorld string) *planePair {
	t.Helper()
	p := &planePair{got: make(chan collective.Message, 1024)}
	onLost := func(_ int, err error) {
		p.lostMu.Lock()
		p.lost = append(p.lost, err)
		p.lostMu.Unlock()
	}
	var err error
	p.rx, err = ListenDataPlane("127.0.0.1:0", rxWorld, 1, 2, rxCfg, func(m collective.Message) { p.got <- m }, onLost)
	if err != nil {
		t.Fatal(err)
	}
	p.tx, err = ListenDataPlane("127.0.0.1:0", txWorld, 0, 2, txCfg, func(collective.Message) {}, onLost)
	if err != nil {
		t.Fatal(err)
	}
	if rxCfg.SharedMemory {
		p.tx.SetPeer(1, p.rx.ShmAddr())
	} else {
		p.tx.SetPeer(1, p.rx.Addr())
	}
	t.Cleanup(func() { p.tx.Close(); p.rx.Close() })
	return p
}

func (p *planePair) lostErrs() []error {
	p.lostMu.Lock()
	defer p.lostMu.Unlock()
	return slices.Clone(p.lost)
}

func (p *planePair) recv(t *testing.T) collective.Message {
	t.Helper()
	select {
	case m := <-p.got:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no frame arrived")
	}
	return collective.Message{}
}

// planeName names a data plane variant in subtests.
func planeName(shm bool) string {
	if shm {
		return "shm"
	}
	return "tcp"
}

func dataMsg(seq uint32, payload []float32) collective.Message {
	return collective.Message{Type: collective.MsgData, Group: 7, From: 0, To: 1, Gen: 3, Op: 5, Seq: seq,
		Kind: collective.KindAllReduce, Len: 99, Root: 0, Payload: payload}
}

// TestDataPlaneFramesAndCredit: frames arrive whole and in order, into the
// receiver's pool; no more than Window data frames are outstanding until
// the receiver releases buffers; a done frame needs no credit.
func TestDataPlaneFramesAndCredit(t *testing.T) {
	for _, shm := range []bool{false, true} {
		t.Run(planeName(shm), func(t *testing.T) {
			cfg := DefaultDataPlaneConfig()
			cfg.SharedMemory = shm
			cfg.Window = 2
			cfg.MaxFrameBytes = 4 * 1000
			p := newPlanePair(t, cfg, cfg, "w", "w")
			var sent [][]float32
			for i := 0; i < 5; i++ {
				v := make([]float32, 1000-i*100)
				for j := range v {
					v[j] = float32(i*1000 + j)
				}
				sent = append(sent, v)
				p.tx.Send(dataMsg(uint32(i), v))
			}
			p.tx.Send(collective.Message{Type: collective.MsgDone, Group: 7, From: 0, To: 1, Gen: 3, Op: 5, Seq: 2, Kind: collective.KindAllReduce, Len: 99})
			var held []collective.Message
			for i := 0; i < 2; i++ {
				m := p.recv(t)
				if m.Seq != uint32(i) || !slices.Equal(m.Payload, sent[i]) || m.Gen != 3 || m.Op != 5 || m.Group != 7 || m.Len != 99 {
					t.Fatalf("frame %d: %v", i, m)
				}
				held = append(held, m)
			}
			select {
			case m := <-p.got:
				t.Fatalf("frame %v arrived beyond the window of 2", m)
			case <-time.After(50 * time.Millisecond):
			}
			for _, m := range held {
				m.Release()
			}
			for i := 2; i < 5; i++ {
				m := p.recv(t)
				if m.Seq != uint32(i) || !slices.Equal(m.Payload, sent[i]) {
					t.Fatalf("frame %d: %v", i, m)
				}
				m.Release()
			}
			if m := p.recv(t); m.Type != collective.MsgDone || m.Seq != 2 || len(m.Payload) != 0 {
				t.Fatalf("done frame: %v", m)
			}
			if errs := p.lostErrs(); len(errs) != 0 {
				t.Fatal(errs)
			}
		})
	}
}

// TestDataPlaneCancel: Cancel drops the queued frames of the aborted
// generation and returns; later generations still go through.
func TestDataPlaneCancel(t *testing.T) {
	for _, shm := range []bool{false, true} {
		t.Run(planeName(shm), func(t *testing.T) {
			cfg := DefaultDataPlaneConfig()
			cfg.SharedMemory = shm
			cfg.Window = 1
			p := newPlanePair(t, cfg, cfg, "w", "w")
			for i := 0; i < 4; i++ {
				p.tx.Send(dataMsg(uint32(i), []float32{float32(i)}))
			}
			first := p.recv(t) // holds the only credit
			p.tx.Cancel(7, 3)
			next := dataMsg(0, []float32{42})
			next.Gen = 4
			p.tx.Send(next)
			first.Release()
			if m := p.recv(t); m.Gen != 4 || m.Payload[0] != 42 {
				t.Fatalf("after cancel: %v", m)
			}
		})
	}
}

func TestDataPlaneRefusesStrangers(t *testing.T) {
	good := DefaultDataPlaneConfig()
	good.Key = []byte("secret")
	bad := good
	bad.Key = []byte("guess")
	for name, c := range map[string]struct {
		tx            DataPlaneConfig
		txW, rxW, err string
	}{
		"key":   {tx: bad, txW: "w", rxW: "w", err: "key"},
		"world": {tx: good, txW: "x", rxW: "w", err: "world"},
	} {
		for _, shm := range []bool{false, true} {
			t.Run(name+"/"+planeName(shm), func(t *testing.T) {
				tx, rx := c.tx, good
				tx.SharedMemory, rx.SharedMemory = shm, shm
				p := newPlanePair(t, tx, rx, c.txW, c.rxW)
				p.tx.Send(dataMsg(0, []float32{1}))
				wait.Until(10*time.Second, func() bool { return len(p.lostErrs()) > 0 })
				errs := p.lostErrs()
				if len(errs) == 0 || !errors.Is(errs[0], ErrDataPlane) || !bytes.Contains([]byte(errs[0].Error()), []byte(c.err)) {
					t.Fatalf("%v, want a refusal about the %s", errs, c.err)
				}
				select {
				case m := <-p.got:
					t.Fatalf("a stranger's frame arrived: %v", m)
				default:
				}
			})
		}
	}
}

// TestDataPlanePeerDies: the receiver's process going away breaks the
// sender's connection, and the sender reports the rank.
func TestDataPlanePeerDies(t *testing.T) {
	for _, shm := range []bool{false, true} {
		t.Run(planeName(shm), func(t *testing.T) {
			cfg := DefaultDataPlaneConfig()
			cfg.SharedMemory = shm
			p := newPlanePair(t, cfg, cfg, "w", "w")
			p.tx.Send(dataMsg(0, []float32{1}))
			p.recv(t).Release()
			p.rx.Close()
			wait.Until(10*time.Second, func() bool {
				if len(p.lostErrs()) > 0 {
					return true
				}
				p.tx.Send(dataMsg(1, []float32{1}))
				return false
			})
			if errs := p.lostErrs(); len(errs) == 0 || !errors.Is(errs[0], ErrDataPlane) {
				t.Fatalf("%v, want a broken connection", errs)
			}
		})
	}
}

func TestFrameHeaderRoundTrip(t *testing.T) {
	h := frameHeader{typ: collective.MsgData, kind: collective.KindBroadcast, algo: collective.AlgoRing, group: 1, from: 2, to: 3, gen: 4, op: 5, seq: 6, root: 7, len: 8, count: 9, wire: kernels.F16, slot: 5}
	var b [dpHeaderLen]byte
	h.put(b[:])
	got, err := parseFrameHeader(b[:], 9)
	if err != nil || got != h {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := parseFrameHeader(b[:], 8); !errors.Is(err, ErrDataPlane) {
		t.Fatalf("oversized frame: %v", err)
	}
	b[2] = 3
	if _, err := parseFrameHeader(b[:], 9); !errors.Is(err, ErrDataPlane) {
		t.Fatalf("wire type 3: %v", err)
	}
	b[2] = 0
	b[0] = byte(collective.MsgAbort)
	if _, err := parseFrameHeader(b[:], 9); !errors.Is(err, ErrDataPlane) {
		t.Fatalf("abort frame: %v", err)
	}
}

// FuzzParseFrameHeader: no header a peer can send crashes the reader, and
// an accepted one round-trips.
func FuzzParseFrameHeader(f *testing.F) {
	var b [dpHeaderLen]byte
	(&frameHeader{typ: collective.MsgData, kind: 1, count: 3}).put(b[:])
	f.Add(b[:])
	(&frameHeader{typ: collective.MsgDone, kind: 2, seq: 4}).put(b[:])
	f.Add(b[:])
	f.Add(make([]byte, dpHeaderLen))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := parseFrameHeader(in, 1<<18)
		if err != nil {
			return
		}
		var out [dpHeaderLen]byte
		h.put(out[:])
		if !bytes.Equal(out[:], in) {
			t.Fatalf("accepted %x, re-encodes as %x", in, out)
		}
	})
}

// FuzzReadHello: the listener's decoder of a dialer's hello.
func FuzzReadHello(f *testing.F) {
	f.Add(appendHello(nil, dpHello{world: "troupe", from: 1, to: 0, mac: make([]byte, dpMacLen)}))
	f.Add([]byte("TRDP\x01\x00\xff\x00"))
	f.Add([]byte("nope"))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := readHello(bytes.NewReader(in))
		if err != nil {
			return
		}
		if len(h.world) > dpMaxWorld || len(h.mac) != dpMacLen {
			t.Fatalf("accepted %+v", h)
		}
		if !bytes.HasPrefix(in, appendHello(nil, h)) {
			t.Fatalf("accepted %x, re-encodes differently", in)
		}
	})
}

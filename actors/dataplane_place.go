package actors

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/kernels"
)

// Reading in place: the Comm actor places each running operation whose
// data a rank only copies (collective.Landing: all-gather chunks,
// broadcast pieces), and a TCP connection's reader then reads such a
// frame's payload straight into the operation's buffer instead of into a
// receive buffer that the Core copies from: one copy of every gathered
// byte less. A frame that arrives before its operation started, a second
// frame for the same place, a packed 16-bit payload or a shared-memory
// frame (already read in place, from the sender's slot) take the usual
// way.

// placeWait bounds Unplace's wait for a read in progress into the
// buffer; past it the connection is closed (its peer stalled mid-frame),
// which ends the read.
const placeWait = 2 * time.Second

type placeKey struct {
	group   uint32
	gen, op uint64
}

// placement is one placed operation.
type placement struct {
	l      collective.Landing
	landed map[uint32]bool // seqs read in place
	// busy counts reads in progress into the buffer; idle is closed when
	// it drops to 0; conn is the connection of the last one.
	busy int
	idle chan struct{}
	conn net.Conn
	dead bool
}

// places is the data plane's table of placed operations.
type places struct {
	mu sync.Mutex
	m  map[placeKey]*placement
	n  atomic.Int64 // frames read in place
}

// Place is the Comm actor's collective.Placer.
func (p *places) Place(group uint32, id collective.OpID, l collective.Landing) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[placeKey]*placement{}
	}
	p.m[placeKey{group, id.Gen, id.Op}] = &placement{l: l, landed: map[uint32]bool{}}
}

// Unplace forgets an operation and returns once no read into its buffer
// is in progress.
func (p *places) Unplace(group uint32, id collective.OpID) {
	k := placeKey{group, id.Gen, id.Op}
	p.mu.Lock()
	pl := p.m[k]
	if pl == nil {
		p.mu.Unlock()
		return
	}
	delete(p.m, k)
	pl.dead = true
	if pl.busy == 0 {
		p.mu.Unlock()
		return
	}
	idle, conn := pl.idle, pl.conn
	p.mu.Unlock()
	select {
	case <-idle:
	case <-time.After(placeWait):
		conn.Close()
		<-idle
	}
}

// land returns where the payload of a data frame h from c goes in place
// (nil: the usual way); done must follow the read.
func (p *places) land(h *frameHeader, c net.Conn) (dst []float32, pl *placement) {
	if h.typ != collective.MsgData || h.wire != kernels.F32 || !littleEndian || raceBuild {
		// Under the race detector: the write into the buffer is ordered
		// after this rank's last read of it (its own send of the chunk,
		// earlier in the ring) only through the peers and their sockets,
		// which the detector cannot see, as Send's copy notes.
		return nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	pl = p.m[placeKey{h.group, h.gen, h.op}]
	if pl == nil || pl.dead || pl.landed[h.seq] {
		return nil, nil
	}
	dst = pl.l.Land(h.seq)
	if dst == nil || len(dst) != int(h.count) {
		return nil, nil
	}
	pl.landed[h.seq] = true
	if pl.busy == 0 {
		pl.idle = make(chan struct{})
	}
	pl.busy++
	pl.conn = c
	return dst, pl
}

// done ends a read in place.
func (p *places) done(pl *placement) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pl.busy--; pl.busy == 0 {
		close(pl.idle)
	}
	p.n.Add(1)
	framesInPlace.Add(1)
}

// framesInPlace counts the frames every data plane of this process read in
// place (tests).
var framesInPlace atomic.Int64

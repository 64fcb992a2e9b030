package actors

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/internal/pki"
	"github.com/troupe-ml/troupe/internal/shmem"
	"github.com/troupe-ml/troupe/kernels"
)

// DataPlaneConfig tunes the framed TCP stream that carries chunk bytes
// between Comm actors in different processes.
type DataPlaneConfig struct {
	// Window is the number of data frames a sender may have in flight on one
	// connection. The receiver pre-allocates Window buffers of MaxFrameBytes
	// per inbound connection and returns a credit as each is consumed.
	// Default 8 (4 to 16 measured alike on loopback).
	Window int
	// MaxFrameBytes is the largest payload of one frame: at least the
	// collective sub-chunk size. Default 1 MiB.
	MaxFrameBytes int
	// Key authenticates connections: the dialer answers the listener's
	// random challenge with an HMAC-SHA256 under this key. Empty means every
	// peer of the same world may connect (loopback tests). It is checked
	// inside TLS too, when TLS is on.
	Key []byte
	// TLS, when set, runs every connection over mutually authenticated TLS
	// 1.3: a peer whose certificate the cluster CA did not sign is refused
	// (and logged), and the bytes on the wire are encrypted.
	TLS *pki.Identity
	// Logger receives refused connections. Default: a no-op logger.
	Logger *zap.Logger
	// DialTimeout bounds a connection attempt and its handshake. Default 5 s.
	DialTimeout time.Duration
	// WriteTimeout breaks a connection on which one frame could not be
	// written for this long (a peer that stopped reading). Default 30 s.
	WriteTimeout time.Duration
	// SharedMemory adds a second listener, for peers on the same host,
	// whose connections move the payloads through memory both processes
	// map instead of the socket: a Unix socket in Linux's abstract
	// namespace (ShmAddr; SetPeer with such an address dials it), each
	// inbound connection's Window buffers are slots of a region the
	// receiver creates and passes to the sender, a frame on the socket
	// carries only its header and slot, and the receiver reduces straight
	// from the slot (see shm_linux.go). A payload in the sender's
	// registered memory (internal/shmem; a trainer's gradients, see
	// collective.ReadsRegisteredMemory) goes by reference instead: the
	// receiver maps the sender's segment once and reads the values where
	// they lie, so no byte is copied to move them. Linux only; not with
	// TLS (whose point is the bytes on the network).
	SharedMemory bool
}

// DefaultDataPlaneConfig returns the defaults described on each field.
func DefaultDataPlaneConfig() DataPlaneConfig {
	return DataPlaneConfig{Window: 8, MaxFrameBytes: 1 << 20, DialTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}
}

// Validate fills zero fields with defaults and rejects the rest that is
// out of range.
func (c *DataPlaneConfig) Validate() error {
	d := DefaultDataPlaneConfig()
	if c.Window == 0 {
		c.Window = d.Window
	}
	if c.MaxFrameBytes == 0 {
		c.MaxFrameBytes = d.MaxFrameBytes
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = d.DialTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Window < 1 || c.Window > 1<<16 || c.MaxFrameBytes < 4 || c.MaxFrameBytes > 1<<30 || c.DialTimeout < 0 || c.WriteTimeout < 0 {
		return fmt.Errorf("%w: data plane Window %d, MaxFrameBytes %d, timeouts %v/%v",
			ErrBadConfig, c.Window, c.MaxFrameBytes, c.DialTimeout, c.WriteTimeout)
	}
	c.MaxFrameBytes &^= 3
	if c.SharedMemory && c.TLS != nil {
		return fmt.Errorf("%w: a shared-memory data plane never leaves the host: it takes no TLS", ErrBadConfig)
	}
	if c.SharedMemory && !shmSupported {
		return fmt.Errorf("%w: the shared-memory data plane needs Linux", ErrBadConfig)
	}
	return nil
}

// The wire format. All integers little-endian.
//
//	challenge (listener → dialer): "TRDP" version:u16 nonce:[16]
//	hello (dialer → listener):     "TRDP" version:u16 worldLen:u16 world from:u32 to:u32 mac:[32]
//	                               mac = HMAC-SHA256(key, nonce ‖ world ‖ from ‖ to)
//	welcome (listener → dialer):   status:u8 (0) window:u32 maxFrameBytes:u32
//	                            or status:u8 (1) len:u16 reason
//	frame (dialer → listener):     header:[56] payload:[count·4]
//	                               header = type:u8 kind:u8 wire:u8 algo:u8 group:u32 from:u32 to:u32
//	                                        gen:u64 op:u64 seq:u32 root:u32 len:u64 count:u32 slot:u32
//	credit (listener → dialer):    frames:u32
//
// With SharedMemory the welcome is followed by one byte 'M' carrying the
// receiver's region (SCM_RIGHTS), Window slots of MaxFrameBytes; a data
// frame's payload is in slot "slot" instead of after the header (slot is 0
// on TCP and in done frames), and each credit is the index of a slot
// released. A data frame whose payload lies in the sender's registered
// memory (internal/shmem) is sent by reference instead, and takes no slot
// and no credit: slot dpSlotRef, the header followed by
//
//	ref:                           segment:u32 offset:u64 (bytes)
//
// and the receiver reads the payload where it lies, in its mapping of the
// sender's segment. Before its first reference to a segment the sender
// passes the segment itself: a header with slot dpSlotSegment, seq the
// segment's id, len its bytes and count 0, then one byte 'M' carrying the
// memfd (SCM_RIGHTS). The receiver keeps its mappings until the connection
// ends and no message it delivered still reads one.
const (
	dpMagic        = "TRDP"
	dpVersion      = commProtocol
	dpNonceLen     = 16
	dpChallengeLen = 4 + 2 + dpNonceLen
	dpHelloFixed   = 4 + 2 + 2
	dpMacLen       = sha256.Size
	dpMaxWorld     = 255
	dpHeaderLen    = 56
	dpWelcomeLen   = 1 + 4 + 4
	dpRefLen       = 4 + 8
	// dpSlotRef and dpSlotSegment are the slots of a reference to the
	// sender's registered memory and of a segment's hand-over.
	dpSlotRef     = math.MaxUint32
	dpSlotSegment = math.MaxUint32 - 1
	// dpMaxSegment bounds the size of a segment a peer may hand over.
	dpMaxSegment = 1 << 40
)

// frameHeader is the fixed part of a frame: a collective message without
// its payload.
type frameHeader struct {
	typ   collective.MsgType
	kind  collective.Kind
	algo  collective.Algorithm
	group uint32
	from  uint32
	to    uint32
	gen   uint64
	op    uint64
	seq   uint32
	root  uint32
	len   uint64
	count uint32 // payload words
	wire  kernels.DType
	slot  uint32 // shared memory: where the payload is
}

func (h *frameHeader) put(b []byte) {
	b[0] = byte(h.typ)
	b[1] = byte(h.kind)
	b[2] = byte(h.wire)
	b[3] = byte(h.algo)
	binary.LittleEndian.PutUint32(b[4:], h.group)
	binary.LittleEndian.PutUint32(b[8:], h.from)
	binary.LittleEndian.PutUint32(b[12:], h.to)
	binary.LittleEndian.PutUint64(b[16:], h.gen)
	binary.LittleEndian.PutUint64(b[24:], h.op)
	binary.LittleEndian.PutUint32(b[32:], h.seq)
	binary.LittleEndian.PutUint32(b[36:], h.root)
	binary.LittleEndian.PutUint64(b[40:], h.len)
	binary.LittleEndian.PutUint32(b[48:], h.count)
	binary.LittleEndian.PutUint32(b[52:], h.slot)
}

// parseFrameHeader decodes and checks a frame header from a peer.
func parseFrameHeader(b []byte, maxCount uint32) (frameHeader, error) {
	if len(b) != dpHeaderLen {
		return frameHeader{}, fmt.Errorf("%w: frame header of %d bytes, want %d", ErrDataPlane, len(b), dpHeaderLen)
	}
	h := frameHeader{
		typ:   collective.MsgType(b[0]),
		kind:  collective.Kind(b[1]),
		algo:  collective.Algorithm(b[3]),
		group: binary.LittleEndian.Uint32(b[4:]),
		from:  binary.LittleEndian.Uint32(b[8:]),
		to:    binary.LittleEndian.Uint32(b[12:]),
		gen:   binary.LittleEndian.Uint64(b[16:]),
		op:    binary.LittleEndian.Uint64(b[24:]),
		seq:   binary.LittleEndian.Uint32(b[32:]),
		root:  binary.LittleEndian.Uint32(b[36:]),
		len:   binary.LittleEndian.Uint64(b[40:]),
		count: binary.LittleEndian.Uint32(b[48:]),
		wire:  kernels.DType(b[2]),
		slot:  binary.LittleEndian.Uint32(b[52:]),
	}
	switch {
	case h.typ != collective.MsgData && h.typ != collective.MsgDone:
		return h, fmt.Errorf("%w: frame type %d", ErrDataPlane, b[0])
	case h.wire != kernels.F32 && !h.wire.Low():
		return h, fmt.Errorf("%w: wire type %d", ErrDataPlane, b[2])
	case !h.algo.Valid():
		return h, fmt.Errorf("%w: algorithm %d", ErrDataPlane, b[3])
	case h.typ == collective.MsgDone && (h.count != 0 || h.slot != 0):
		return h, fmt.Errorf("%w: done frame with %d values in slot %d", ErrDataPlane, h.count, h.slot)
	case h.count > maxCount:
		return h, fmt.Errorf("%w: frame of %d values, limit %d", ErrDataPlane, h.count, maxCount)
	}
	return h, nil
}

type dpHello struct {
	world    string
	from, to uint32
	mac      []byte
}

func helloMAC(key, nonce []byte, world string, from, to uint32) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(nonce)
	m.Write([]byte(world))
	var b [8]byte
	binary.LittleEndian.PutUint32(b[:], from)
	binary.LittleEndian.PutUint32(b[4:], to)
	m.Write(b[:])
	return m.Sum(nil)
}

func appendHello(b []byte, h dpHello) []byte {
	b = append(b, dpMagic...)
	b = binary.LittleEndian.AppendUint16(b, dpVersion)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(h.world)))
	b = append(b, h.world...)
	b = binary.LittleEndian.AppendUint32(b, h.from)
	b = binary.LittleEndian.AppendUint32(b, h.to)
	return append(b, h.mac...)
}

// readHello reads and decodes the dialer's hello.
func readHello(r io.Reader) (dpHello, error) {
	var fixed [dpHelloFixed]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return dpHello{}, err
	}
	n, err := parseHelloPrefix(fixed[:])
	if err != nil {
		return dpHello{}, err
	}
	rest := make([]byte, n+8+dpMacLen)
	if _, err := io.ReadFull(r, rest); err != nil {
		return dpHello{}, err
	}
	return parseHelloRest(rest, n)
}

func parseHelloPrefix(b []byte) (int, error) {
	if string(b[:4]) != dpMagic {
		return 0, fmt.Errorf("%w: not a troupe data plane peer (magic %q)", ErrDataPlane, b[:4])
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != dpVersion {
		return 0, fmt.Errorf("%w: protocol version %d, this process speaks %d", ErrDataPlane, v, dpVersion)
	}
	n := int(binary.LittleEndian.Uint16(b[6:]))
	if n > dpMaxWorld {
		return 0, fmt.Errorf("%w: world name of %d bytes", ErrDataPlane, n)
	}
	return n, nil
}

func parseHelloRest(b []byte, n int) (dpHello, error) {
	if len(b) != n+8+dpMacLen {
		return dpHello{}, fmt.Errorf("%w: hello of %d bytes", ErrDataPlane, len(b))
	}
	return dpHello{
		world: string(b[:n]),
		from:  binary.LittleEndian.Uint32(b[n:]),
		to:    binary.LittleEndian.Uint32(b[n+4:]),
		mac:   b[n+8:],
	}, nil
}

// DataPlane is one process's end of the tensor data plane: a listener for
// the peers that send to this rank, and one outbound connection per peer
// this rank sends to, each with a writer goroutine, a credit window and
// frames written straight from the operation's buffer.
type DataPlane struct {
	cfg     DataPlaneConfig
	world   string
	rank    int
	size    int
	ln      net.Listener
	shmLn   net.Listener // nil without SharedMemory
	deliver func(collective.Message)
	lost    func(peer int, err error)
	// srvTLS and cliTLS are the listener's and the dialers' TLS
	// configurations; nil without TLS.
	srvTLS, cliTLS *tls.Config

	mu     sync.Mutex
	addrs  map[int]string
	out    map[int]*dpOut
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	// places are the operations whose copied data TCP frames land in
	// directly (dataplane_place.go).
	places places
}

// Place and Unplace are the Comm actor's collective.Placer.
func (d *DataPlane) Place(group uint32, id collective.OpID, l collective.Landing) {
	d.places.Place(group, id, l)
}

// Unplace: see Place.
func (d *DataPlane) Unplace(group uint32, id collective.OpID) { d.places.Unplace(group, id) }

// InPlaceFrames is how many frames were read straight into their
// operation's buffer.
func (d *DataPlane) InPlaceFrames() int64 { return d.places.n.Load() }

// ListenDataPlane listens on addr (host:port, port 0 for any) for world rank
// rank of size ranks. deliver receives every arriving message (from the
// connection's goroutine: it must not block; the message's Release returns
// its buffer and a credit); lost reports a broken connection.
func ListenDataPlane(addr, world string, rank, size int, cfg DataPlaneConfig, deliver func(collective.Message), lost func(int, error)) (*DataPlane, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(world) > dpMaxWorld {
		return nil, fmt.Errorf("%w: world name longer than %d bytes", ErrBadConfig, dpMaxWorld)
	}
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("%w: rank %d of %d", ErrBadConfig, rank, size)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: listen on %s: %w", ErrDataPlane, addr, err)
	}
	d := &DataPlane{cfg: cfg, world: world, rank: rank, size: size, ln: ln, deliver: deliver, lost: lost,
		addrs: map[int]string{}, out: map[int]*dpOut{}, conns: map[net.Conn]struct{}{}}
	if cfg.SharedMemory {
		shmAddr := shmListenAddr(world, rank)
		if d.shmLn, err = net.Listen("unix", shmAddr); err != nil {
			ln.Close()
			return nil, fmt.Errorf("%w: listen on %s: %w", ErrDataPlane, shmAddr, err)
		}
		d.wg.Add(1)
		go d.accept(d.shmLn)
	}
	if cfg.TLS != nil {
		refused := func(peer string, err error) {
			cfg.Logger.Warn("data plane: refused a peer", zap.String("world", world), zap.Int("rank", rank), zap.String("peer", peer), zap.Error(err))
		}
		d.srvTLS, d.cliTLS = cfg.TLS.Server(refused), cfg.TLS.Client()
	}
	d.wg.Add(1)
	go d.accept(d.ln)
	return d, nil
}

// Addr is the TCP listener's host:port.
func (d *DataPlane) Addr() string { return d.ln.Addr().String() }

// ShmAddr is the shared-memory listener's address (a name in the abstract
// namespace, starting with @), "" without SharedMemory.
func (d *DataPlane) ShmAddr() string {
	if d.shmLn == nil {
		return ""
	}
	return d.shmLn.Addr().String()
}

// isShmAddr reports whether a peer address is a shared-memory listener's.
func isShmAddr(addr string) bool { return strings.HasPrefix(addr, "@") }

// SetPeer records where rank peer's data plane listens.
func (d *DataPlane) SetPeer(peer int, addr string) {
	// Lock order: dpOut.mu before DataPlane.mu (dial holds its own lock
	// while it looks the address up), so d.mu is released first.
	d.mu.Lock()
	d.addrs[peer] = addr
	o := d.out[peer]
	d.mu.Unlock()
	if o != nil {
		o.mu.Lock()
		o.cond.Broadcast()
		o.mu.Unlock()
	}
}

// Send queues m for its destination; it never blocks. m.Payload is read
// by the connection's writer later, straight from the caller's buffer: it
// must stay untouched until the operation completes or Cancel returns.
func (d *DataPlane) Send(m collective.Message) {
	d.mu.Lock()
	if d.closed || m.To < 0 || m.To >= d.size || m.To == d.rank {
		d.mu.Unlock()
		return
	}
	o := d.out[m.To]
	if o == nil {
		o = &dpOut{d: d, peer: m.To}
		o.cond = sync.NewCond(&o.mu)
		d.out[m.To] = o
		d.wg.Add(1)
		go o.run()
	}
	d.mu.Unlock()
	if raceBuild && m.Type == collective.MsgData {
		// registered memory stays: the detector does not watch it, and
		// the reference is what is sent
		if _, _, reg := shmem.Find(m.Payload); !reg {
			m.Payload = slices.Clone(m.Payload)
		}
	}
	o.mu.Lock()
	if o.err == nil {
		o.queue = append(o.queue, m)
		o.cond.Broadcast()
	}
	o.mu.Unlock()
}

// Cancel drops the queued frames of generations ≤ gen of group and waits
// until no writer is writing one of them: then no payload of the aborted
// operations is read any more.
func (d *DataPlane) Cancel(group uint32, gen uint64) {
	d.mu.Lock()
	outs := make([]*dpOut, 0, len(d.out))
	for _, o := range d.out {
		outs = append(outs, o)
	}
	d.mu.Unlock()
	stale := func(m *collective.Message) bool { return m.Group == group && m.Gen <= gen }
	for _, o := range outs {
		o.mu.Lock()
		kept := o.queue[:0]
		for _, m := range o.queue {
			if !stale(&m) {
				kept = append(kept, m)
			}
		}
		clear(o.queue[len(kept):])
		o.queue = kept
		for o.writing && stale(&o.current) {
			o.cond.Wait()
		}
		o.mu.Unlock()
	}
}

// Close stops taking frames, gives the writers up to a second to send what
// they queued (an operation's last completion count may still be on its
// way when the operation completes here), then closes the listener and every
// connection and waits for the goroutines.
func (d *DataPlane) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	outs := make([]*dpOut, 0, len(d.out))
	for _, o := range d.out {
		outs = append(outs, o)
	}
	d.mu.Unlock()
	deadline := time.Now().Add(time.Second)
	for _, o := range outs {
		o.mu.Lock()
		for (len(o.queue) > 0 || o.writing) && o.err == nil && time.Now().Before(deadline) {
			o.mu.Unlock()
			time.Sleep(time.Millisecond)
			o.mu.Lock()
		}
		o.closed = true
		if o.raw != nil {
			o.raw.Close()
		}
		o.cond.Broadcast()
		o.mu.Unlock()
	}
	d.mu.Lock()
	d.ln.Close()
	if d.shmLn != nil {
		d.shmLn.Close()
	}
	for c := range d.conns {
		c.Close()
	}
	d.mu.Unlock()
	d.wg.Wait()
	return nil
}

func (d *DataPlane) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

func (d *DataPlane) track(c net.Conn) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		c.Close()
		return false
	}
	d.conns[c] = struct{}{}
	return true
}

func (d *DataPlane) untrack(c net.Conn) {
	d.mu.Lock()
	delete(d.conns, c)
	d.mu.Unlock()
	c.Close()
}

func (d *DataPlane) accept(ln net.Listener) {
	defer d.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if !d.track(c) {
			return
		}
		d.wg.Add(1)
		go d.serveIn(c)
	}
}

// handshakeIn checks an inbound connection's hello and welcomes it.
func (d *DataPlane) handshakeIn(c net.Conn) (int, error) {
	c.SetDeadline(time.Now().Add(d.cfg.DialTimeout))
	defer c.SetDeadline(time.Time{})
	ch := make([]byte, dpChallengeLen)
	copy(ch, dpMagic)
	binary.LittleEndian.PutUint16(ch[4:], dpVersion)
	nonce := ch[6:]
	if _, err := rand.Read(nonce); err != nil {
		return -1, err
	}
	if _, err := c.Write(ch); err != nil {
		return -1, err
	}
	h, err := readHello(c)
	if err == nil {
		switch {
		case h.world != d.world:
			err = fmt.Errorf("%w: peer of world %q, this is %q", ErrDataPlane, h.world, d.world)
		case h.to != uint32(d.rank) || h.from >= uint32(d.size) || h.from == uint32(d.rank):
			err = fmt.Errorf("%w: connection from rank %d to rank %d reached rank %d of %d", ErrDataPlane, h.from, h.to, d.rank, d.size)
		case !hmac.Equal(h.mac, helloMAC(d.cfg.Key, nonce, h.world, h.from, h.to)):
			err = fmt.Errorf("%w: rank %d's key does not match", ErrDataPlane, h.from)
		}
	}
	if err != nil {
		reason := err.Error()[:min(len(err.Error()), 1024)]
		b := append([]byte{1}, binary.LittleEndian.AppendUint16(nil, uint16(len(reason)))...)
		c.Write(append(b, reason...))
		return -1, err
	}
	w := make([]byte, dpWelcomeLen)
	binary.LittleEndian.PutUint32(w[1:], uint32(d.cfg.Window))
	binary.LittleEndian.PutUint32(w[5:], uint32(d.cfg.MaxFrameBytes))
	_, err = c.Write(w)
	return int(h.from), err
}

// serveIn reads the frames of one inbound connection into its pool of
// Window buffers and returns a credit for each buffer released.
func (d *DataPlane) serveIn(c net.Conn) {
	defer d.wg.Done()
	defer d.untrack(c)
	if d.srvTLS != nil {
		tc := tls.Server(c, d.srvTLS)
		tc.SetDeadline(time.Now().Add(d.cfg.DialTimeout))
		if err := tc.Handshake(); err != nil {
			// A peer the CA did not sign was logged by the verifier; one
			// that refused this node's certificate, or spoke no TLS, here.
			if !errors.Is(err, pki.ErrPeerRefused) && !d.isClosed() {
				d.cfg.Logger.Warn("data plane: TLS handshake failed", zap.Int("rank", d.rank), zap.String("peer", c.RemoteAddr().String()), zap.Error(err))
			}
			return
		}
		c = tc
	}
	peer, err := d.handshakeIn(c)
	if err != nil {
		if !d.isClosed() {
			// A stranger or a broken dial (the dialer reports it too).
			d.cfg.Logger.Warn("data plane: refused a connection", zap.Int("rank", d.rank), zap.String("peer", c.RemoteAddr().String()), zap.Error(err))
		}
		return
	}
	W, maxCount := d.cfg.Window, uint32(d.cfg.MaxFrameBytes/4)
	// With shared memory the buffers are the slots of a region this side
	// creates and the sender maps; the sender picks a free slot for each
	// frame and learns which ones are free again from the credits. The
	// region is unmapped once the connection ended and every slot handed
	// to the Comm actor came back.
	var slots *slotPool
	if _, unix := c.(*net.UnixConn); unix {
		region, fd, err := shmCreate(W * d.cfg.MaxFrameBytes)
		if err == nil {
			c.SetWriteDeadline(time.Now().Add(d.cfg.DialTimeout))
			err = shmSend(c, fd)
			c.SetWriteDeadline(time.Time{})
			shmClose(fd)
			if err != nil {
				region.unmap()
			}
		}
		if err != nil {
			if !d.isClosed() {
				d.lost(peer, fmt.Errorf("%w: sharing memory with rank %d: %w", ErrDataPlane, peer, err))
			}
			return
		}
		slots = &slotPool{region: region, inUse: make([]bool, W)}
		defer slots.end()
	}
	free := make(chan int, W)
	bufs := make([][]float32, W)
	release := make([]func(), W)
	// Credits go back in batches of a quarter window, written by whoever
	// releases the buffer (the Comm actor): fewer syscalls and wake-ups,
	// while the sender still has three quarters of its window in flight. A
	// credit write never waits: at most Window of them are ever unread.
	var pending int
	var creditMu sync.Mutex
	batch := max(1, W/4)
	var cb [4]byte
	var freed []byte // shared memory: the released slots' indices
	for i := range bufs {
		if slots != nil {
			bufs[i] = slots.region.slot(i, d.cfg.MaxFrameBytes)
			release[i] = func() {
				slots.put(i)
				creditMu.Lock()
				defer creditMu.Unlock()
				freed = binary.LittleEndian.AppendUint32(freed, uint32(i))
				if len(freed) < 4*batch {
					return
				}
				c.SetWriteDeadline(time.Now().Add(d.cfg.WriteTimeout))
				c.Write(freed) // a broken connection shows in the frame reader
				freed = freed[:0]
			}
			continue
		}
		bufs[i] = make([]float32, maxCount)
		free <- i
		release[i] = func() {
			free <- i
			creditMu.Lock()
			defer creditMu.Unlock()
			if pending++; pending < batch {
				return
			}
			binary.LittleEndian.PutUint32(cb[:], uint32(pending))
			pending = 0
			c.SetWriteDeadline(time.Now().Add(d.cfg.WriteTimeout))
			c.Write(cb[:]) // a broken connection shows in the frame reader
		}
	}

	var hb [dpHeaderLen]byte
	var scratch []byte
	for {
		if _, err = io.ReadFull(c, hb[:]); err != nil {
			break
		}
		var h frameHeader
		if h, err = parseFrameHeader(hb[:], maxCount); err != nil {
			break
		}
		if h.from != uint32(peer) || h.to != uint32(d.rank) {
			err = fmt.Errorf("%w: frame %d→%d on the connection from rank %d", ErrDataPlane, h.from, h.to, peer)
			break
		}
		m := collective.Message{Type: h.typ, Group: h.group, From: int(h.from), To: int(h.to), Gen: h.gen, Op: h.op,
			Seq: h.seq, Kind: h.kind, Algo: h.algo, Len: h.len, Root: int(h.root), Wire: h.wire, Culprit: -1}
		if slots != nil && h.typ == collective.MsgData && h.slot >= dpSlotSegment {
			var deliver bool
			if deliver, err = slots.shared(c, &h, &m); err != nil {
				err = fmt.Errorf("%w: rank %d: %w", ErrDataPlane, peer, err)
				break
			}
			if deliver {
				d.deliver(m)
			}
			continue
		}
		if slots != nil && h.typ == collective.MsgData {
			i := int(h.slot)
			if err = slots.take(i); err != nil {
				err = fmt.Errorf("%w: rank %d: %w", ErrDataPlane, peer, err)
				break
			}
			m.Payload, m.Release = bufs[i][:h.count], release[i]
			d.deliver(m)
			continue
		}
		if h.slot != 0 {
			err = fmt.Errorf("%w: rank %d names slot %d on a TCP data plane", ErrDataPlane, peer, h.slot)
			break
		}
		if h.typ == collective.MsgData {
			var i int
			select {
			case i = <-free:
			default:
				err = fmt.Errorf("%w: rank %d sent more frames than its credit", ErrDataPlane, peer)
			}
			if err != nil {
				break
			}
			if dst, pl := d.places.land(&h, c); dst != nil {
				// Straight into the operation's buffer: the receive buffer
				// and its credit go back at once.
				_, err = io.ReadFull(c, floatBytes(dst))
				d.places.done(pl)
				release[i]()
				if err != nil {
					break
				}
				m.Payload = dst
				d.deliver(m)
				continue
			}
			p := bufs[i][:h.count]
			if littleEndian {
				_, err = io.ReadFull(c, floatBytes(p))
			} else {
				scratch = append(scratch[:0], make([]byte, 4*h.count)...)
				if _, err = io.ReadFull(c, scratch); err == nil {
					for j := range p {
						p[j] = math.Float32frombits(binary.LittleEndian.Uint32(scratch[4*j:]))
					}
				}
			}
			if err != nil {
				free <- i
				break
			}
			m.Payload, m.Release = p, release[i]
		}
		d.deliver(m)
	}
	if !d.isClosed() {
		d.lost(peer, fmt.Errorf("%w: connection from rank %d: %w", ErrDataPlane, peer, err))
	}
}

// slotPool tracks which of a shared region's slots the Comm actor holds,
// and the sender's registered segments this side mapped and the messages
// that read them, and unmaps all once the connection ended and every
// message came back: one may still be in the actor's mailbox when the
// connection breaks.
type slotPool struct {
	mu     sync.Mutex
	region *shmRegion
	inUse  []bool
	segs   map[uint32]*shmRegion
	held   int
	ended  bool
}

// shared reads the rest of a frame about the sender's registered memory: a
// segment's hand-over (mapped here; nothing to deliver) or a reference (m's
// payload is then the values where they lie, until m.Release).
func (p *slotPool) shared(c net.Conn, h *frameHeader, m *collective.Message) (bool, error) {
	if h.slot == dpSlotSegment {
		if h.count != 0 || h.len == 0 || h.len > dpMaxSegment || h.len%4 != 0 {
			return false, fmt.Errorf("a segment hand-over of %d bytes with %d values", h.len, h.count)
		}
		fd, err := shmRecv(c)
		if err != nil {
			return false, err
		}
		r, err := shmMap(fd, int(h.len))
		shmClose(fd)
		if err != nil {
			return false, err
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.segs[h.seq] != nil {
			r.unmap()
			return false, fmt.Errorf("segment %d handed over twice", h.seq)
		}
		if p.segs == nil {
			p.segs = map[uint32]*shmRegion{}
		}
		p.segs[h.seq] = r
		return false, nil
	}
	var b [dpRefLen]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return false, err
	}
	id, off := binary.LittleEndian.Uint32(b[:]), binary.LittleEndian.Uint64(b[4:])
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.segs[id]
	switch {
	case r == nil:
		return false, fmt.Errorf("a reference to segment %d, which it never handed over", id)
	case off%4 != 0 || off > uint64(r.size()) || 4*uint64(h.count) > uint64(r.size())-off:
		return false, fmt.Errorf("a reference to %d values at byte %d of segment %d, which holds %d bytes", h.count, off, id, r.size())
	}
	p.held++
	m.Payload, m.Release, m.Borrowed = r.floats(int(off), int(h.count)), p.unref, true
	return true, nil
}

// unref: a message that read a segment is done.
func (p *slotPool) unref() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held--; p.held == 0 && p.ended {
		p.unmapAll()
	}
}

func (p *slotPool) unmapAll() {
	if p.region != nil {
		p.region.unmap()
	}
	for _, r := range p.segs {
		r.unmap()
	}
}

// take marks slot i handed out; the sender may name only a free slot.
func (p *slotPool) take(i int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i < 0 || i >= len(p.inUse) || p.inUse[i] {
		return fmt.Errorf("a frame in slot %d, which is not free (%d slots)", i, len(p.inUse))
	}
	p.inUse[i] = true
	p.held++
	return nil
}

// put returns slot i.
func (p *slotPool) put(i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inUse[i] = false
	if p.held--; p.held == 0 && p.ended {
		p.unmapAll()
	}
}

// end: the connection is over; unmap now if no slot is out.
func (p *slotPool) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	if p.held == 0 {
		p.unmapAll()
	}
}

// batchConn holds what TLS writes, a record of at most 16 KiB at a time,
// until Flush (after each frame) or a read: a frame of 1 MiB is then one
// write of 64 records, not 64 system calls. Measured on loopback (troupe
// bench allreduce --tls, 2 ranks, 16 MiB): busbw 0.60 GB/s with a write
// per record, 0.64–0.68 with this. (Reading ahead in large reads on the
// receiving side, the mirror of this, made 64 MiB slower: 0.60 against
// 0.74–0.77, one more copy of every byte on two busy cores.)
type batchConn struct {
	net.Conn
	mu  sync.Mutex // tls.Conn's Close writes its alert from another goroutine
	buf []byte
}

const batchBytes = 1 << 20

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf)+len(p) > batchBytes {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
	}
	if len(p) >= batchBytes {
		return b.Conn.Write(p)
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// Flush writes what is held.
func (b *batchConn) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flushLocked()
}

func (b *batchConn) flushLocked() error {
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.Conn.Write(b.buf)
	b.buf = b.buf[:0]
	return err
}

// Read writes what is held first: the peer may wait for it (the handshake).
func (b *batchConn) Read(p []byte) (int, error) {
	if err := b.Flush(); err != nil {
		return 0, err
	}
	return b.Conn.Read(p)
}

// dpOut is the outbound connection to one peer.
type dpOut struct {
	d    *DataPlane
	peer int

	mu      sync.Mutex
	cond    *sync.Cond // queue, credits, writing, closed changed
	queue   []collective.Message
	credits int
	maxVals int
	writing bool
	current collective.Message
	conn    net.Conn // frames and credits go through it (TLS or TCP)
	// raw is conn's TCP connection, closed to stop it: a TLS Close would
	// first write its alert, which waits behind a blocked frame write.
	raw net.Conn
	// batch, with TLS, gathers a frame's records into one write (nil
	// without TLS, where a frame is one writev already).
	batch  *batchConn
	err    error
	closed bool
	// shared memory: the receiver's region, its slot size, and the slots
	// free to write (a stack), with isFree to catch a slot credited twice
	region    *shmRegion
	slotBytes int
	freeSlots []uint32
	isFree    []bool
	// segments: the registered segments handed over to the receiver
	// (writer goroutine only)
	segments map[uint32]bool
}

// refFrames counts the data frames this process sent by reference (tests).
var refFrames atomic.Int64

// isRef reports whether m goes by reference: a data frame to a peer that
// maps this process's memory, its payload in registered memory. The writer
// goroutine calls it (o.region is set before it writes).
func (o *dpOut) isRef(m *collective.Message) (shmem.Segment, int, bool) {
	if o.region == nil || m.Type != collective.MsgData {
		return shmem.Segment{}, 0, false
	}
	return shmem.Find(m.Payload)
}

func (o *dpOut) fail(err error) {
	o.mu.Lock()
	first := o.err == nil
	if first {
		o.err = err
		o.queue = nil
	}
	o.closed = true
	if o.raw != nil {
		o.raw.Close()
	}
	o.cond.Broadcast()
	o.mu.Unlock()
	if first && !o.d.isClosed() {
		o.d.lost(o.peer, err)
	}
}

// dial waits for the peer's address, connects and shakes hands.
func (o *dpOut) dial() error {
	d := o.d
	o.mu.Lock()
	for {
		d.mu.Lock()
		addr, ok := d.addrs[o.peer]
		d.mu.Unlock()
		if ok || o.closed {
			o.mu.Unlock()
			if o.closed {
				return net.ErrClosed
			}
			return o.connect(addr)
		}
		o.cond.Wait()
	}
}

func (o *dpOut) connect(addr string) error {
	d := o.d
	network := "tcp"
	if isShmAddr(addr) {
		network = "unix"
	}
	raw, err := net.DialTimeout(network, addr, d.cfg.DialTimeout)
	if err != nil {
		return fmt.Errorf("%w: dial rank %d at %s: %w", ErrDataPlane, o.peer, addr, err)
	}
	var c net.Conn = raw
	o.mu.Lock()
	o.conn, o.raw = c, raw
	closed := o.closed
	o.mu.Unlock()
	if closed {
		c.Close()
		return net.ErrClosed
	}
	c.SetDeadline(time.Now().Add(d.cfg.DialTimeout))
	if d.cliTLS != nil {
		cfg := d.cliTLS.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
		bc := &batchConn{Conn: raw}
		tc := tls.Client(bc, cfg)
		if err := tc.Handshake(); err != nil {
			if errors.Is(err, pki.ErrPeerRefused) {
				d.cfg.Logger.Warn("data plane: refused a peer", zap.String("world", d.world), zap.Int("rank", d.rank), zap.String("peer", addr), zap.Error(err))
			}
			return fmt.Errorf("%w: TLS with rank %d at %s: %w", ErrDataPlane, o.peer, addr, err)
		}
		c = tc
		o.mu.Lock()
		o.conn, o.batch = c, bc
		o.mu.Unlock()
	}
	ch := make([]byte, dpChallengeLen)
	if _, err := io.ReadFull(c, ch); err != nil {
		return fmt.Errorf("%w: handshake with rank %d: %w", ErrDataPlane, o.peer, err)
	}
	if string(ch[:4]) != dpMagic || binary.LittleEndian.Uint16(ch[4:]) != dpVersion {
		return fmt.Errorf("%w: rank %d at %s is not a troupe data plane of version %d", ErrDataPlane, o.peer, addr, dpVersion)
	}
	mac := helloMAC(d.cfg.Key, ch[6:], d.world, uint32(d.rank), uint32(o.peer))
	if _, err := c.Write(appendHello(nil, dpHello{world: d.world, from: uint32(d.rank), to: uint32(o.peer), mac: mac})); err != nil {
		return fmt.Errorf("%w: handshake with rank %d: %w", ErrDataPlane, o.peer, err)
	}
	w := make([]byte, dpWelcomeLen)
	if _, err := io.ReadFull(c, w[:1]); err != nil {
		return fmt.Errorf("%w: handshake with rank %d: %w", ErrDataPlane, o.peer, err)
	}
	if w[0] != 0 {
		var n [2]byte
		io.ReadFull(c, n[:])
		reason := make([]byte, binary.LittleEndian.Uint16(n[:]))
		io.ReadFull(c, reason)
		return fmt.Errorf("%w: rank %d refused the connection: %s", ErrDataPlane, o.peer, reason)
	}
	if _, err := io.ReadFull(c, w[1:]); err != nil {
		return fmt.Errorf("%w: handshake with rank %d: %w", ErrDataPlane, o.peer, err)
	}
	window := binary.LittleEndian.Uint32(w[1:])
	maxFrame := binary.LittleEndian.Uint32(w[5:])
	if window == 0 || window > 1<<16 || maxFrame < 4 {
		return fmt.Errorf("%w: rank %d offers window %d, frames of %d bytes", ErrDataPlane, o.peer, window, maxFrame)
	}
	if isShmAddr(addr) {
		fd, err := shmRecv(c)
		if err != nil {
			return fmt.Errorf("%w: sharing memory with rank %d: %w", ErrDataPlane, o.peer, err)
		}
		region, err := shmMap(fd, int(window)*int(maxFrame))
		shmClose(fd)
		if err != nil {
			return fmt.Errorf("%w: rank %d's shared region: %w", ErrDataPlane, o.peer, err)
		}
		o.mu.Lock()
		o.region, o.slotBytes = region, int(maxFrame)
		o.isFree = make([]bool, window)
		for i := int(window) - 1; i >= 0; i-- {
			o.freeSlots = append(o.freeSlots, uint32(i))
			o.isFree[i] = true
		}
		o.mu.Unlock()
	}
	// the handshake's deadline bounded the wait for the shared region too
	c.SetDeadline(time.Time{})
	o.mu.Lock()
	o.credits, o.maxVals = int(window), int(maxFrame/4)
	o.mu.Unlock()
	return nil
}

// readCredits blocks until the receiver returns credit. The writer calls it
// only when it has none left: it has nothing to do meanwhile, and credit
// frames simply wait in the socket until then.
func (o *dpOut) readCredits(window int) error {
	var b [4]byte
	if _, err := io.ReadFull(o.conn, b[:]); err != nil {
		return fmt.Errorf("%w: connection to rank %d: %w", ErrDataPlane, o.peer, err)
	}
	n := int(binary.LittleEndian.Uint32(b[:]))
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.region != nil {
		// a credit is the index of a slot released
		if n >= len(o.isFree) || o.isFree[n] {
			return fmt.Errorf("%w: rank %d released slot %d, which is not in use (%d slots)", ErrDataPlane, o.peer, n, len(o.isFree))
		}
		o.isFree[n] = true
		o.freeSlots = append(o.freeSlots, uint32(n))
		o.credits++
		return nil
	}
	o.credits += n
	if n == 0 || o.credits > window {
		return fmt.Errorf("%w: rank %d returned %d credits, more than its window of %d", ErrDataPlane, o.peer, n, window)
	}
	return nil
}

// writeRef sends data frame m by reference to where its payload lies in
// segment seg (at byte off), handing the segment over first if the
// receiver has not mapped it yet.
func (o *dpOut) writeRef(m *collective.Message, seg shmem.Segment, off int) error {
	var hb [dpHeaderLen + dpRefLen]byte
	h := frameHeader{typ: m.Type, kind: m.Kind, algo: m.Algo, group: m.Group, from: uint32(m.From), to: uint32(m.To),
		gen: m.Gen, op: m.Op, wire: m.Wire}
	o.conn.SetWriteDeadline(time.Now().Add(o.d.cfg.WriteTimeout))
	if !o.segments[seg.ID] {
		h.seq, h.len, h.slot = seg.ID, uint64(seg.Bytes), dpSlotSegment
		h.put(hb[:])
		if _, err := o.conn.Write(hb[:dpHeaderLen]); err != nil {
			return err
		}
		if err := shmSend(o.conn, seg.FD); err != nil {
			return err
		}
		if o.segments == nil {
			o.segments = map[uint32]bool{}
		}
		o.segments[seg.ID] = true
	}
	h.seq, h.root, h.len, h.count, h.slot = m.Seq, uint32(m.Root), m.Len, uint32(len(m.Payload)), dpSlotRef
	h.put(hb[:])
	binary.LittleEndian.PutUint32(hb[dpHeaderLen:], seg.ID)
	binary.LittleEndian.PutUint64(hb[dpHeaderLen+4:], uint64(off))
	if _, err := o.conn.Write(hb[:]); err != nil {
		return err
	}
	refFrames.Add(1)
	return nil
}

// run is the connection's writer goroutine.
func (o *dpOut) run() {
	defer o.d.wg.Done()
	defer func() {
		o.mu.Lock()
		if o.region != nil {
			o.region.unmap()
		}
		o.mu.Unlock()
	}()
	if err := o.dial(); err != nil {
		o.fail(err)
		return
	}
	window := o.credits
	var hb [dpHeaderLen]byte
	var scratch []byte
	for {
		o.mu.Lock()
		for !o.closed && len(o.queue) == 0 {
			o.cond.Wait()
		}
		if o.closed {
			o.mu.Unlock()
			return
		}
		_, _, ref := o.isRef(&o.queue[0])
		if o.queue[0].Type == collective.MsgData && o.credits == 0 && !ref {
			o.mu.Unlock()
			if err := o.readCredits(window); err != nil {
				o.fail(err)
				return
			}
			continue // the head may have been canceled meanwhile
		}
		m := o.queue[0]
		o.queue[0] = collective.Message{}
		o.queue = o.queue[1:]
		var slot []float32
		var slotIndex uint32
		seg, segOff, ref := o.isRef(&m)
		if ref {
			slotIndex = dpSlotRef
		} else if m.Type == collective.MsgData {
			o.credits--
			if o.region != nil {
				slotIndex = o.freeSlots[len(o.freeSlots)-1]
				o.freeSlots = o.freeSlots[:len(o.freeSlots)-1]
				o.isFree[slotIndex] = false
				slot = o.region.slot(int(slotIndex), o.slotBytes)
			}
		}
		o.writing, o.current = true, m
		maxVals := o.maxVals
		o.mu.Unlock()

		var err error
		if len(m.Payload) > maxVals {
			err = fmt.Errorf("%w: a chunk of %d values exceeds rank %d's frames of %d values (SubChunkBytes > MaxFrameBytes)", ErrDataPlane, len(m.Payload), o.peer, maxVals)
		} else if ref {
			err = o.writeRef(&m, seg, segOff)
		} else {
			h := frameHeader{typ: m.Type, kind: m.Kind, algo: m.Algo, group: m.Group, from: uint32(m.From), to: uint32(m.To),
				gen: m.Gen, op: m.Op, seq: m.Seq, root: uint32(m.Root), len: m.Len, count: uint32(len(m.Payload)), wire: m.Wire, slot: slotIndex}
			h.put(hb[:])
			var payload []byte
			if slot != nil {
				// the one copy: into the receiver's memory, which it
				// reduces from in place; the socket carries the header
				copy(slot, m.Payload)
			} else if littleEndian {
				payload = floatBytes(m.Payload)
			} else {
				scratch = append(scratch[:0], encodeFloats(m.Payload)...)
				payload = scratch
			}
			o.conn.SetWriteDeadline(time.Now().Add(o.d.cfg.WriteTimeout))
			bufs := net.Buffers{hb[:], payload}
			_, err = bufs.WriteTo(o.conn)
			if err == nil && o.batch != nil {
				err = o.batch.Flush()
			}
		}
		o.mu.Lock()
		o.writing, o.current = false, collective.Message{}
		o.cond.Broadcast()
		o.mu.Unlock()
		if err != nil {
			if !errors.Is(err, ErrDataPlane) {
				err = fmt.Errorf("%w: connection to rank %d: %w", ErrDataPlane, o.peer, err)
			}
			o.fail(err)
			return
		}
	}
}

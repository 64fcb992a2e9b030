//go:build linux

package actors

import (
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The shared-memory data plane (DataPlaneConfig.SharedMemory) keeps the
// framed data plane's connection, handshake, headers and credits on a Unix
// socket in Linux's abstract namespace, and moves the payloads through a
// memory region the receiver creates (memfd_create) and hands to the sender
// over that socket (SCM_RIGHTS). Neither has a name in any file system:
// when a process dies, even by kill -9, the kernel closes its socket (the
// peer reads EOF at once, as on TCP) and drops its mapping; the region goes
// with the last one. Nothing is ever left under /dev/shm.

const shmSupported = true

// shmListenAddr is a fresh name in the abstract namespace (the leading @).
func shmListenAddr(world string, rank int) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Sprintf("@troupe-dp-%d-%d", os.Getpid(), rank)
	}
	return fmt.Sprintf("@troupe-dp-%d-%d-%x", os.Getpid(), rank, b)
}

// shmRegion is a shared mapping of a memfd.
type shmRegion struct {
	mem []byte
}

// shmCreate makes a region of n bytes and returns it with its file
// descriptor (for shmSend; the caller closes it).
func shmCreate(n int) (*shmRegion, int, error) {
	fd, err := unix.MemfdCreate("troupe-dp", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, -1, fmt.Errorf("%w: memfd_create: %w", ErrDataPlane, err)
	}
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("%w: sizing a shared region of %d bytes: %w", ErrDataPlane, n, err)
	}
	r, err := shmMap(fd, n)
	if err != nil {
		unix.Close(fd)
		return nil, -1, err
	}
	return r, fd, nil
}

// shmMap maps n bytes of fd, shared.
func shmMap(fd, n int) (*shmRegion, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%w: the shared region: %w", ErrDataPlane, err)
	}
	if st.Size != int64(n) {
		return nil, fmt.Errorf("%w: the peer's shared region holds %d bytes, want %d", ErrDataPlane, st.Size, n)
	}
	mem, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%w: mapping a shared region of %d bytes: %w", ErrDataPlane, n, err)
	}
	return &shmRegion{mem: mem}, nil
}

// slot is the i-th of the region's slots of size bytes, as float32s.
func (r *shmRegion) slot(i, size int) []float32 {
	b := r.mem[i*size : (i+1)*size : (i+1)*size]
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), size/4)
}

// floats is n float32s from byte off (a multiple of 4) on.
func (r *shmRegion) floats(off, n int) []float32 {
	if n == 0 {
		return []float32{}
	}
	b := r.mem[off : off+4*n : off+4*n]
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
}

func (r *shmRegion) size() int { return len(r.mem) }

func (r *shmRegion) unmap() {
	if r.mem != nil {
		unix.Munmap(r.mem)
		r.mem = nil
	}
}

// shmSend passes fd to the peer over c, with one byte of data.
func shmSend(c net.Conn, fd int) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("%w: shared memory needs a Unix socket, not %T", ErrDataPlane, c)
	}
	_, _, err := uc.WriteMsgUnix([]byte{'M'}, unix.UnixRights(fd), nil)
	return err
}

// shmRecv takes the file descriptor the peer passed with shmSend.
func shmRecv(c net.Conn) (int, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return -1, fmt.Errorf("%w: shared memory needs a Unix socket, not %T", ErrDataPlane, c)
	}
	b := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := uc.ReadMsgUnix(b, oob)
	if err != nil {
		return -1, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || n != 1 || b[0] != 'M' || len(msgs) != 1 {
		return -1, fmt.Errorf("%w: the peer sent no shared region", ErrDataPlane)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("%w: the peer sent no shared region", ErrDataPlane)
	}
	return fds[0], nil
}

func shmClose(fd int) { unix.Close(fd) }

// hostID names this host and network namespace for peers deciding whether
// they share memory with this process: the boot's id (a reboot or another
// machine gives another) and the network namespace (abstract Unix sockets
// are per namespace, and test hosts are namespaces). "" if unknown.
var hostID = func() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(boot)) + "/" + ns
}()

//go:build !linux

package actors

import (
	"fmt"
	"net"
)

const shmSupported = false

func shmListenAddr(string, int) string { return "" }

type shmRegion struct{}

func shmCreate(int) (*shmRegion, int, error) {
	return nil, -1, fmt.Errorf("%w: the shared-memory data plane needs Linux", ErrBadConfig)
}
func shmMap(int, int) (*shmRegion, error) {
	return nil, fmt.Errorf("%w: the shared-memory data plane needs Linux", ErrBadConfig)
}
func (r *shmRegion) slot(int, int) []float32   { return nil }
func (r *shmRegion) unmap()                    {}
func (r *shmRegion) floats(int, int) []float32 { return nil }
func (r *shmRegion) size() int                 { return 0 }
func shmSend(net.Conn, int) error {
	return fmt.Errorf("%w: the shared-memory data plane needs Linux", ErrBadConfig)
}
func shmRecv(net.Conn) (int, error) {
	return -1, fmt.Errorf("%w: the shared-memory data plane needs Linux", ErrBadConfig)
}
func shmClose(int) {}

// hostID is unknown off Linux: no peer shares memory.
const hostID = ""

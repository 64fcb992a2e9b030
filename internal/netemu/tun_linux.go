package netemu

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Run passes every packet the kernel routes to TUN device dev (created
// beforehand, e.g. `ip tuntap add dev tun0 mode tun`, and up) back to the
// kernel through the same device after line's delay, until ctx ends. A
// router namespace that routes forwarded packets into the device thus
// delays them. It returns the packets passed and dropped.
func Run(ctx context.Context, dev string, line *Line) (passed, dropped int64, err error) {
	// Non-blocking, so that os.NewFile puts it in the runtime's poller
	// and closing it ends the reader's Read (a blocking descriptor's
	// Read would hold the close until the next packet).
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("netemu: opening /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(dev)
	if err != nil {
		unix.Close(fd)
		return 0, 0, fmt.Errorf("netemu: device %q: %w", dev, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return 0, 0, fmt.Errorf("netemu: attaching to TUN device %q: %w", dev, err)
	}
	f := os.NewFile(uintptr(fd), dev)
	type arrival struct {
		pkt []byte
		at  time.Time
	}
	in := make(chan arrival, 1024)
	readErr := make(chan error, 1)
	go func() { // owned by Run: it ends when Run closes f
		defer close(in)
		buf := make([]byte, 1<<16)
		for {
			n, err := f.Read(buf)
			if err != nil {
				readErr <- err
				return
			}
			in <- arrival{pkt: append([]byte(nil), buf[:n]...), at: time.Now()}
		}
	}()
	defer func() {
		f.Close()
		for range in { // let the reader finish
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		for {
			pkt, wait := line.Pop(time.Now())
			if pkt == nil {
				if wait > 0 {
					timer.Reset(wait)
				}
				break
			}
			if _, err := f.Write(pkt); err != nil {
				return passed, dropped, fmt.Errorf("netemu: writing to %s: %w", dev, err)
			}
			passed++
		}
		select {
		case <-ctx.Done():
			return passed, dropped, nil
		case a, ok := <-in:
			if !ok {
				return passed, dropped, fmt.Errorf("netemu: reading %s: %w", dev, <-readErr)
			}
			if line.Push(a.pkt, a.at) != nil {
				dropped++
			}
		case <-timer.C:
		}
	}
}

//go:build cuda

package cuda

import "unsafe"

// devPtr is a device address.
type devPtr uintptr

// deviceInfo is what the backend needs to know about its GPU.
type deviceInfo struct {
	name         string
	memory       int64
	major, minor int // compute capability
	sms          int // streaming multiprocessors
	maxGridY     int
	maxGridZ     int
}

// tensorCores reports whether the GPU runs mma.sync for TF32 and BF16
// (Ampere, sm_80, and newer).
func (d deviceInfo) tensorCores() bool { return d.major >= 8 }

// driver is the device the backend drives: the CUDA driver on one context
// and stream (driver_cu.go), or the CPU emulator (driver_emu.go, tag
// cudaemu). Every method runs on the backend's loop goroutine only; work is
// queued on one stream in call order, and only dtoh and sync wait for it.
type driver interface {
	info() deviceInfo
	alloc(bytes int64) (devPtr, error)
	free(p devPtr) error
	// htod copies host memory to the device; src may be reused on return.
	htod(dst devPtr, src unsafe.Pointer, bytes int64) error
	// dtoh copies device memory to the host and waits for it.
	dtoh(dst unsafe.Pointer, src devPtr, bytes int64) error
	dtod(dst, src devPtr, bytes int64) error
	// memset32 sets n 4-byte words to v.
	memset32(dst devPtr, v uint32, n int64) error
	// launch queues kernel k; args holds one 8-byte word per parameter.
	launch(k kernel, grid, block [3]int, args []uint64) error
	// sync waits for all queued work.
	sync() error
	// close releases the stream, module and context.
	close() error
}

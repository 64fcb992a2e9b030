//go:build cuda && cudaemu

package cuda

// #cgo CXXFLAGS: -std=c++17 -O2 -Wall
// #include <stdlib.h>
// #include "emu_api.h"
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/troupe-ml/troupe/kernels"
)

// emuDriver runs kernels.cu on the CPU emulator of emu.cc: "device" memory
// is C heap memory and every launch runs to completion before it returns.
// It stands in for one small GPU, so that the cudaemu tests run every
// kernel and all the host code without the CUDA driver.
type emuDriver struct {
	ids [numKernels]C.int
	// msg receives a failed launch's description.
	msg *C.char
}

// emuSMs is the emulated GPU's SM count; it keeps the grids, and so the
// emulator's work, small (8·2 blocks for element-wise kernels), while still
// making every grid-stride loop go round more than once on the larger test
// inputs.
const emuSMs = 2

const emuMsgLen = 512

func openDriver(ordinal int) (driver, error) {
	if ordinal != 0 {
		return nil, fmt.Errorf("%w: cuda:%d (the emulator has one device)", kernels.ErrNoDevice, ordinal)
	}
	d := &emuDriver{msg: (*C.char)(C.malloc(emuMsgLen))}
	for k := kernel(0); k < numKernels; k++ {
		name := C.CString(kernelSpecs[k].name)
		id := C.emu_kernel_id(name, C.int(kernelSpecs[k].nargs))
		C.free(unsafe.Pointer(name))
		switch id {
		case -1:
			return nil, fmt.Errorf("%w: emulator has no kernel %s", ErrDriver, k)
		case -2:
			return nil, fmt.Errorf("%w: kernel %s does not take %d parameters", ErrDriver, k, kernelSpecs[k].nargs)
		}
		d.ids[k] = id
	}
	return d, nil
}

func listDevices() ([]kernels.DeviceInfo, error) {
	i := emuInfo()
	return []kernels.DeviceInfo{{Backend: "cuda", Index: 0, Name: i.name, MemoryBytes: i.memory, Detail: "CPU emulator of kernels.cu (tag cudaemu)"}}, nil
}

func emuInfo() deviceInfo {
	return deviceInfo{name: "troupe CUDA emulator", memory: 1 << 30, major: 8, minor: 0, sms: emuSMs, maxGridY: 3, maxGridZ: 2}
}

func (d *emuDriver) info() deviceInfo { return emuInfo() }

func (d *emuDriver) alloc(bytes int64) (devPtr, error) {
	p := C.emu_alloc(C.size_t(bytes))
	if p == 0 {
		return 0, fmt.Errorf("emulator: out of host memory for %d bytes", bytes)
	}
	return devPtr(p), nil
}

func (d *emuDriver) free(p devPtr) error {
	C.emu_free(C.uintptr_t(p))
	return nil
}

func (d *emuDriver) htod(dst devPtr, src unsafe.Pointer, bytes int64) error {
	C.emu_htod(C.uintptr_t(dst), src, C.size_t(bytes))
	return nil
}

func (d *emuDriver) dtoh(dst unsafe.Pointer, src devPtr, bytes int64) error {
	C.emu_dtoh(dst, C.uintptr_t(src), C.size_t(bytes))
	return nil
}

func (d *emuDriver) dtod(dst, src devPtr, bytes int64) error {
	C.emu_dtod(C.uintptr_t(dst), C.uintptr_t(src), C.size_t(bytes))
	return nil
}

func (d *emuDriver) memset32(dst devPtr, v uint32, n int64) error {
	C.emu_memset32(C.uintptr_t(dst), C.uint32_t(v), C.size_t(n))
	return nil
}

func (d *emuDriver) launch(k kernel, grid, block [3]int, args []uint64) error {
	if len(args) != kernelSpecs[k].nargs {
		return fmt.Errorf("%s takes %d parameters, got %d", k, kernelSpecs[k].nargs, len(args))
	}
	// The arguments go to C memory: the emulator keeps a pointer to them
	// while fibers run.
	cargs := (*C.uint64_t)(C.malloc(C.size_t(8 * len(args))))
	defer C.free(unsafe.Pointer(cargs))
	copy(unsafe.Slice((*uint64)(unsafe.Pointer(cargs)), len(args)), args)
	rc := C.emu_launch(d.ids[k], C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]), cargs, d.msg, emuMsgLen)
	if rc != 0 {
		return fmt.Errorf("emulator: %s", C.GoString(d.msg))
	}
	return nil
}

func (d *emuDriver) sync() error { return nil }

func (d *emuDriver) close() error {
	C.free(unsafe.Pointer(d.msg))
	return nil
}

// emulated tells tests that kernels run on the CPU emulator (so that
// benchmarks, which would measure the emulator, skip).
const emulated = true

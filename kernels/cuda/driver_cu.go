//go:build cuda && !cudaemu

package cuda

import (
	"fmt"
	"unsafe"

	"github.com/troupe-ml/troupe/kernels"
	"gorgonia.org/cu"
)

// cuDriver is one GPU through the CUDA driver API: its primary context
// (shared with any other user of the device in this process, as the CUDA
// runtime shares it), one stream, and the module loaded from kernels.ptx.
type cuDriver struct {
	dev    cu.Device
	ctx    cu.CUContext
	stream cu.Stream
	mod    cu.Module
	fns    [numKernels]cu.Function
	inf    deviceInfo
}

// openDriver makes device ordinal's primary context current on the calling
// thread (the loop's, locked) and loads the kernels. The JIT compile of the
// PTX for the device's architecture happens here, once per process and
// device, taking about a second for kernels.ptx.
func openDriver(ordinal int) (driver, error) {
	n, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("%w: counting devices: %v", kernels.ErrNoDevice, err)
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("%w: cuda:%d (this machine has %d CUDA devices)", kernels.ErrNoDevice, ordinal, n)
	}
	dev, err := cu.GetDevice(ordinal)
	if err != nil {
		return nil, fmt.Errorf("%w: cuda:%d: %v", kernels.ErrNoDevice, ordinal, err)
	}
	inf, err := queryDevice(dev)
	if err != nil {
		return nil, err
	}
	d := &cuDriver{dev: dev, inf: inf}
	if d.ctx, err = dev.RetainPrimaryCtx(); err != nil {
		return nil, driverErr("retaining the primary context", err)
	}
	fail := func(what string, err error) (driver, error) {
		d.close()
		return nil, driverErr(what, err)
	}
	if err = cu.SetCurrentContext(d.ctx); err != nil {
		return fail("making the context current", err)
	}
	// Non-blocking: the stream does not wait for the legacy default stream,
	// which other code in the process (a library using the runtime API)
	// might use.
	if d.stream, err = cu.MakeStream(cu.NonBlocking); err != nil {
		return fail("creating a stream", err)
	}
	if d.mod, err = cu.LoadData(kernelsPTX); err != nil {
		return fail(fmt.Sprintf("loading kernels.ptx (PTX ISA 7.8 for sm_80; the driver must support CUDA 11.8 or newer) on %s sm_%d%d", inf.name, inf.major, inf.minor), err)
	}
	for k := kernel(0); k < numKernels; k++ {
		if d.fns[k], err = d.mod.Function(k.String()); err != nil {
			return fail("finding kernel "+k.String(), err)
		}
	}
	return d, nil
}

// queryDevice reads what the backend needs of dev; it needs no context.
func queryDevice(dev cu.Device) (deviceInfo, error) {
	var inf deviceInfo
	var err error
	if inf.name, err = dev.Name(); err != nil {
		return inf, driverErr("device name", err)
	}
	if inf.memory, err = dev.TotalMem(); err != nil {
		return inf, driverErr("device memory", err)
	}
	if inf.major, inf.minor, err = dev.ComputeCapability(); err != nil {
		return inf, driverErr("compute capability", err)
	}
	attrs, err := dev.Attributes(cu.MultiprocessorCount, cu.MaxGridDimY, cu.MaxGridDimZ)
	if err != nil {
		return inf, driverErr("device attributes", err)
	}
	inf.sms, inf.maxGridY, inf.maxGridZ = attrs[0], attrs[1], attrs[2]
	return inf, nil
}

// listDevices is the registry's lister: every CUDA device, without opening
// a context.
func listDevices() ([]kernels.DeviceInfo, error) {
	n, err := cu.NumDevices()
	if err != nil {
		return nil, driverErr("counting devices", err)
	}
	out := make([]kernels.DeviceInfo, 0, n)
	for i := 0; i < n; i++ {
		dev, err := cu.GetDevice(i)
		if err != nil {
			return out, driverErr(fmt.Sprintf("device %d", i), err)
		}
		inf, err := queryDevice(dev)
		if err != nil {
			return out, err
		}
		detail := fmt.Sprintf("sm_%d%d, %d SMs, CUDA driver %d", inf.major, inf.minor, inf.sms, cu.Version())
		if inf.tensorCores() {
			detail += ", TF32/BF16 tensor cores"
		}
		out = append(out, kernels.DeviceInfo{Backend: "cuda", Index: i, Name: inf.name, MemoryBytes: inf.memory, Detail: detail})
	}
	return out, nil
}

func (d *cuDriver) info() deviceInfo { return d.inf }

func (d *cuDriver) alloc(bytes int64) (devPtr, error) {
	p, err := cu.MemAlloc(bytes)
	return devPtr(p), err
}

func (d *cuDriver) free(p devPtr) error { return cu.MemFree(cu.DevicePtr(p)) }

func (d *cuDriver) htod(dst devPtr, src unsafe.Pointer, bytes int64) error {
	// From pageable memory the driver copies src to a staging buffer
	// before it returns, so src may change afterwards (CUDA's "API
	// synchronization behavior").
	return cu.MemcpyHtoDAsync(cu.DevicePtr(dst), src, bytes, d.stream)
}

func (d *cuDriver) dtoh(dst unsafe.Pointer, src devPtr, bytes int64) error {
	if err := cu.MemcpyDtoHAsync(dst, cu.DevicePtr(src), bytes, d.stream); err != nil {
		return err
	}
	return d.stream.Synchronize()
}

func (d *cuDriver) dtod(dst, src devPtr, bytes int64) error {
	return cu.MemcpyDtoDAsync(cu.DevicePtr(dst), cu.DevicePtr(src), bytes, d.stream)
}

func (d *cuDriver) memset32(dst devPtr, v uint32, n int64) error {
	return cu.MemsetD32Async(cu.DevicePtr(dst), uint(v), n, d.stream)
}

func (d *cuDriver) launch(k kernel, grid, block [3]int, args []uint64) error {
	// cu copies 8 bytes from each parameter pointer into C memory; every
	// argument is one uint64 word (launch.go).
	params := make([]unsafe.Pointer, len(args))
	for i := range args {
		params[i] = unsafe.Pointer(&args[i])
	}
	return d.fns[k].Launch(grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, d.stream, params)
}

func (d *cuDriver) sync() error { return d.stream.Synchronize() }

// close releases what openDriver made, newest first; it also serves a
// partly opened driver.
func (d *cuDriver) close() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if d.mod != (cu.Module{}) {
		keep(d.mod.Unload())
	}
	if d.stream != (cu.Stream{}) {
		keep(d.stream.Destroy())
	}
	keep(cu.SetCurrentContext(cu.CUContext{}))
	keep(d.dev.ReleasePrimaryCtx())
	return first
}

// emulated tells tests that kernels run on a real GPU.
const emulated = false

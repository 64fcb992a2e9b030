//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/convert"
)

// Backend is the CUDA kernels backend for one GPU. Its methods follow
// kernels.Backend's contract: called from one goroutine at a time (any one,
// not necessarily locked to a thread), kernels asynchronous, device failures
// reported by the next Sync. Close releases the GPU.
type Backend struct {
	cfg  Config
	info deviceInfo
	loop *loop
	// maxBlocks and maxRowBlocks cap the grids (see grid1); fixed at open
	// from the SM count, so reduction orders depend on the input size only.
	maxBlocks, maxRowBlocks int
	closed                  bool

	// Owned by the loop goroutine.
	drv    driver
	alloc  *allocator
	devErr error // first driver failure; sticky
	// scratch: reduction partials (maxBlocks doubles), the reduction
	// result, the bad-index flag (code, position, value) and the
	// ArgmaxCorrect counter.
	partials, reduceOut, errFlag, count devPtr
}

var (
	_ kernels.Backend            = (*Backend)(nil)
	_ interface{ Close() error } = (*Backend)(nil)
)

func init() {
	kernels.Register("cuda", func(o kernels.Options) (kernels.Backend, error) {
		cfg := DefaultConfig()
		cfg.Device = o.Device
		return New(cfg)
	}, listDevices)
}

// New opens the GPU cfg.Device. It returns an error wrapping
// kernels.ErrNoDevice when there is no such GPU.
func New(cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	be := &Backend{cfg: cfg}
	l, err := startLoop(func() error {
		drv, err := openDriver(cfg.Device)
		if err != nil {
			return err
		}
		be.drv, be.info = drv, drv.info()
		be.maxBlocks = max(1, 8*be.info.sms)
		be.maxRowBlocks = max(1, 32*be.info.sms)
		be.alloc = newAllocator(drv, cfg.CacheLimitBytes)
		if err := be.allocScratch(); err != nil {
			be.alloc.releaseAll()
			drv.close()
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	be.loop = l
	return be, nil
}

// allocScratch allocates and zeroes the scratch words (on the loop).
func (be *Backend) allocScratch() error {
	parts := be.maxBlocks * 8
	all := int64(parts + reduceOutBytes + 4*errFlagWords + 4*countWords)
	blk, err := be.alloc.get(all)
	if err != nil {
		return err
	}
	be.partials = blk.ptr
	be.reduceOut = be.partials + devPtr(parts)
	be.errFlag = be.reduceOut + reduceOutBytes
	be.count = be.errFlag + 4*errFlagWords
	return be.drv.memset32(blk.ptr, 0, all/4)
}

// Close waits for queued work, frees every buffer of the backend (those not
// freed yet become invalid), and releases the GPU and the loop goroutine.
// It is idempotent.
func (be *Backend) Close() error {
	if be.closed {
		return nil
	}
	be.closed = true
	var err error
	be.loop.stop(func() {
		err = errors.Join(be.drv.sync(), be.alloc.releaseAll(), be.drv.close())
	})
	if err != nil {
		return fmt.Errorf("%w: closing: %v", ErrDriver, err)
	}
	return nil
}

// check panics when the backend is closed: its loop is gone.
func (be *Backend) check() {
	if be.closed {
		panic(ErrClosed.Error())
	}
}

func driverErr(what string, err error) error {
	return fmt.Errorf("%w: %s: %v", ErrDriver, what, err)
}

// Caps implements kernels.Backend.
func (be *Backend) Caps() kernels.Capabilities {
	simd := fmt.Sprintf("ptx sm_80 jit for sm_%d%d, fp32", be.info.major, be.info.minor)
	if be.tf32() {
		simd += "+tf32 mma"
	}
	return kernels.Capabilities{
		Device:      fmt.Sprintf("cuda:%d", be.cfg.Device),
		SIMD:        simd,
		Threads:     1,
		TensorCores: be.tf32(),
		MemoryBytes: be.info.memory,
	}
}

// tf32 reports whether large GEMMs take the TF32 tensor-core path.
func (be *Backend) tf32() bool { return be.cfg.TF32 && be.info.tensorCores() }

// Config returns the configuration the backend was opened with.
func (be *Backend) Config() Config { return be.cfg }

// Alloc implements kernels.Backend. It panics when the device is out of
// memory even after the cache was released.
func (be *Backend) Alloc(n int) kernels.Buffer {
	p, blk := be.allocBytes("Alloc", n)
	return &Buf{be: be, ptr: p, n: n, blk: blk}
}

// AllocIndex implements kernels.Backend.
func (be *Backend) AllocIndex(n int) kernels.Index {
	p, blk := be.allocBytes("AllocIndex", n)
	return &Ids{be: be, ptr: p, n: n, blk: blk}
}

// allocBytes allocates n zeroed 4-byte words (the name is historical).
func (be *Backend) allocBytes(op string, n int) (devPtr, *block) {
	be.check()
	if n < 0 {
		panic(fmt.Sprintf("kernels/cuda: %s: negative length %d", op, n))
	}
	if n == 0 {
		return 0, &block{}
	}
	var blk *block
	var err error
	be.loop.call(func() {
		if blk, err = be.alloc.get(int64(n) * 4); err != nil {
			return
		}
		if e := be.drv.memset32(blk.ptr, 0, int64(n)); e != nil && be.devErr == nil {
			be.devErr = driverErr("zeroing", e)
		}
	})
	if err != nil {
		panic(fmt.Sprintf("kernels/cuda: %s(%d): %v", op, n, err))
	}
	return blk.ptr, blk
}

// Free implements kernels.Backend: the memory goes back to the cache.
func (be *Backend) Free(b kernels.Buffer) {
	d := be.anyBuf("Free", b)
	if d.view {
		panic("kernels/cuda: Free of a View; free the buffer it views")
	}
	be.release(d.blk)
}

// FreeIndex implements kernels.Backend.
func (be *Backend) FreeIndex(x kernels.Index) {
	be.release(be.ids("FreeIndex", x).blk)
}

func (be *Backend) release(blk *block) {
	blk.freed = true
	if blk.class == 0 {
		return
	}
	be.loop.post(func() {
		if err := be.alloc.put(blk); err != nil && be.devErr == nil {
			be.devErr = driverErr("freeing", err)
		}
	})
}

// View implements kernels.Backend: an address offset into b, no allocation.
func (be *Backend) View(b kernels.Buffer, off, n int) kernels.Buffer {
	d := be.anyBuf("View", b)
	if off < 0 || n < 0 || off+n > d.n {
		panic(fmt.Sprintf("kernels/cuda: View: [%d, %d) is outside a buffer of %d", off, off+n, d.n))
	}
	return &Buf{be: be, ptr: d.ptr + devPtr(d.dt.Size()*off), n: n, dt: d.dt, blk: d.blk, view: true}
}

// Upload implements kernels.Backend.
func (be *Backend) Upload(dst kernels.Buffer, src []float32) {
	d := be.anyBuf("Upload", dst)
	mustLen("Upload", "src", len(src), d.n)
	if d.n == 0 {
		return
	}
	if d.dt != kernels.F32 {
		h := make([]uint16, d.n)
		convert.ToLow(d.dt, h, src)
		be.htod("Upload", d.ptr, unsafe.Pointer(&h[0]), int64(2*d.n))
		return
	}
	be.htod("Upload", d.ptr, unsafe.Pointer(&src[0]), int64(4*d.n))
}

// UploadIndex implements kernels.Backend.
func (be *Backend) UploadIndex(dst kernels.Index, src []int32) {
	d := be.ids("UploadIndex", dst)
	mustLen("UploadIndex", "src", len(src), d.n)
	if d.n == 0 {
		return
	}
	be.htod("UploadIndex", d.ptr, unsafe.Pointer(&src[0]), int64(4*d.n))
}

// htod copies host memory to the device and waits until the driver no
// longer needs src (pageable memory is staged before the call returns).
func (be *Backend) htod(op string, dst devPtr, src unsafe.Pointer, bytes int64) {
	be.check()
	be.loop.call(func() {
		if be.devErr != nil {
			return
		}
		if err := be.drv.htod(dst, src, bytes); err != nil {
			be.devErr = driverErr(op, err)
		}
	})
}

// Download implements kernels.Backend. It waits for the kernels queued
// before it; after a device failure it leaves dst as it is (Sync reports
// the failure).
func (be *Backend) Download(dst []float32, src kernels.Buffer) {
	s := be.anyBuf("Download", src)
	mustLen("Download", "dst", len(dst), s.n)
	if s.n == 0 {
		return
	}
	if s.dt != kernels.F32 {
		h := make([]uint16, s.n)
		be.dtoh("Download", unsafe.Pointer(&h[0]), s.ptr, int64(2*s.n))
		convert.FromLow(s.dt, dst, h)
		return
	}
	be.dtoh("Download", unsafe.Pointer(&dst[0]), s.ptr, int64(4*s.n))
}

func (be *Backend) dtoh(op string, dst unsafe.Pointer, src devPtr, bytes int64) {
	be.check()
	be.loop.call(func() {
		if be.devErr != nil {
			return
		}
		if err := be.drv.dtoh(dst, src, bytes); err != nil {
			be.devErr = driverErr(op, err)
		}
	})
}

// Copy implements kernels.Backend.
func (be *Backend) Copy(dst, src kernels.Buffer) {
	d, s := be.anyBuf("Copy", dst), be.anyBuf("Copy", src)
	mustLen("Copy", "src", s.n, d.n)
	if d.dt != s.dt {
		panic(fmt.Sprintf("kernels/cuda: Copy: a %v buffer into a %v one (Convert converts)", s.dt, d.dt))
	}
	if d.n == 0 {
		return
	}
	be.check()
	be.loop.post(func() {
		if be.devErr != nil {
			return
		}
		if err := be.drv.dtod(d.ptr, s.ptr, int64(d.dt.Size()*d.n)); err != nil {
			be.devErr = driverErr("Copy", err)
		}
	})
}

// Fill implements kernels.Backend with a 32-bit memset of v's bits (a
// kernel storing v rounded, for 16-bit buffers).
func (be *Backend) Fill(x kernels.Buffer, v float32) {
	d := be.anyBuf("Fill", x)
	if d.n == 0 {
		return
	}
	if d.dt != kernels.F32 {
		h := []uint16{0}
		convert.ToLow(d.dt, h, []float32{v})
		be.launch1(kFill16, d.n, argInt(d.n), d.arg(), uint64(h[0]))
		return
	}
	be.memset(d.ptr, math.Float32bits(v), d.n)
}

func (be *Backend) memset(p devPtr, v uint32, n int) {
	be.check()
	be.loop.post(func() {
		if be.devErr != nil {
			return
		}
		if err := be.drv.memset32(p, v, int64(n)); err != nil {
			be.devErr = driverErr("memset", err)
		}
	})
}

// Sync implements kernels.Backend: it waits for the queued work and reports
// the first driver failure (for good: a CUDA context does not recover from
// one), or else an id or target a kernel found out of range since the last
// Sync.
func (be *Backend) Sync() error {
	if be.closed {
		return ErrClosed
	}
	var err error
	be.loop.call(func() {
		if be.devErr == nil {
			if e := be.drv.sync(); e != nil {
				be.devErr = driverErr("sync", e)
			}
		}
		if be.devErr != nil {
			err = be.devErr
			return
		}
		var flag [errFlagWords]int32
		if e := be.drv.dtoh(unsafe.Pointer(&flag[0]), be.errFlag, 4*errFlagWords); e != nil {
			be.devErr = driverErr("reading the error flag", e)
			err = be.devErr
			return
		}
		if flag[0] != 0 {
			err = badIndexErr(flag)
			if e := be.drv.memset32(be.errFlag, 0, errFlagWords); e != nil {
				be.devErr = driverErr("clearing the error flag", e)
			}
		}
	})
	return err
}

// badIndexErr describes the flag a kernel set.
func badIndexErr(flag [errFlagWords]int32) error {
	what := map[int32]string{
		errCodeEmb:    "Embedding: ids[%d] = %d outside the table",
		errCodeEmbBwd: "EmbeddingBackward: ids[%d] = %d outside the table",
		errCodeXent:   "SoftmaxCrossEntropy: targets[%d] = %d, beyond the classes",
		errCodeArgmax: "ArgmaxCorrect: targets[%d] = %d, beyond the classes",
	}[flag[0]]
	if what == "" {
		return fmt.Errorf("%w: unknown code %d", ErrBadIndex, flag[0])
	}
	return fmt.Errorf("%w: "+what, ErrBadIndex, flag[1], flag[2])
}

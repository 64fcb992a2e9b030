//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/kernels/cpu"
)

// mustPanic returns the panic message of f, failing the test if f returns.
func mustPanic(t *testing.T, what string, f func()) string {
	t.Helper()
	msg := func() (msg string) {
		defer func() { msg = fmt.Sprint(recover()) }()
		f()
		return "<nil>"
	}()
	if msg == "<nil>" {
		t.Errorf("%s did not panic", what)
	}
	return msg
}

func TestRegistered(t *testing.T) {
	be, err := kernels.Open("cuda", kernels.Options{})
	if err != nil {
		t.Fatalf(`kernels.Open("cuda"): %v`, err)
	}
	if c, ok := be.(interface{ Close() error }); !ok {
		t.Errorf("%T has no Close", be)
	} else if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := kernels.Open("cuda", kernels.Options{Device: 1 << 20}); !errors.Is(err, kernels.ErrNoDevice) {
		t.Errorf("Open of device 1<<20: err %v, want kernels.ErrNoDevice", err)
	}
	devs, err := kernels.Devices()
	if err != nil {
		t.Fatalf("Devices: %v", err)
	}
	found := false
	for _, d := range devs {
		found = found || (d.Backend == "cuda" && d.Name != "" && d.MemoryBytes > 0)
	}
	if !found {
		t.Errorf("Devices() = %+v: no cuda device with a name and memory", devs)
	}
}

// TestBufferMisuse: the host-side checks that keep a kernel from touching
// memory it does not own.
func TestBufferMisuse(t *testing.T) {
	be := open(t, false)
	other := cpu.New(1)
	b := be.Alloc(10)
	v := be.View(b, 2, 5)
	mustPanic(t, "Free of a View", func() { be.Free(v) })
	mustPanic(t, "View beyond the buffer", func() { be.View(b, 8, 5) })
	mustPanic(t, "a CPU buffer", func() { be.Scale(other.Alloc(3), 2) })
	low := be.AllocAs(10, kernels.BF16)
	mustPanic(t, "a bf16 buffer to an fp32 kernel", func() { be.Scale(low, 2) })
	mustPanic(t, "Copy between types", func() { be.Copy(b, low) })
	mustPanic(t, "Gemm of bf16 and fp32", func() {
		be.Gemm(kernels.GemmArgs{M: 2, N: 5, K: 2, Alpha: 1}, low, be.View(b, 0, 10), be.View(b, 0, 10))
	})
	mustPanic(t, "Gemm of bf16 and fp16", func() {
		be.Gemm(kernels.GemmArgs{M: 2, N: 5, K: 2, Alpha: 1}, low, be.AllocAs(10, kernels.F16), be.View(b, 0, 10))
	})
	be.Free(low)
	be.Free(b)
	mustPanic(t, "Scale after Free", func() { be.Scale(b, 2) })
	mustPanic(t, "Scale of a View after Free", func() { be.Scale(v, 2) })
	if err := be.Sync(); err != nil {
		t.Errorf("Sync: %v", err)
	}
}

// TestBadIndexReportedBySync: ids live on the device, so an id outside the
// table is found by the kernel, skipped (zeros gathered), and reported once
// by the next Sync, naming the position and the id.
func TestBadIndexReportedBySync(t *testing.T) {
	be := open(t, false)
	table := be.Alloc(4 * 3)
	be.Fill(table, 1)
	ids := be.AllocIndex(3)
	be.UploadIndex(ids, []int32{0, 7, 1})
	y := be.Alloc(3 * 3)
	be.Embedding(y, table, ids)
	err := be.Sync()
	if !errors.Is(err, ErrBadIndex) || !strings.Contains(err.Error(), "ids[1] = 7") {
		t.Fatalf("Sync after a bad id: %v, want ErrBadIndex naming ids[1] = 7", err)
	}
	got := make([]float32, 9)
	be.Download(got, y)
	if want := []float32{1, 1, 1, 0, 0, 0, 1, 1, 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("y = %v, want %v", got, want)
	}
	if err := be.Sync(); err != nil {
		t.Errorf("second Sync: %v, want nil (reported once)", err)
	}
	logits, tg := be.Alloc(2*4), be.AllocIndex(2)
	be.UploadIndex(tg, []int32{1, 4})
	be.SoftmaxCrossEntropy(be.Alloc(2), nil, logits, tg, 1)
	if err := be.Sync(); !errors.Is(err, ErrBadIndex) || !strings.Contains(err.Error(), "targets[1] = 4") {
		t.Errorf("Sync after a bad target: %v, want ErrBadIndex naming targets[1] = 4", err)
	}
}

// TestClose: Close frees everything and ends the loop goroutine (goleak in
// TestMain checks it is gone); it is idempotent; afterwards Sync reports
// ErrClosed and other methods panic.
func TestClose(t *testing.T) {
	be, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	b := be.Alloc(100)
	be.Fill(b, 3)
	if err := be.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := be.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := be.Sync(); !errors.Is(err, ErrClosed) {
		t.Errorf("Sync after Close: %v, want ErrClosed", err)
	}
	mustPanic(t, "Alloc after Close", func() { be.Alloc(1) })
	if msg := mustPanic(t, "Fill of a buffer after Close", func() { be.Fill(b, 1) }); !strings.Contains(msg, "closed") {
		t.Errorf("Fill after Close panicked with %q, want it to say the backend is closed", msg)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{Device: -1}, {TF32MinDim: -1}, {CacheLimitBytes: -1}} {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("Validate(%+v) = %v, want ErrConfig", c, err)
		}
	}
	c := Config{}
	if err := c.Validate(); err != nil || c.TF32MinDim != 64 {
		t.Errorf("Validate of the zero Config: %v, TF32MinDim %d; want nil, 64", err, c.TF32MinDim)
	}
}

package checkpoint

import (
	"errors"
	"sync"
	"testing"
)

// gateFS blocks the first Create until release is closed, so a test can
// hold a background write in flight without timing.
type gateFS struct {
	FS
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func newGateFS(inner FS) *gateFS {
	return &gateFS{FS: inner, entered: make(chan struct{}), release: make(chan struct{})}
}

func (g *gateFS) Create(name string) (File, error) {
	g.once.Do(func() {
		close(g.entered)
		<-g.release
	})
	return g.FS.Create(name)
}

func captureStep(m *model, step int64) func(*Snapshot) error {
	return func(s *Snapshot) error {
		src := m.snapshot(step, 2, 1, []int{0, len(m.params)})
		s.Meta = src.Meta
		for _, t := range src.Tensors {
			s.Add(t)
		}
		return nil
	}
}

func TestAsyncSaverWaits(t *testing.T) {
	m := smallModel()
	fsys := NewMemFS()
	var written []WriteResult
	a, err := NewAsyncSaver(fsys, SaverConfig{Dir: "ckpt", Keep: 2}, WithOnWritten(func(r WriteResult) { written = append(written, r) }))
	if err != nil {
		t.Fatal(err)
	}
	for step := int64(1); step <= 4; step++ {
		st, err := a.Save(captureStep(m, step))
		if err != nil {
			t.Fatal(err)
		}
		if st.Skipped || st.Step != step {
			t.Fatalf("step %d: %+v", step, st)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if len(written) != 4 || written[3].Step != 4 || written[3].Bytes == 0 || written[3].Err != nil {
		t.Fatalf("results %+v", written)
	}
	if step, err := Latest(fsys, "ckpt"); err != nil || step != 4 {
		t.Fatalf("latest %d %v", step, err)
	}
	if names, _ := fsys.List("ckpt"); len(names) != 3 {
		t.Fatalf("keep 2 left %v", names)
	}
	if _, err := a.Save(captureStep(m, 5)); !errors.Is(err, ErrClosed) {
		t.Fatalf("save after close: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// TestAsyncSaverSkips holds the first write in flight: a second Save skips
// without taking a snapshot, and once the write is done saving works again.
func TestAsyncSaverSkips(t *testing.T) {
	m := smallModel()
	mem := NewMemFS()
	g := newGateFS(mem)
	a, err := NewAsyncSaver(g, SaverConfig{Dir: "ckpt", WhenBusy: SkipWhenBusy})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Save(captureStep(m, 1)); err != nil {
		t.Fatal(err)
	}
	<-g.entered
	called := false
	st, err := a.Save(func(*Snapshot) error { called = true; return nil })
	if err != nil || !st.Skipped || called {
		t.Fatalf("busy save: %+v %v, capture called %v", st, err, called)
	}
	close(g.release)
	if err := a.Wait(); err != nil {
		t.Fatal(err)
	}
	if a.Last().Step != 1 || a.Last().Dir == "" {
		t.Fatalf("last %+v", a.Last())
	}
	if st, err := a.Save(captureStep(m, 2)); err != nil || st.Skipped {
		t.Fatalf("idle save: %+v %v", st, err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if step, _ := Latest(mem, "ckpt"); step != 2 {
		t.Fatalf("latest %d", step)
	}
}

// TestAsyncSaverErrors: a failed write is reported by the next call, which
// then takes no snapshot; the call after retries and succeeds. Saving the
// latest step again is not an error.
func TestAsyncSaverErrors(t *testing.T) {
	m := smallModel()
	mem := NewMemFS()
	a, err := NewAsyncSaver(NewFaultFS(mem, Fault{Op: OpCreate, N: 1, Mode: Fail}), SaverConfig{Dir: "ckpt"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Save(captureStep(m, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Save(captureStep(m, 2)); !errors.Is(err, ErrInjected) {
		t.Fatalf("the failed write was not reported: %v", err)
	}
	if _, err := a.Save(captureStep(m, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Save(captureStep(m, 2)); err != nil {
		t.Fatal(err)
	}
	if err := a.Wait(); err != nil {
		t.Fatal(err)
	}
	if !a.Last().AlreadyCommitted {
		t.Fatalf("re-saving the latest step: %+v", a.Last())
	}
	capErr := errors.New("device lost")
	if _, err := a.Save(func(*Snapshot) error { return capErr }); err != capErr {
		t.Fatalf("capture error: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestSaverConfig(t *testing.T) {
	if err := DefaultSaverConfig("d").Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []SaverConfig{{}, {Dir: "d", Keep: -1}, {Dir: "d", WhenBusy: 7}} {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if _, err := NewAsyncSaver(OSFS{}, SaverConfig{}); !errors.Is(err, ErrConfig) {
		t.Fatal(err)
	}
	if WaitWhenBusy.String() != "wait" || SkipWhenBusy.String() != "skip" {
		t.Fatal("policy names")
	}
}

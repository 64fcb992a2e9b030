package cpu

import (
	"strings"
	"testing"
)

func TestSerial(t *testing.T) {
	for _, tc := range []struct {
		threads, n, grain int
		want              bool
	}{
		{1, 1 << 30, 1, true},     // one thread never splits
		{2, 0, 1, true},           // nothing to split
		{2, 1, 1, true},           // one item
		{2, 2, 1, false},          // two items of grain 1
		{4, 2*100 - 1, 100, true}, // under two grains
		{4, 2 * 100, 100, false},  // two grains
	} {
		if got := New(tc.threads).serial(tc.n, tc.grain); got != tc.want {
			t.Errorf("New(%d).serial(%d, %d) = %v, want %v", tc.threads, tc.n, tc.grain, got, tc.want)
		}
	}
}

func TestRowGrain(t *testing.T) {
	for _, tc := range []struct{ work, cols, want int }{
		{1000, 10, 100}, {1000, 3000, 1}, {1000, 0, 1000}, {7, 7, 1},
	} {
		if got := rowGrain(tc.work, tc.cols); got != tc.want {
			t.Errorf("rowGrain(%d, %d) = %d, want %d", tc.work, tc.cols, got, tc.want)
		}
	}
}

func TestRowsOf(t *testing.T) {
	if got := rowsOf("Op", "x", 12, 4); got != 3 {
		t.Errorf("rowsOf(12, 4) = %d, want 3", got)
	}
	if got := rowsOf("Op", "x", 0, 0); got != 0 {
		t.Errorf("rowsOf(0, 0) = %d, want 0", got)
	}
	mustPanicWith(t, "Op: x has 13 values, not a multiple of 4 columns", func() { rowsOf("Op", "x", 13, 4) })
	mustPanicWith(t, "Op: x has 5 values but rows of 0 columns", func() { rowsOf("Op", "x", 5, 0) })
	mustPanicWith(t, "Op: y has length 2, want 3", func() { mustLenOf("Op", "y", 2, 3) })
}

// mustPanicWith fails t unless f panics with a message containing want.
func mustPanicWith(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Errorf("no panic, want one containing %q", want)
			return
		}
		if msg, _ := r.(string); !strings.Contains(msg, want) || !strings.HasPrefix(msg, "kernels/cpu: ") {
			t.Errorf("panic %q, want a kernels/cpu message containing %q", r, want)
		}
	}()
	f()
}

// mustNotAlloc fails t if f allocates: kernels run every training step, on
// small tensors too, and must not feed the garbage collector.
func mustNotAlloc(t *testing.T, name string, f func()) {
	t.Helper()
	if n := testing.AllocsPerRun(5, f); n != 0 {
		t.Errorf("%s: %v allocations per call, want 0", name, n)
	}
}

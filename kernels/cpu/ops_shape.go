package cpu

import "fmt"

// Work sizes (in elements touched) below which a kernel runs on the calling
// goroutine. Starting a goroutine and waiting for it costs a few µs, so a
// split only pays when each part has tens of µs of work: simple arithmetic
// runs at about 1 ns an element, exp/erf kernels at several ns.
const (
	grainSimple = 32 << 10
	grainExp    = 8 << 10
)

// serial reports whether parallelFor(n, be.threads, grain, …) would run one
// part. Kernels test it first and call their body directly, so that small
// calls allocate nothing: a closure handed to parallelFor escapes to the heap.
func (be *Backend) serial(n, grain int) bool {
	return be.threads <= 1 || n < 2*grain
}

// rowGrain is the number of rows of cols elements that makes up work
// elements, at least 1.
func rowGrain(work, cols int) int {
	if cols <= 0 {
		return work
	}
	return max(1, work/cols)
}

// rowsOf returns len / cols and panics unless cols divides n exactly.
func rowsOf(op, what string, n, cols int) int {
	if cols <= 0 {
		if n == 0 {
			return 0
		}
		panic(fmt.Sprintf("kernels/cpu: %s: %s has %d values but rows of %d columns", op, what, n, cols))
	}
	if n%cols != 0 {
		panic(fmt.Sprintf("kernels/cpu: %s: %s has %d values, not a multiple of %d columns", op, what, n, cols))
	}
	return n / cols
}

// mustLenOf panics unless got == want, naming the operand.
func mustLenOf(op, what string, got, want int) {
	if got != want {
		panic(fmt.Sprintf("kernels/cpu: %s: %s has length %d, want %d", op, what, got, want))
	}
}

package cpu

import "sync"

// parallelFor splits [0, n) into at most threads contiguous ranges of at
// least grain items and runs body on each, the last range on the calling
// goroutine. It returns when every range is done, so the goroutines it starts
// never outlive the call.
func parallelFor(n, threads, grain int, body func(lo, hi int)) {
	if grain < 1 {
		grain = 1
	}
	parts := threads
	if maxParts := (n + grain - 1) / grain; parts > maxParts {
		parts = maxParts
	}
	if parts <= 1 {
		if n > 0 {
			body(0, n)
		}
		return
	}
	if teamRun(parts, func(p int) { body(p*n/parts, (p+1)*n/parts) }) {
		return
	}
	var wg sync.WaitGroup
	wg.Add(parts - 1)
	for p := 0; p < parts-1; p++ {
		lo, hi := p*n/parts, (p+1)*n/parts
		go func() {
			defer wg.Done()
			body(lo, hi)
		}()
	}
	body((parts-1)*n/parts, n)
	wg.Wait()
}

package cpu

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/internal/wait"
)

// TestTeamRunsEveryShareOnce: every share of every section runs exactly
// once, whoever runs it (a helper or the caller claiming what no helper
// took), also with sections started from several goroutines at once (one
// on the team, the others on goroutines of their own) and sections of
// different sizes back to back.
func TestTeamRunsEveryShareOnce(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				n := 2 + (g+i)%7
				counts := make([]atomic.Int32, n)
				runWorkers(n, func(w int) {
					counts[w].Add(1)
					if w%3 == 1 {
						time.Sleep(time.Duration(i%3) * time.Microsecond) // a slow share now and then
					}
				})
				for w := range counts {
					if c := counts[w].Load(); c != 1 {
						t.Errorf("goroutine %d section %d: share %d of %d ran %d times", g, i, w, n, c)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// TestTeamNested: a share that starts a parallel section of its own (the
// team is busy with the outer one) completes, and so does the outer.
func TestTeamNested(t *testing.T) {
	var inner atomic.Int64
	runWorkers(3, func(int) {
		parallelFor(1000, 2, 10, func(lo, hi int) { inner.Add(int64(hi - lo)) })
	})
	if inner.Load() != 3000 {
		t.Fatalf("inner sections covered %d items, want 3000", inner.Load())
	}
}

// TestTeamHelpersExit: once no section comes, the helpers park and then
// exit: the team holds no goroutine for long.
func TestTeamHelpersExit(t *testing.T) {
	runWorkers(4, func(int) {})
	if team.helpers.Load() == 0 {
		t.Fatal("a section of four shares started no helper")
	}
	if !wait.Until(5*time.Second, func() bool { return team.helpers.Load() == 0 }) {
		t.Fatalf("%d helpers still alive 5 s after the last section (they exit after %v idle)", team.helpers.Load(), teamSpin+teamIdle)
	}
}

package cpu

import (
	"sync"
	"sync/atomic"
	"time"
)

// The team runs the shares of parallel sections (parallelFor, runWorkers)
// on helper goroutines that stay awake between sections: a helper that
// finished its share spins for teamSpin waiting for the next section
// before it parks, and a parked one exits after teamIdle without work. A
// new goroutine per share, as before, had to be woken each time (an IPI
// and a VM exit here: 8 µs after a 20 µs gap, 30 µs after 0.5 ms),
// which a small model's kernels, 0.1–0.3 ms each, could not afford: two
// threads trained the default GPT no faster than one. OpenMP runtimes
// spin between regions for the same reason.
//
// The spinning is a loop of loads and PAUSE, not runtime.Gosched: a
// yield takes the scheduler's lock each time, and the two spinning
// goroutines' yields made the caller's own work between sections slower.
// A spin lasts at most teamSpin, far below the 10 ms after which the
// runtime would preempt it for another goroutine.
//
// The caller runs share 0 and then claims the shares no helper has
// claimed yet, so a section never waits for a helper to wake: helpers only
// take work off the caller. One section runs on the team at a time; a
// section that finds it busy (another backend's, in the same process)
// starts goroutines as before.
const (
	teamSpin = 200 * time.Microsecond
	teamIdle = 20 * time.Millisecond
	// teamMaxShares bounds a section's shares (the claim word's 16 bits).
	teamMaxShares = 1 << 15
)

var team struct {
	mu   sync.Mutex // held by the caller of the section in progress
	gen  uint64     // sections begun (under mu)
	body func(w int)
	// claim is gen<<32 | shares<<16 | claimed: the section's generation,
	// its number of shares (share 0 the caller's) and how many of shares
	// 1… are claimed. Claims go by compare-and-swap on the whole word, so
	// a claim made for one section never counts against another.
	claim   atomic.Uint64
	done    atomic.Int32 // shares 1… finished
	want    atomic.Int32 // shares − 1
	helpers atomic.Int32 // helper goroutines alive
	parked  atomic.Int32 // of those, parked
	wake    chan struct{}

	cmu     sync.Mutex // the caller's wait once it stops spinning
	cond    sync.Cond
	waiting bool
}

func init() {
	team.wake = make(chan struct{}, 256)
	team.cond.L = &team.cmu
}

// teamRun runs body(0) on the caller and body(1…n−1) on the team and the
// caller, and returns when all are done; false, having run nothing, when
// the team is busy with another section.
func teamRun(n int, body func(w int)) bool {
	if n < 2 || n > teamMaxShares || !team.mu.TryLock() {
		return false
	}
	defer team.mu.Unlock()
	team.gen++
	gen := team.gen & (1<<32 - 1)
	team.body = body
	team.done.Store(0)
	team.want.Store(int32(n - 1))
	team.claim.Store(gen<<32 | uint64(n)<<16)
	for h := team.helpers.Load(); h < int32(min(n-1, cap(team.wake))); h++ {
		team.helpers.Add(1)
		go teamHelper(gen)
	}
	for p := min(int(team.parked.Load()), n-1); p > 0; p-- {
		select {
		case team.wake <- struct{}{}:
		default:
		}
	}
	body(0)
	for w, ok := teamClaim(gen); ok; w, ok = teamClaim(gen) {
		body(w)
		teamFinish()
	}
	want := int32(n - 1)
	deadline := time.Now().Add(teamSpin)
	for i := 0; team.done.Load() < want; i++ {
		if i%64 != 63 || time.Now().Before(deadline) {
			spinPause()
			continue
		}
		team.cmu.Lock()
		team.waiting = true
		for team.done.Load() < want {
			team.cond.Wait()
		}
		team.waiting = false
		team.cmu.Unlock()
	}
	return true
}

// teamClaim claims an unclaimed share of section gen.
func teamClaim(gen uint64) (int, bool) {
	for {
		v := team.claim.Load()
		shares, claimed := int(v>>16&0xffff), int(v&0xffff)
		if v>>32 != gen || claimed+1 >= shares {
			return 0, false
		}
		if team.claim.CompareAndSwap(v, v+1) {
			return claimed + 1, true
		}
	}
}

// teamFinish counts a share done and wakes a caller waiting for the last.
func teamFinish() {
	if team.done.Add(1) == team.want.Load() {
		team.cmu.Lock()
		if team.waiting {
			team.cond.Broadcast()
		}
		team.cmu.Unlock()
	}
}

// teamHelper is a helper goroutine, started for section gen.
func teamHelper(gen uint64) {
	defer team.helpers.Add(-1)
	idle := time.NewTimer(teamIdle)
	defer idle.Stop()
	for {
		for w, ok := teamClaim(gen); ok; w, ok = teamClaim(gen) {
			team.body(w)
			teamFinish()
		}
		// spin for the next section, then park
		var next bool
		deadline := time.Now().Add(teamSpin)
		for i := 0; ; i++ {
			if g := team.claim.Load() >> 32; g != gen {
				gen, next = g, true
				break
			}
			if i%64 == 63 && !time.Now().Before(deadline) {
				break
			}
			spinPause()
		}
		if next {
			continue
		}
		team.parked.Add(1)
		idle.Reset(teamIdle)
		select {
		case <-team.wake:
			team.parked.Add(-1)
			gen = team.claim.Load() >> 32
		case <-idle.C:
			team.parked.Add(-1)
			return
		}
	}
}

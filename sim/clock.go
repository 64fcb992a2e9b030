package sim

import (
	"container/heap"
	"time"
)

// epoch is virtual time zero, as the cores see it.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// event is something that happens at a virtual time; seq orders events of
// the same time by when they were scheduled, so that a run is one total
// order.
type event struct {
	at  time.Duration
	seq uint64
	fn  func()
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	return e[i].at < e[j].at || e[i].at == e[j].at && e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// clock is the virtual clock and its queue of events.
type clock struct {
	now  time.Duration
	seq  uint64
	q    events
	runs int // events run
}

// after schedules fn d from now.
func (c *clock) after(d time.Duration, fn func()) {
	c.seq++
	heap.Push(&c.q, event{at: c.now + max(0, d), seq: c.seq, fn: fn})
}

// next runs the earliest event; false when none is left or the next one is
// past until.
func (c *clock) next(until time.Duration) bool {
	if len(c.q) == 0 || c.q[0].at > until {
		return false
	}
	e := heap.Pop(&c.q).(event)
	c.now = e.at
	c.runs++
	e.fn()
	return true
}

// time is the virtual time as a wall-clock time, for the cores.
func (c *clock) time() time.Time { return epoch.Add(c.now) }

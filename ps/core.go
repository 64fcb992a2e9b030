// Package ps is the pure core of asynchronous training with a parameter
// server (troupe train --sync async): which gradients the server takes.
//
// The server's parameters have a version, the number of updates applied
// to them. A worker computes a gradient on the parameters of some version
// (its base) while other workers' updates land; when the gradient arrives
// its staleness is the number of updates applied since its base. A
// gradient at most MaxStaleness updates old is applied (the version
// advances by one); an older one is rejected, and its samples are
// computed again on fresh parameters. This is the bounded-staleness rule
// of stale-synchronous parameter servers (Ho et al., 2013) taken per
// gradient: no update is ever computed on parameters more than
// MaxStaleness versions behind the ones it changes.
//
// Core decides and counts; it moves no bytes and starts nothing. The
// server that applies the updates and the workers that compute them are
// worker actors driven by the trainer (package train).
package ps

import (
	"errors"
	"fmt"
)

// ErrFuture is a base version the server has not reached: a gradient
// cannot be computed on parameters that do not exist yet.
var ErrFuture = errors.New("ps: gradient computed on a version the server has not reached")

// Core is the admission rule of one parameter server: its version, the
// staleness bound, and what it admitted and rejected.
type Core struct {
	maxStaleness int
	version      uint64
	// hist[s] counts the gradients admitted at staleness s (0…max).
	hist     []int64
	rejected int64
}

// New is a server's core at version (the updates already applied: a run
// resumed from a checkpoint starts at its step) with the staleness bound
// maxStaleness ≥ 0 (0: only gradients computed on the current parameters
// are taken, which is sequential SGD).
func New(version uint64, maxStaleness int) (*Core, error) {
	if maxStaleness < 0 {
		return nil, fmt.Errorf("ps: the staleness bound must be 0 or more, got %d", maxStaleness)
	}
	return &Core{maxStaleness: maxStaleness, version: version, hist: make([]int64, maxStaleness+1)}, nil
}

// Version is the number of updates applied so far.
func (c *Core) Version() uint64 { return c.version }

// MaxStaleness is the bound.
func (c *Core) MaxStaleness() int { return c.maxStaleness }

// Verdict is what Admit decided about one gradient.
type Verdict struct {
	// Staleness is the updates applied since the gradient's base.
	Staleness int
	// Admitted: the gradient is to be applied as update number Version
	// (1-based: the server's version after it).
	Admitted bool
	Version  uint64
}

// Admit decides about a gradient computed on version base. An admitted
// gradient must then be applied, and Applied called, before the next
// Admit: the server applies updates one at a time, in the order admitted.
func (c *Core) Admit(base uint64) (Verdict, error) {
	if base > c.version {
		return Verdict{}, fmt.Errorf("%w: base %d, server at %d", ErrFuture, base, c.version)
	}
	s := c.version - base
	if s > uint64(c.maxStaleness) {
		c.rejected++
		return Verdict{Staleness: int(min(s, 1<<31-1))}, nil
	}
	c.hist[s]++
	return Verdict{Staleness: int(s), Admitted: true, Version: c.version + 1}, nil
}

// Applied records that the last admitted gradient was applied: the
// version advances by one.
func (c *Core) Applied() { c.version++ }

// Histogram is the count of admitted gradients by staleness, index s for
// staleness s (a copy).
func (c *Core) Histogram() []int64 { return append([]int64(nil), c.hist...) }

// Rejected is the count of gradients rejected as too stale.
func (c *Core) Rejected() int64 { return c.rejected }

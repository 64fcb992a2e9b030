package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
)

// tpGroup is the nn.TPGroup of a tensor-parallel part: the collective
// group of the stage's shards in one replica, over host memory (the
// backend's own on the CPU, staging copies on a device). A failure is kept
// and turns later calls into no-ops until reset; the stepper checks it
// after every pass and fails the step with it.
type tpGroup struct {
	comm collective.Communicator
	be   kernels.Backend
	host kernels.HostMemory // nil: stage through scratch
	ctx  context.Context
	err  error
	// ring holds the rotated buffers of reduce-scatter and all-gather;
	// stage the host copies of device buffers.
	ring, stage []float32
	// busy is the time spent in the group's operations this step.
	busy time.Duration
}

func newTPGroup(comm collective.Communicator, be kernels.Backend) *tpGroup {
	g := &tpGroup{comm: comm, be: be}
	g.host, _ = be.(kernels.HostMemory)
	return g
}

// reset starts a step: operations run under ctx, with no error yet.
func (g *tpGroup) reset(ctx context.Context) {
	g.ctx, g.err, g.busy = ctx, nil, 0
}

func (g *tpGroup) Rank() int { return g.comm.Rank() }
func (g *tpGroup) Size() int { return g.comm.Size() }

// view returns b's values in host memory: b itself on the CPU, else a
// copy in the staging scratch (downloaded when download is set).
func (g *tpGroup) view(b kernels.Buffer, download bool) []float32 {
	if g.host != nil {
		return g.host.HostSlice(b)
	}
	g.stage = grow(g.stage, b.Len())
	if download {
		g.be.Download(g.stage, b)
	}
	return g.stage
}

// grow returns s resized to n values, reallocated when too small.
func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// run runs one operation, keeping its error.
func (g *tpGroup) run(what string, h *collective.Handle, t0 time.Time) {
	err := h.Wait()
	g.busy += time.Since(t0)
	if err != nil {
		g.err = fmt.Errorf("tensor-parallel %s: %w", what, err)
	}
}

// AllReduce implements nn.TPGroup.
func (g *tpGroup) AllReduce(x kernels.Buffer, op nn.TPReduce) {
	if g.err != nil {
		return
	}
	red := collective.Sum
	if op == nn.TPMax {
		red = collective.Max
	}
	v := g.view(x, true)
	t0 := time.Now()
	g.run("all-reduce", g.comm.AllReduce(g.ctx, v, red), t0)
	if g.host == nil && g.err == nil {
		g.be.Upload(x, v)
	}
}

// ReduceScatter implements nn.TPGroup. The ring leaves rank r holding
// chunk r+1 (collective.OwnedChunk), so the chunks go in rotated by one:
// chunk k of x is the ring's chunk k+1, and rank r receives its chunk r.
func (g *tpGroup) ReduceScatter(dst, x kernels.Buffer) {
	if g.err != nil {
		return
	}
	P, n := g.Size(), dst.Len()
	xs := g.view(x, true)
	g.ring = grow(g.ring, P*n)
	for k := range P {
		r := (k + 1) % P
		copy(g.ring[r*n:(r+1)*n], xs[k*n:(k+1)*n])
	}
	t0 := time.Now()
	g.run("reduce-scatter", g.comm.ReduceScatter(g.ctx, g.ring, collective.Sum), t0)
	if g.err != nil {
		return
	}
	own := collective.OwnedChunk(g.Rank(), P)
	g.land(dst, g.ring[own*n:(own+1)*n])
}

// AllGather implements nn.TPGroup, with ReduceScatter's rotation.
func (g *tpGroup) AllGather(dst, x kernels.Buffer) {
	if g.err != nil {
		return
	}
	P, n := g.Size(), x.Len()
	g.ring = grow(g.ring, P*n)
	own := collective.OwnedChunk(g.Rank(), P)
	copy(g.ring[own*n:(own+1)*n], g.view(x, true))
	t0 := time.Now()
	g.run("all-gather", g.comm.AllGather(g.ctx, g.ring), t0)
	if g.err != nil {
		return
	}
	out := g.view(dst, false)
	for k := range P {
		r := (k + 1) % P
		copy(out[k*n:(k+1)*n], g.ring[r*n:(r+1)*n])
	}
	if g.host == nil {
		g.be.Upload(dst, out)
	}
}

// land copies host values v into b.
func (g *tpGroup) land(b kernels.Buffer, v []float32) {
	if g.host != nil {
		copy(g.host.HostSlice(b), v)
		return
	}
	g.be.Upload(b, v)
}

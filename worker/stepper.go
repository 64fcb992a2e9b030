package worker

import (
	"context"
	"fmt"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/pipeline"
)

// stepper runs the worker's steps in one generation: its place in the
// mesh, its collective groups, the schedule, and the phases of its steps
// (phases.go), chosen when it is made.
type stepper struct {
	w      *Worker
	mesh   mesh.Mesh
	rank   int
	coord  mesh.Coord
	sched  *pipeline.Schedule
	cursor *pipeline.Cursor
	mbs    []micro

	// Links with the previous and the next stage (the same shard); the
	// tied embedding's first and last stage; the part's data-parallel
	// group; the replica's parts (the global gradient norm).
	actIn, actOut, gradIn, gradOut collective.Communicator
	tied, dp, pipe                 collective.Communicator
	groups                         []collective.Communicator

	hostMem kernels.HostMemory
	staging map[kernels.Buffer][]float32
	scratch nn.Tape
	norm    []float32
	partial []float32 // sequence-parallel partial gradients, gathered
	peak    int

	// The step's phases (openPhases): reduce sums the gradients over the
	// part's replicas, grads is what the optimizer reads of them, weights
	// where the weights live, tp the passes' tensor-parallel group; sums
	// completes the gradients after the schedule, in order.
	reduce  reduction
	grads   gradMemory
	weights weightMemory
	tp      tensorParallel
	sums    []gradSum
	// fwdHooks and bwdHooks are the passes' layer hooks (ZeRO-2's and
	// 3's; empty without).
	fwdHooks, bwdHooks nn.Hooks
	// lossFactor multiplies the loss gradient's scale (the replicas, when
	// each steps on its own gradient); everyMicro says that every rank
	// runs every micro-batch (planPhases).
	lossFactor float32
	everyMicro bool
	// normSum sums the squared gradient norm over the ranks it spans;
	// overflowAny the loss scaler's overflow findings over the world.
	normSum     func(ctx context.Context, sq float64, res *StepResult) (float64, error)
	overflowAny func(ctx context.Context, found float32, res *StepResult) (float32, error)

	// The state behind the phases: the gradient buckets (nil without
	// data parallelism), the tensor-parallel group (nil without), and the
	// part's ZeRO sharding (nil without it; zeroMoved says that forming
	// replaced the optimizer's shard).
	reducer   *reducer
	tpComm    collective.Communicator
	zero      *zero
	zeroMoved bool
	// updated says that the step in flight applied this worker's update.
	updated bool

	// comm is the generation's communicator and byKey its groups by
	// member list.
	comm  collective.Communicator
	byKey map[string]collective.Communicator
	// meter counts what the groups send; syncMeter what the groups over
	// the replicas send (the data-parallel and ZeRO groups).
	meter, syncMeter *collective.Meter
	// flag is the loss scaler's overflow flag, all-reduced every fp16 step.
	flag [1]float32
}

// SentBytes is what a rank sent in a step's collectives, by kind.
type SentBytes struct {
	AllReduce, ReduceScatter, AllGather, Broadcast int64
}

func sentOf(v map[collective.Kind]int64) SentBytes {
	return SentBytes{AllReduce: v[collective.KindAllReduce] + v[collective.KindNaiveAllReduce],
		ReduceScatter: v[collective.KindReduceScatter], AllGather: v[collective.KindAllGather],
		Broadcast: v[collective.KindBroadcast]}
}

// newStepper places w (holding the model part of rank's stage) at rank of
// m and opens its collective groups on comm.
func newStepper(w *Worker, m mesh.Mesh, rank int, comm collective.Communicator) (*stepper, error) {
	if m.PP != w.spec.PP() || m.TP != w.spec.TPSize() {
		return nil, fmt.Errorf("%w: a %v world for a model cut into %d stages of %d tensor-parallel shards", ErrConfig, m, w.spec.PP(), w.spec.TPSize())
	}
	if m.Size() > 1 && comm == nil {
		return nil, fmt.Errorf("%w: a world of %d ranks needs a communicator", ErrConfig, m.Size())
	}
	sched, err := w.spec.schedule()
	if err != nil {
		return nil, err
	}
	c := m.Coord(rank)
	cur, err := pipeline.NewCursor(sched, c.PP)
	if err != nil {
		return nil, err
	}
	s := &stepper{w: w, mesh: m, rank: rank, coord: c, sched: sched, cursor: cur, staging: map[kernels.Buffer][]float32{},
		mbs: make([]micro, sched.MicroBatches), comm: comm, byKey: map[string]collective.Communicator{}, meter: collective.NewMeter(), syncMeter: collective.NewMeter()}
	s.hostMem, _ = w.be.(kernels.HostMemory)
	if err := s.openGroups(); err != nil {
		s.release()
		return nil, err
	}
	if err := s.openPhases(planPhases(m, w.spec, w.model.Tied != nil)); err != nil {
		s.release()
		return nil, err
	}
	return s, nil
}

// group returns the communicator of the ordered member list ranks,
// opening it on first use. A group is named by its member list; the same
// list serves every purpose that needs it (with two stages the tied
// embedding and the norm share the activation link), which is sound
// because both members issue their operations on it in the same order.
func (s *stepper) group(ranks ...int) (collective.Communicator, error) {
	key := fmt.Sprint(ranks)
	if g, ok := s.byKey[key]; ok {
		return g, nil
	}
	g, err := s.comm.Group(ranks)
	if err != nil {
		return nil, fmt.Errorf("worker: group %v: %w", ranks, err)
	}
	g = s.meter.Wrap(g)
	s.byKey[key] = g
	s.groups = append(s.groups, g)
	return g, nil
}

// replicaGroup is group for a group over the part's replicas: what it
// sends is counted in syncMeter too.
func (s *stepper) replicaGroup(ranks ...int) (collective.Communicator, error) {
	g, err := s.group(ranks...)
	if err != nil {
		return nil, err
	}
	return s.syncMeter.Wrap(g), nil
}

// openGroups creates the part's communicator groups.
func (s *stepper) openGroups() error {
	m, c, self := s.mesh, s.coord, s.rank
	group := s.group
	at := func(stage int) int { return m.Rank(mesh.Coord{PP: stage, DP: c.DP, TP: c.TP}) }
	var err error
	if c.PP > 0 {
		if s.actIn, err = group(at(c.PP-1), self); err != nil {
			return err
		}
		if s.gradOut, err = group(self, at(c.PP-1)); err != nil {
			return err
		}
	}
	if c.PP < m.PP-1 {
		if s.actOut, err = group(self, at(c.PP+1)); err != nil {
			return err
		}
		if s.gradIn, err = group(at(c.PP+1), self); err != nil {
			return err
		}
	}
	if s.w.model.Tied != nil && m.PP > 1 {
		if s.tied, err = group(at(0), at(m.PP-1)); err != nil {
			return err
		}
	}
	if m.DP > 1 {
		if s.dp, err = s.replicaGroup(m.Group(mesh.DP, self)...); err != nil {
			return err
		}
	}
	if m.TP > 1 {
		if s.tpComm, err = group(m.Group(mesh.TP, self)...); err != nil {
			return err
		}
	}
	if m.Parts() > 1 && s.w.spec.ClipNorm > 0 {
		if s.pipe, err = group(m.Slice(mesh.DP, c.DP)...); err != nil {
			return err
		}
		s.norm = make([]float32, 1)
	}
	return nil
}

// release closes the groups and frees what the step machinery holds.
func (s *stepper) release() {
	for _, g := range s.groups {
		g.Close()
	}
	s.groups = nil
	for k := range s.mbs {
		mb := &s.mbs[k]
		for _, ix := range []kernels.Index{mb.ids, mb.tgt} {
			if ix != nil {
				s.w.be.FreeIndex(ix)
			}
		}
		if mb.vals != nil {
			s.w.be.Free(mb.vals)
		}
		s.mbs[k] = micro{}
	}
}

// host returns host memory holding b's values for a collective: b itself
// on a host backend, else a staging copy (downloaded when download is set).
func (s *stepper) host(b kernels.Buffer, download bool) []float32 {
	if s.hostMem != nil {
		return s.hostMem.HostSlice(b)
	}
	h, ok := s.staging[b]
	if !ok {
		h = make([]float32, b.Len())
		s.staging[b] = h
	}
	if download {
		s.w.be.Download(h, b)
	}
	return h
}

// landed copies a received staging buffer to the device.
func (s *stepper) landed(b kernels.Buffer) {
	if s.hostMem == nil {
		s.w.be.Upload(b, s.staging[b])
	}
}

package leader

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/failure"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// simMember is a simulated agent: what its worker holds, and the
// parameters as a version (the step whose update they include) and a
// perturbation.
type simMember struct {
	name      string
	h         worker.Holding
	built     int
	version   int
	undo      int // the version kept for an undo
	perturbed bool
	rank      int
	alive     bool
	ended     string
	// jobStep is the job's last step the member heard of (Progress, Form).
	jobStep int
}

func (m *simMember) checksum() uint64 {
	if m.h.Part < 0 {
		return 0
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d/%v", m.h.Part, m.version, m.perturbed)
	return h.Sum64()
}

// undoChecksum is the checksum the member holds after rolling back (form).
func (m *simMember) undoChecksum() uint64 {
	if m.h.Part < 0 || !m.h.Undo {
		return 0
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d/%v", m.h.Part, m.undo, false)
	return h.Sum64()
}

// deliver has the members answer the leader's pending call.
func (s *leaderSim) deliver(only []string) error {
	c := s.call
	if c == nil {
		return errors.New("no call pending")
	}
	replies := make([]any, len(c.Msgs))
	var lost []string
	for i, msg := range c.Msgs {
		m := s.members[s.world.Members[i].Name]
		if !m.alive || only != nil && !slices.Contains(only, m.name) {
			lost = append(lost, m.name)
			continue
		}
		r, err := s.answer(m, msg)
		if err != nil {
			fmt.Fprintf(&s.out, "  %s: %v\n", m.name, err)
			replies[i] = failedAnswer(msg, err)
			continue
		}
		replies[i] = r
	}
	if only != nil {
		fmt.Fprintf(&s.out, "delivered to %s only\n", strings.Join(only, ", "))
		return nil
	}
	s.call = nil
	var err error
	for i, r := range replies {
		if r == nil {
			continue
		}
		if ferr := r.(interface{ Failed() error }).Failed(); ferr != nil && err == nil {
			err = fmt.Errorf("member %s: %w", s.world.Members[i].Name, ferr)
		}
	}
	if len(lost) > 0 && err == nil {
		err = fmt.Errorf("%w: member %s", collectiveLost, strings.Join(lost, ", member "))
	}
	if c.Phase == PhaseForm && err == nil {
		s.formed = true
	}
	s.cores[s.leader].Replies(c.Gen, c.Phase, replies, err)
	s.drain(s.leader)
	return nil
}

var collectiveLost = failure.New(failure.PeerLost, "test: peer lost")

// deliverStale hands the answers to the call before the last commit to
// the node that made it, as if they came late: it must ignore them.
func (s *leaderSim) deliverStale() error {
	c := s.stale
	if c == nil {
		return errors.New("no stale call")
	}
	s.stale = nil
	replies := make([]any, len(c.Msgs))
	for i, msg := range c.Msgs {
		switch msg.(type) {
		case *workerpb.StatusRequest:
			replies[i] = &workerpb.Status{HeldPart: -1}
		case *workerpb.Form:
			replies[i] = &workerpb.Formed{}
		default:
			replies[i] = &workerpb.Finished{}
		}
	}
	for _, n := range s.alive() {
		s.cores[n].Replies(c.Gen, c.Phase, replies, nil)
		s.drain(n)
	}
	fmt.Fprintf(&s.out, "late answers to the %s call of generation %d delivered\n", c.Phase, c.Gen)
	return nil
}

func failedAnswer(msg any, err error) any {
	f := workerpb.FailureOf(err)
	switch msg.(type) {
	case *workerpb.Form:
		return &workerpb.Formed{Failure: f}
	case *workerpb.StatusRequest:
		return &workerpb.Status{Failure: f}
	}
	return &workerpb.Finished{Failure: f}
}

// answer is what member m makes of msg.
func (s *leaderSim) answer(m *simMember, msg any) (any, error) {
	switch r := msg.(type) {
	case *workerpb.StatusRequest:
		return &workerpb.Status{HeldPart: int32(m.h.Part), Applied: uint64(m.h.Applied), Cursor: uint64(m.h.Cursor),
			CanRollBack: m.h.Undo, World0: uint32(m.h.World0), Checksum: m.checksum(), UndoChecksum: m.undoChecksum(),
			HeldZeroGroup: uint32(m.h.ZeroGroup), HeldZeroShard: uint32(m.h.ZeroShard), JobStep: uint64(max(m.jobStep, m.h.Applied))}, nil
	case *workerpb.Form:
		return s.form(m, r)
	case *workerpb.Finish:
		m.ended = "finished"
		if r.Failure != nil {
			m.ended = "failed: " + r.Failure.Message
		}
		return &workerpb.Finished{Checksum: m.checksum()}, nil
	}
	return nil, fmt.Errorf("unexpected %T", msg)
}

// form applies a Form as the worker does, with parameters as versions.
func (s *leaderSim) form(m *simMember, r *workerpb.Form) (any, error) {
	m.jobStep = max(m.jobStep, int(r.Step))
	f, err := worker.FormOf(r)
	if err != nil {
		return nil, err
	}
	p, err := m.h.Plan(f, m.built)
	if err != nil {
		return nil, err
	}
	if p.RollBack {
		m.version, m.perturbed = m.undo, false
	}
	m.rank = f.Rank
	if p.Build >= 0 {
		m.built, m.version, m.perturbed = p.Build, 0, false
	}
	switch {
	case p.Restore > 0:
		if s.ckpt.Err != nil || s.ckpt.Step != p.Restore {
			return nil, fmt.Errorf("no checkpoint of step %d", p.Restore)
		}
		m.version, m.perturbed = p.Restore, false
	case p.Root >= 0 && p.Root != f.Rank:
		root := s.memberAt(r, p.Root)
		if root == nil || !root.alive {
			return nil, fmt.Errorf("%w: root %d", collectiveLost, p.Root)
		}
		m.version, m.perturbed = root.version, root.perturbed
	}
	m.h = p.Next
	return &workerpb.Formed{Checksum: m.checksum()}, nil
}

// memberAt is the member at mesh rank r of the form's generation.
func (s *leaderSim) memberAt(f *workerpb.Form, r int) *simMember {
	for _, n := range s.names() {
		if s.members[n].rank == r && s.inWorld(n) {
			return s.members[n]
		}
	}
	return nil
}

func (s *leaderSim) inWorld(n string) bool { return s.world.Rank(n) >= 0 }

// runTrain runs the leader's step loop.
func (s *leaderSim) runTrain(args map[string]string) error {
	o := s.train
	if o == nil {
		return errors.New("no step loop runs")
	}
	if v, ok := args["fail"]; ok {
		code, msg, _ := strings.Cut(strings.ReplaceAll(v, "_", " "), ":")
		c := failureCode(code)
		s.train = nil
		s.cores[s.leader].Trained(o.Gen, failure.Wrapf(c, "%s", msg))
		s.drain(s.leader)
		return nil
	}
	steps := s.cfg.Target
	if v, ok := args["steps"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return err
		}
		steps = n
	}
	var torn []string
	if v, ok := args["torn"]; ok {
		torn = strings.Split(v, ",")
	}
	l := o.Layout
	for k := 0; k < steps; k++ {
		var ranked []*simMember
		for _, i := range l.Members {
			ranked = append(ranked, s.members[s.world.Members[i].Name])
		}
		if ranked[0].h.Applied >= s.cfg.Target {
			break
		}
		last := k == steps-1
		for _, m := range ranked {
			if last && slices.Contains(torn, m.name) {
				continue
			}
			m.undo, m.h.Undo, m.h.UndoCursor = m.version, s.cfg.PP > 1 || s.cfg.ZeroGroup > 0, m.h.Cursor
			m.h.Applied++
			m.h.Cursor += data.Cursor(o.Batch)
			m.version++
		}
	}
	trained := s.members[s.world.Members[l.Members[0]].Name].h.Applied
	fmt.Fprintf(&s.out, "trained to step %d\n", trained)
	if steps > 0 {
		s.cores[s.leader].Progress()
		for _, wm := range s.world.Members {
			// Every member of the world hears of each step (standbys too).
			if m := s.members[wm.Name]; m.alive && len(torn) == 0 {
				m.jobStep = max(m.jobStep, trained)
			}
		}
	}
	s.formed = len(torn) == 0
	if v, ok := args["diverge"]; ok {
		// After those steps the replicas' checksums (--check-every) show
		// rank v apart.
		r, err := strconv.Atoi(v)
		if err != nil {
			return err
		}
		s.train = nil
		applied := s.members[s.world.Members[o.Layout.Members[r]].Name].h.Applied
		group := o.Layout.Mesh.Group(mesh.DP, r)
		like := group[0]
		if like == r {
			like = group[1]
		}
		s.cores[s.leader].Trained(o.Gen, fmt.Errorf("train: step %d: %w", applied, &DivergedError{Step: applied, Rank: r, Like: like}))
		s.drain(s.leader)
		return nil
	}
	if len(torn) == 0 && s.members[s.world.Members[l.Members[0]].Name].h.Applied >= s.cfg.Target {
		s.train = nil
		s.cores[s.leader].Trained(o.Gen, nil)
		s.drain(s.leader)
	}
	return nil
}

func failureCode(name string) failure.Code {
	for c := failure.Code(0); c.Valid(); c++ {
		if c.String() == name {
			return c
		}
	}
	return failure.Unknown
}

// checkpoint records a checkpoint of the newest step the members hold.
func (s *leaderSim) checkpoint() error {
	step := 0
	for _, m := range s.members {
		step = max(step, m.h.Applied)
	}
	if step == 0 {
		return errors.New("nothing trained")
	}
	s.ckpt = Checkpoint{Step: step, Cursor: data.Cursor(step * s.cfg.Batch)}
	fmt.Fprintf(&s.out, "checkpoint at step %d\n", step)
	return nil
}

// check asserts the invariants.
func (s *leaderSim) check() error {
	for _, m := range s.members {
		if m.h.Applied > s.cfg.Target {
			return fmt.Errorf("%s holds step %d, past the target %d", m.name, m.h.Applied, s.cfg.Target)
		}
	}
	if !s.formed || s.train == nil {
		return nil
	}
	s.formed = false // replicas agree once formed; a torn step is for the next generation to mend
	byStage := map[int]*simMember{}
	for _, i := range s.train.Layout.Members {
		m := s.members[s.world.Members[i].Name]
		if !m.alive {
			continue
		}
		if o := byStage[m.h.Part]; o != nil && (o.h.Applied != m.h.Applied || o.checksum() != m.checksum()) && !m.perturbed && !o.perturbed {
			return fmt.Errorf("%s and %s hold stage %d at steps %d and %d with different parameters", o.name, m.name, m.h.Part, o.h.Applied, m.h.Applied)
		}
		byStage[m.h.Part] = m
	}
	return nil
}

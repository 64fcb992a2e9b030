package train

import (
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/elastic"
	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// status asks this node's worker what it holds (after the request in
// flight).
func (a *agent) status() (*workerpb.Status, error) {
	res, err := a.sys.Root().RequestFuture(a.shell.PID(), &workerpb.StatusRequest{Checksum: true}, a.j.cfg.StepTimeout).Result()
	if err != nil {
		return nil, fmt.Errorf("train: this node's worker: %w", err)
	}
	st := res.(*workerpb.Status)
	return st, st.Failed()
}

// ownStatus asks this node's worker what it holds, without a checksum:
// it is idle between a generation's form and its first step, so it
// answers at once or not at all (salvageTimeout).
func (a *agent) ownStatus() (*workerpb.Status, error) {
	res, err := a.sys.Root().RequestFuture(a.shell.PID(), &workerpb.StatusRequest{}, salvageTimeout).Result()
	if err != nil {
		return nil, err
	}
	st := res.(*workerpb.Status)
	return st, st.Failed()
}

// summary is this node's report at the end.
func (a *agent) summary() *AgentSummary {
	sum := &AgentSummary{Stage: -1}
	st, err := a.status()
	if err != nil {
		a.log.Warn("reading this node's state", zap.Error(err))
		return sum
	}
	sum.Step, sum.Generation, sum.Checksum = int(st.Applied), a.node.World().Gen, fmt.Sprintf("%016x", st.Checksum)
	if st.Rank >= 0 {
		tp := max(1, a.j.cfg.TP)
		sum.Stage, sum.Shard = int(st.HeldPart)/tp, int(st.HeldPart)%tp
		if a.j.zeroShards() > 0 {
			sum.ZeroShard = int(st.HeldZeroShard)
		}
	}
	return sum
}

// finished ends the node's part when the job ended: its summary, and the
// job's failure as this node's error.
func (a *agent) finished(f *workerpb.Finish) (*AgentSummary, error) {
	sum := a.summary()
	if err := f.GetFailure().Err(); err != nil {
		sum.Error = err.Error()
		return sum, err
	}
	sum.Step = int(f.Step) // a member on standby holds an older step: the job's is the target
	a.log.Info("the job reached its target", zap.Uint64("step", f.Step))
	return sum, nil
}

// leave ends this node's part before the job's end: the step in flight
// finishes (the worker answers one request at a time), then the node
// leaves the membership, so that the others go on without it at once.
func (a *agent) leave(why string) (*AgentSummary, error) {
	a.gate.leaving.Store(true) // no step after the one in flight
	a.stopLeading()
	a.handOver()
	sum := a.summary()
	sum.Left = true
	start := time.Now()
	if err := a.node.Leave(5 * time.Second); err != nil {
		a.log.Warn("leave", zap.Error(err))
	}
	a.log.Info("left the job", zap.String("why", why), zap.Int("step", sum.Step), zap.Duration("leave", time.Since(start)))
	return sum, nil
}

// handOver gives the model part this node holds to a standby before it
// leaves, when no other member holds it (one replica of pipeline stages
// or tensor-parallel shards): the next generation then takes the part
// from that standby, instead of restoring the job from a checkpoint or
// losing it. The worker refuses steps already (the gate is leaving), so
// the other parts stay at the step this one holds. Best effort: on a
// failure the node leaves as it would without, and says why.
func (a *agent) handOver() {
	cfg, w := &a.j.cfg, a.formed
	if cfg.PP*max(1, cfg.TP) == 1 || a.j.zeroGroup(cfg.DP) > 0 || cfg.sync().Local() || a.async() ||
		w.DP != 1 || !slices.Contains(w.Members, a.ac.Name) || len(w.Standby) == 0 {
		return
	}
	var to elastic.Member
	for _, m := range a.node.Members() {
		if slices.Contains(w.Standby, m.Name) && m.ActorAddr != "" && (to.ID == "" || m.Name < to.Name) {
			to = m
		}
	}
	if to.ID == "" {
		a.log.Warn("no standby left to hand this node's model part to", zap.Strings("standby", w.Standby))
		return
	}
	start := time.Now()
	res, err := a.sys.Root().RequestFuture(a.shell.PID(), &worker.ExportRequest{}, a.j.cfg.StepTimeout).Result()
	if err == nil {
		err = res.(*worker.Exported).Err
	}
	if err != nil {
		a.log.Warn("handing this node's model part over", zap.Error(err))
		return
	}
	ex := res.(*worker.Exported)
	if ex.State.Hold.Applied == 0 {
		return // the seed's: nothing to lose
	}
	if err := a.sendPart(actor.NewPID(to.ActorAddr, worker.ActorName), ex); err != nil {
		a.log.Warn("handing this node's model part over", zap.String("to", to.Name), zap.Error(err))
		return
	}
	a.log.Info("model part handed over", zap.String("to", to.Name), zap.Int("part", ex.State.Hold.Part),
		zap.Int("step", ex.State.Hold.Applied), zap.Duration("took", time.Since(start)))
}

// handOverChunk is the most values one PartChunk carries (1 MiB), well
// under gRPC's message limit.
const handOverChunk = 1 << 18

// sendPart sends ex's part to the worker at pid, a chunk at a time, and
// checks that it then holds the same parameters.
func (a *agent) sendPart(pid *actor.PID, ex *worker.Exported) error {
	ps := ex.State
	lens := make([]uint64, len(ps.Bufs))
	for i, b := range ps.Bufs {
		lens[i] = uint64(len(b))
	}
	for b, buf := range ps.Bufs {
		for off := 0; off == 0 || off < len(buf); off += handOverChunk {
			end := min(off+handOverChunk, len(buf))
			m := &workerpb.PartChunk{Part: int32(ps.Hold.Part), Applied: uint64(ps.Hold.Applied), Cursor: uint64(ps.Hold.Cursor),
				World0: uint32(ps.Hold.World0), OptSteps: uint64(ps.Steps), Lens: lens, Buffer: uint32(b), Offset: uint64(off),
				Values: buf[off:end], Last: b == len(ps.Bufs)-1 && end == len(buf)}
			res, err := a.sys.Root().RequestFuture(pid, m, a.j.cfg.CollectiveTimeout).Result()
			if err != nil {
				return err
			}
			t, ok := res.(*workerpb.PartTaken)
			if !ok {
				return fmt.Errorf("train: %T answers a hand-over", res)
			}
			if err := t.Failed(); err != nil {
				return err
			}
			if m.Last && t.Checksum != ex.Checksum {
				return fmt.Errorf("train: the standby holds checksum %016x after the hand-over, this node %016x", t.Checksum, ex.Checksum)
			}
		}
	}
	return nil
}

package train

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/train/leader"
	"github.com/troupe-ml/troupe/worker"
)

// async reports whether the job trains asynchronously (Sync async).
func (a *agent) async() bool { return a.j.cfg.sync().Async() }

// asyncGeneration is generation g's asynchronous executor: this node's
// parameter servers (those it kept, or new ones formed from the order's
// checkpoint or the seed) and a replica for each member, formed by the
// core as a world of one.
func (a *agent) asyncGeneration(g *generation, o *leader.TrainOrder) (*asyncExecutor, error) {
	l := o.Layout
	if l.Source.Kind == worker.FromReplica && a.servers == nil {
		return nil, fmt.Errorf("train: generation %d continues from parameter servers this node does not hold", o.Gen)
	}
	if l.Source.Kind != worker.FromReplica {
		a.dropServers()
		s, err := startServers(g.ctx, a.sys, a.j, a.ckpt, 1, l.Step, l.Cursor, a.log)
		if err != nil {
			return nil, err
		}
		a.servers = s
	}
	a.kept = nil
	e, err := newAsyncExecutor(g.ctx, a.servers, len(g.pids), l.Step, &a.j.cfg, a.log)
	if err != nil {
		return nil, err
	}
	e.gen = o.Gen
	names := memberNames(g.world)
	for i, pid := range g.pids {
		rg, err := replicaGroup(a.sys, a.j, fmt.Sprintf("async-gen%d-%s", o.Gen, names[i]), "member "+names[i], o.Gen, pid, false, a.log)
		if err != nil {
			e.Close()
			return nil, err
		}
		e.add(i, rg)
	}
	g.async.Store(e)
	return e, nil
}

// settleAsync ends a generation's executor e: the servers are kept for
// the next generation this node leads when every step e began was applied
// (the sampler's cursor continues exactly after them), else dropped (the
// next generation continues from the latest checkpoint).
func (a *agent) settleAsync(e *asyncExecutor, o *leader.TrainOrder) {
	v, ok := e.settled()
	if err := e.Close(); err != nil {
		a.log.Warn("closing the replicas' groups", zap.Error(err))
	}
	if !ok {
		a.log.Warn("steps were begun and not applied: the parameter servers are dropped, the next generation continues from the latest checkpoint",
			zap.Uint64("generation", o.Gen), zap.Uint64("version", v))
		a.dropServers()
		return
	}
	l := o.Layout
	a.kept, a.keptGen = &leader.ServerState{Step: int(v), Cursor: l.Cursor + data.Cursor((int(v)-l.Step)*o.Batch)}, o.Gen
}

// dropServers stops this node's parameter servers, if any.
func (a *agent) dropServers() {
	a.kept = nil
	if a.servers == nil {
		return
	}
	if err := a.servers.Close(); err != nil {
		a.log.Warn("stopping the parameter servers", zap.Error(err))
	}
	a.servers = nil
}

// keepPending keeps the line of a step the loop could not report but that
// may count (see adoptedError).
func (a *agent) keepPending(err error) {
	var adopted *adoptedError
	if errors.As(err, &adopted) {
		m := adopted.Metrics
		a.pending = &m
	}
}

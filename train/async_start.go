package train

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/worker"
)

// startReplicaProcs starts the replicas of asynchronous training as worker
// processes (Config.Procs), adding their stops to stops.
func (e *asyncExecutor) startReplicaProcs(ctx context.Context, sys *actors.System, j *job, wp workerProcs, from int, cursor data.Cursor,
	group func(string, int, *actor.PID) (*groupExecutor, error), stops *[]func() error, log *zap.Logger) error {
	cfg := &j.cfg
	conf, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("train: encoding the worker config: %w", err)
	}
	e.procs = &replicaProcs{sys: sys, j: j, conf: conf, log: log, from: from, cursor: cursor, group: group, procs: &rankProcs{wp: wp}}
	// Stopped first (stops run last to first): the processes end before
	// the actor system that talks to them.
	*stops = append(*stops, e.procs.stop)
	for r := range cfg.DP {
		g, err := e.procs.start(ctx, r, 0, e.lose)
		if err != nil {
			return err
		}
		e.add(r, g)
	}
	log.Info("started replica processes", zap.Int("procs", cfg.DP))
	return nil
}

// startLocalReplicas starts the replicas of asynchronous training as
// worker actors of this process, each with share of the kernel threads,
// adding their stops to stops.
func (e *asyncExecutor) startLocalReplicas(ctx context.Context, sys *actors.System, j *job, servers *groupExecutor, share, from int, cursor data.Cursor,
	group func(string, int, *actor.PID) (*groupExecutor, error), stops *[]func() error, log *zap.Logger) error {
	cfg := &j.cfg
	world, _ := mesh.New(cfg.DP, 1, 1)
	pids, closers, err := spawnLocal(sys, j, world, servers.mesh.Size(), share, j.replicaSpec, nil, nil, log)
	*stops = append(*stops, closers...)
	if err != nil {
		return err
	}
	for r := range cfg.DP {
		g, err := group(fmt.Sprintf("replica %d", r), 0, pids[r])
		if err != nil {
			return err
		}
		if err := formAll(ctx, g, j, from, cursor, nil); err != nil {
			g.group.Close()
			return err
		}
		e.add(r, g)
	}
	return nil
}

// replicaGroup drives one replica's worker at pid (a world of one, of
// generation gen), named name; inProcess: an actor of this process, which
// hands its weights over in memory. A replica is never checkpointed (the
// servers are) and a step of it that fails is lost (the servers apply
// only gradients that came).
func replicaGroup(sys *actors.System, j *job, group, name string, gen uint64, pid *actor.PID, inProcess bool, log *zap.Logger) (*groupExecutor, error) {
	one, _ := mesh.New(1, 1, 1)
	return startGroupExecutor(sys, group, execWorld{mesh: one, gen: gen, peers: []int{0}, pids: []*actor.PID{pid}, peerName: func(int) string { return name }},
		execSetup{weightsInMemory: inProcess, parts: j.partsLayout()}, &j.cfg, log)
}

// startServers starts j's parameter servers as actors of sys (the kernel
// threads split as among share workers), connected in this process when
// several, and forms them at step from; they checkpoint to ck (nil: none).
// The group's Close stops them.
func startServers(ctx context.Context, sys *actors.System, j *job, ck *checkpointer, share, from int, cursor data.Cursor, log *zap.Logger) (_ *groupExecutor, err error) {
	sj := j.serverJob()
	m, err := mesh.New(sj.cfg.DP, 1, 1)
	if err != nil {
		return nil, fieldErr("Servers", "%v", err)
	}
	var stops []func() error
	stop := stopAll(&stops, nil)
	handed := false // once the group owns stop, its Close runs it
	defer func() {
		if err != nil && !handed {
			stop()
		}
	}()
	var comms []collective.Communicator
	if m.Size() > 1 {
		if comms, err = actors.StartLocal(sys, m.Size(), commConfig(&sj.cfg, log)); err != nil {
			return nil, err
		}
		for _, c := range comms {
			stops = append(stops, c.Close)
		}
	}
	spec := sj.workerSpec()
	pids, closers, err := spawnLocal(sys, sj, m, 0, share, func(int) *worker.Spec { return spec }, comms, nil, log)
	stops = append(stops, closers...)
	if err != nil {
		return nil, err
	}
	name := func(r int) string {
		if m.Size() == 1 {
			return "parameter server"
		}
		return fmt.Sprintf("parameter server %d", r)
	}
	// One server, or ZeRO-3's shards of the model, which evaluate, gather
	// the weights and save checkpoints together.
	g, err := startGroupExecutor(sys, "async parameter servers", execWorld{mesh: m, peers: identity(m.Size()), pids: pids, peerName: name},
		execSetup{saver: capturing(ck), weightsInMemory: true, parts: sj.partsLayout(), zeroShards: sj.zeroShards(), stop: stop}, &sj.cfg, log)
	if err != nil {
		return nil, err
	}
	handed = true
	if err := formAll(ctx, g, sj, from, cursor, nil); err != nil {
		g.Close()
		return nil, err
	}
	log.Info("parameter servers ready", zap.Int("servers", m.Size()), zap.Int("zero_stage", sj.cfg.Zero), zap.Int("step", from))
	return g, nil
}

// formAll forms g's workers as a fresh world of j's at step from (the
// servers from the checkpoint of that step; a replica computes on the
// weights it is given, so its own matter only until then).
func formAll(ctx context.Context, g *groupExecutor, j *job, from int, cursor data.Cursor, addrs []string) error {
	if err := g.Form(ctx, firstForm(j, g.mesh, from, cursor, addrs)); err != nil {
		return fmt.Errorf("train: forming %s: %w", g.peerName(0), err)
	}
	return nil
}

// replicaProcs starts and restarts the replicas' worker processes
// (Config.Procs): each process is one replica, a world of one, which says
// hello to a group of its own.
type replicaProcs struct {
	sys  *actors.System
	j    *job
	conf []byte
	log  *zap.Logger
	// from and cursor form a started replica (it computes on whatever
	// weights the server gives it, so any point does).
	from   int
	cursor data.Cursor
	// group makes a replica's group for its worker at pid.
	group func(name string, inc int, pid *actor.PID) (*groupExecutor, error)
	// procs are every replica process started, incarnations included.
	procs *rankProcs
}

// start launches replica r's process (incarnation inc), waits for its
// hello and forms it; lost is called when the process exits.
func (p *replicaProcs) start(ctx context.Context, r, inc int, lost func(r, inc int, cause string)) (*groupExecutor, error) {
	cfg := &p.j.cfg
	name := fmt.Sprintf("replica %d", r)
	hello, err := workerGroup(p.sys, fmt.Sprintf("async-hello-%d-%d", r, inc), make([]*actor.PID, 1), func(int) string { return name }, cfg)
	if err != nil {
		return nil, err
	}
	// Each replica's own group watches it once it said hello.
	defer hello.Close()
	addrs, err := freeAddrs(1)
	if err != nil {
		return nil, err
	}
	env := append(withThreads(os.Environ(), cfg, cfg.DP), envWorkerConfig+"="+string(p.conf), envWorkerAddrs+"="+addrs[0],
		envTrainer+"="+hello.PID().Address+"/"+hello.PID().Id, envReplica+"="+strconv.Itoa(r))
	if err := p.procs.launch(env, 1, func(_ int, cause string) {
		hello.Lost(0, cause)
		lost(r, inc, cause)
	}); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := hello.Ready(rctx); err != nil {
		return nil, fmt.Errorf("train: waiting for the process of %s: %w", name, err)
	}
	g, err := p.group(name, inc, actor.NewPID(addrs[0], worker.ActorName))
	if err != nil {
		return nil, err
	}
	if err := formAll(ctx, g, p.j, p.from, p.cursor, addrs); err != nil {
		g.group.Close()
		return nil, err
	}
	p.log.Info("replica process ready", zap.Int("replica", r), zap.Int("incarnation", inc), zap.String("address", addrs[0]))
	return g, nil
}

// stop ends every process started (see rankProcs.stop).
func (p *replicaProcs) stop() error {
	p.procs.stop()
	return nil
}

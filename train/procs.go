package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/actors/actorspb"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/mesh"
	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/worker"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// Environment of a worker process started by Config.Procs.
const (
	envWorkerConfig = "TROUPE_WORKER_CONFIG" // the run's Config as JSON
	envWorkerRank   = "TROUPE_WORKER_RANK"
	// envReplica is the replica a worker process of asynchronous training
	// is (its world is one rank).
	envReplica     = "TROUPE_ASYNC_REPLICA"
	envWorkerAddrs = "TROUPE_WORKER_ADDRS" // every rank's actor system address, comma-separated
	envTrainer     = "TROUPE_TRAINER"      // the trainer's group actor, address/name
	envTraceOrigin = "TROUPE_TRACE_ORIGIN" // --trace: the trace's time zero, Unix nanoseconds
)

// readyTimeout bounds the start of the worker processes.
const readyTimeout = 2 * time.Minute

// freeAddrs reserves n loopback ports (the listeners are closed just
// before use; another process could take one in between, which the worker
// then reports as a listen error).
func freeAddrs(n int) ([]string, error) {
	addrs := make([]string, n)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("train: finding a free port: %w", err)
		}
		addrs[i] = ln.Addr().String()
		defer ln.Close()
	}
	return addrs, nil
}

// child is one worker process and the goroutine that waits for it.
type child struct {
	rank  int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
}

// startProcs starts cfg.Procs worker processes on loopback (one rank each,
// as wp says) and forms them at step from; every rank writes its shard of
// a checkpoint to ck (nil: none).
func startProcs(ctx context.Context, j *job, wp workerProcs, ck *checkpointer, from int, cursor data.Cursor, log *zap.Logger) (_ *groupExecutor, err error) {
	cfg := j.cfg
	if len(wp.argv) == 0 {
		return nil, fieldErr("Procs", "needs Options.WorkerCommand: the command that runs one worker process (a program calling RunWorkerProcess; troupe's own is troupe __worker)")
	}
	m, err := mesh.New(cfg.DP, cfg.PP, cfg.TP)
	if err != nil {
		return nil, fieldErr("Procs", "%d: %v", cfg.Procs, err)
	}
	if cfg.PP > 1 {
		// Worker processes take this cut as it is: a measured one
		// (Partition ByTime) could come out differently in each.
		cfg.StageLayers = pipeline.FormatStageLayers(j.cuts)
	}
	sys, err := actors.NewSystem(actors.SystemConfig{Remote: true, Logger: log})
	if err != nil {
		return nil, err
	}
	procs := &rankProcs{wp: wp}
	stop := func() error {
		procs.stop()
		return sys.Close()
	}
	// The processes say hello to the group: its peers are known then.
	g, err := workerGroup(sys, "trainer", make([]*actor.PID, m.Size()), rankName, &cfg)
	if err != nil {
		stop()
		return nil, err
	}
	addrs, err := freeAddrs(m.Size())
	var env []string
	var tr *tracer
	if err == nil {
		env, tr, err = procsEnv(&cfg, m, addrs, g.PID())
	}
	if err != nil {
		g.Close()
		stop()
		return nil, err
	}
	pids := make([]*actor.PID, len(addrs))
	for r, a := range addrs {
		pids[r] = actor.NewPID(a, worker.ActorName)
	}
	ex := newGroupExecutor(sys, g, execWorld{mesh: m, peers: identity(m.Size()), pids: pids, peerName: rankName},
		execSetup{saver: sharding(ck), trace: tr, parts: j.partsLayout(), zeroShards: j.zeroShards(), stop: stop}, &cfg, log)
	defer func() {
		if err != nil {
			ex.Close()
		}
	}()
	if err = procs.launch(env, m.Size(), g.Lost); err != nil {
		return nil, err
	}
	log.Info("started worker processes", zap.Int("procs", m.Size()), zap.Strings("addresses", addrs))
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := g.Ready(rctx); err != nil {
		return nil, fmt.Errorf("train: waiting for %d worker processes: %w", m.Size(), err)
	}
	if err := ex.Form(ctx, firstForm(j, m, from, cursor, addrs)); err != nil {
		return nil, fmt.Errorf("train: forming the worker processes: %w", err)
	}
	return ex, nil
}

// procsEnv is the environment of the worker processes of cfg's world m at
// addrs, whose trainer is the group at trainer, and the tracer of
// Config.Trace (nil without): the stages record against this process's
// clock origin (one host, one wall clock) and send their spans with each
// step's answer.
func procsEnv(cfg *Config, m mesh.Mesh, addrs []string, trainer *actor.PID) ([]string, *tracer, error) {
	conf, err := json.Marshal(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("train: encoding the worker config: %w", err)
	}
	env := append(withThreads(os.Environ(), cfg, m.Size()), envWorkerConfig+"="+string(conf), envWorkerAddrs+"="+strings.Join(addrs, ","),
		envTrainer+"="+trainer.Address+"/"+trainer.Id)
	if cfg.Trace == "" {
		return env, nil, nil
	}
	origin := time.Now()
	tr, err := newTracer(m, cfg.Trace, origin, false)
	if err != nil {
		return nil, nil, err
	}
	return append(env, envTraceOrigin+"="+strconv.FormatInt(origin.UnixNano(), 10)), tr, nil
}

// procThreads is how many threads each of procs worker processes on one
// machine runs its kernels on: threads when set (Config.Threads, --threads),
// else an equal share of the cores, at least one. Processes that each took
// every core would fight over them, so the default splits them (torchrun
// likewise gives each process one OpenMP thread).
func procThreads(cores, procs, threads int) int {
	if threads > 0 {
		return threads
	}
	return max(1, cores/max(1, procs))
}

// withThreads adds to a worker process's environment the GOMAXPROCS that
// gives it its share of this process's cores (GOMAXPROCS: the machine's,
// or what the cgroup or the user allows), one of procs processes. The
// worker's kernels then take that many threads (threadsPerWorker).
func withThreads(env []string, cfg *Config, procs int) []string {
	n := procThreads(runtime.GOMAXPROCS(0), procs, cfg.Threads)
	return append(env, "GOMAXPROCS="+strconv.Itoa(n))
}

// workerProcs is how worker processes are started: the command that runs
// one, and where their output goes.
type workerProcs struct {
	argv []string
	// out gets the processes' stdout and stderr: this process's stderr,
	// or the Terminal its progress bar shares (Options.Progress), so that
	// their log lines go above the bar too.
	out io.Writer
}

// workerProcsOf is the worker processes of a run with options o.
func workerProcsOf(o Options) workerProcs {
	wp := workerProcs{argv: o.WorkerCommand, out: o.Progress}
	if wp.out == nil {
		wp.out = os.Stderr
	}
	return wp
}

// rankProcs are the worker processes a trainer starts: the ranks of a
// Config.Procs world, or the replicas of asynchronous training (each
// started again when it exits). stop ends and reaps every process
// launched, on whatever path the trainer ends.
type rankProcs struct {
	wp workerProcs
	// mu is held while launching: a stop waits for a launch under way, so
	// that it stops what that launch started.
	mu       sync.Mutex
	children []*child
	wg       sync.WaitGroup // the processes' waiters
}

// launch starts n worker processes with env (rank r gets envWorkerRank
// r), and a goroutine per process that calls lost when it exits.
func (p *rankProcs) launch(env []string, n int, lost func(rank int, cause string)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	argv := p.wp.argv
	for r := range n {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(env, envWorkerRank+"="+strconv.Itoa(r))
		cmd.Stdout, cmd.Stderr = p.wp.out, p.wp.out
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return fmt.Errorf("train: worker %d: %w", r, err)
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("train: starting worker %d (%s): %w", r, argv[0], err)
		}
		ch := &child{rank: r, cmd: cmd, stdin: stdin, done: make(chan struct{})}
		p.children = append(p.children, ch)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer close(ch.done)
			cause := "exited"
			if err := cmd.Wait(); err != nil {
				cause = "exited: " + err.Error()
			}
			lost(ch.rank, "worker process "+cause)
		}()
	}
	return nil
}

// stopGrace is how long the workers have to exit once their stdin
// closed: a live one exits at once (any checkpoint write completed before
// the run ended); one that does not is hung or stopped, and is killed.
const stopGrace = 3 * time.Second

// stop closes the workers' stdin (they exit on EOF), waits up to
// stopGrace, kills what is left and waits for every waiter goroutine.
func (p *rankProcs) stop() {
	p.mu.Lock()
	children := p.children
	p.mu.Unlock()
	for _, c := range children {
		c.stdin.Close()
	}
	deadline := time.After(stopGrace)
	for _, c := range children {
		select {
		case <-c.done:
		case <-deadline:
			c.cmd.Process.Kill()
		}
	}
	for _, c := range children {
		select {
		case <-c.done:
		default:
			c.cmd.Process.Kill()
		}
	}
	p.wg.Wait()
}

// RunWorkerProcess is the body of a worker process of a Config.Procs world
// (Options.WorkerCommand runs a program that calls it): it reads its
// configuration from the environment its parent set, serves its worker
// actor, says hello to the parent's trainer and runs until its standard
// input closes (the parent is done or gone) or ctx is cancelled.
func RunWorkerProcess(ctx context.Context, stdin io.Reader, o Options) error {
	log := o.logger()
	env, err := readWorkerEnv()
	if err != nil {
		return err
	}
	rank := env.rank
	log = log.With(zap.Int("rank", rank))
	j, err := openJob(env.cfg, nil)
	if err != nil {
		return err
	}
	host, portStr, err := net.SplitHostPort(env.addrs[rank])
	if err != nil {
		return fmt.Errorf("train: worker address %q: %w", env.addrs[rank], err)
	}
	port, _ := strconv.Atoi(portStr)
	sys, err := actors.NewSystem(actors.SystemConfig{Remote: true, Host: host, Port: port, Logger: log})
	if err != nil {
		return err
	}
	defer sys.Close()
	cfg := &j.cfg
	be, err := kernels.Open(cfg.Device, kernels.Options{Threads: threadsPerWorker(cfg, 1), Device: deviceFor(cfg.Device, rank)})
	if err != nil {
		return fieldErr("Device", "%s: %v", cfg.Device, err)
	}
	if c, ok := be.(io.Closer); ok {
		defer c.Close()
	}
	ship := !env.origin.IsZero() && cfg.PP > 1
	w, err := processWorker(j, &env, be, ship, log)
	if err != nil {
		return err
	}
	cc := commConfig(cfg, log)
	sh, err := worker.Spawn(sys, w, worker.ShellConfig{Name: worker.ActorName, Logger: log, ShipTrace: ship,
		Comms: func(f *workerpb.Form) (collective.Communicator, error) {
			return actors.StartRemote(sys, actors.RemoteWorld{Rank: int(f.Rank), Addrs: f.Addrs}, cc)
		}})
	if err != nil {
		return err
	}
	defer sh.Stop()
	flights := &flightSource{}
	flights.set(shellFlights(sh))
	defer flights.watch(o.Dump, cfg.DumpDir, log)()
	sys.Root().Send(env.trainer,
		&actorspb.PeerHello{Peer: uint32(rank), Address: sys.Address(), Actor: worker.ActorName, Protocol: worker.Protocol})
	log.Info("worker ready", zap.String("address", sys.Address()), zap.Int("threads", threadsPerWorker(cfg, 1)))
	return untilParentGoes(ctx, stdin)
}

// processWorker makes the worker of a worker process: the job's (or, under
// asynchronous training, its replica's) with its gradients in registered
// memory, which same-host replicas read in place (the worker lives as long
// as the process), recording the pipeline's trace when ship.
func processWorker(j *job, env *workerEnv, be kernels.Backend, ship bool, log *zap.Logger) (*worker.Worker, error) {
	cfg := &j.cfg
	opts := []worker.Option{worker.WithLogger(log), worker.WithRegisteredGrads()}
	if ship {
		rec, err := pipeline.NewRecorder(cfg.PP, env.origin)
		if err != nil {
			return nil, err
		}
		opts = append(opts, worker.WithRecorder(rec))
	}
	spec := j.workerSpec()
	if cfg.sync().Async() {
		r, err := strconv.Atoi(os.Getenv(envReplica))
		if err != nil || r < 0 {
			return nil, fmt.Errorf("train: worker process: bad %s %q", envReplica, os.Getenv(envReplica))
		}
		spec = j.replicaSpec(r)
	}
	return worker.New(spec, be, opts...)
}

// untilParentGoes returns when the parent closes this process's stdin (or
// dies): nil; or when ctx ends: nil when cancelled, else its error. When
// ctx ends first the reader stays blocked in the read; the caller is the
// whole worker process, which exits right after, ending it.
func untilParentGoes(ctx context.Context, stdin io.Reader) error {
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		_, _ = io.Copy(io.Discard, stdin)
	}()
	select {
	case <-eof:
		return nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil
		}
		return ctx.Err()
	}
}

// workerEnv is what a worker process's parent told it.
type workerEnv struct {
	cfg     Config
	rank    int
	addrs   []string
	trainer *actor.PID
	origin  time.Time // the trace's time zero (zero: no trace)
}

// readWorkerEnv reads and checks the worker process's environment.
func readWorkerEnv() (workerEnv, error) {
	var env workerEnv
	if err := json.Unmarshal([]byte(os.Getenv(envWorkerConfig)), &env.cfg); err != nil {
		return env, fmt.Errorf("train: worker process: %s: %w (worker processes are started by a Config.Procs run)", envWorkerConfig, err)
	}
	rank, err := strconv.Atoi(os.Getenv(envWorkerRank))
	env.addrs = strings.Split(os.Getenv(envWorkerAddrs), ",")
	trainer := strings.SplitN(os.Getenv(envTrainer), "/", 2)
	if err != nil || rank < 0 || rank >= len(env.addrs) || len(trainer) != 2 {
		return env, fmt.Errorf("train: worker process: bad %s/%s/%s environment", envWorkerRank, envWorkerAddrs, envTrainer)
	}
	env.rank, env.trainer = rank, actor.NewPID(trainer[0], trainer[1])
	if ns := os.Getenv(envTraceOrigin); ns != "" {
		n, err := strconv.ParseInt(ns, 10, 64)
		if err != nil {
			return env, fmt.Errorf("train: worker process: bad %s %q", envTraceOrigin, ns)
		}
		env.origin = time.Unix(0, n)
	}
	return env, nil
}

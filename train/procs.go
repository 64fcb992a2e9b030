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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/actors/actorspb"
	"github.com/troupe-ml/troupe/ddp"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/trace"
)

// Environment of a worker process started by --procs (troupe __worker).
const (
	envWorkerConfig = "TROUPE_WORKER_CONFIG" // the run's Config as JSON
	envWorkerRank   = "TROUPE_WORKER_RANK"
	envWorkerAddrs  = "TROUPE_WORKER_ADDRS" // every rank's actor address, comma-separated
	envCoordinator  = "TROUPE_COORDINATOR"  // the Coordinator's actor system address
	envTraceOrigin  = "TROUPE_TRACE_ORIGIN" // --trace: the trace's time zero, Unix nanoseconds
)

// WorkerCommand is the command that runs one worker process of a --procs
// world; the default is this executable's hidden "__worker" sub-command.
// Programs embedding troupe that use Procs set it to a command that calls
// RunWorkerProcess.
var WorkerCommand = func() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("train: finding this executable for --procs: %w", err)
	}
	return []string{exe, "__worker"}, nil
}

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

// newProcsWorld starts cfg.Procs worker processes on loopback (one rank
// each) and a Coordinator in this process that drives them through
// protoactor remote.
func newProcsWorld(cfg *Config, plan *worldPlan, log *zap.Logger) (_ *dpEngine, err error) {
	argv, err := WorkerCommand()
	if err != nil {
		return nil, err
	}
	sys, err := actors.NewSystem(actors.SystemConfig{Remote: true, Logger: log})
	if err != nil {
		return nil, err
	}
	e := &dpEngine{sys: sys, plan: plan, timeout: cfg.StepTimeout, log: log, accum: cfg.Accum}
	e.cleanup = append(e.cleanup, sys.Close)
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.coord, err = actors.SpawnCoordinator(sys, actors.CoordinatorConfig{World: cfg.Procs, CallTimeout: cfg.StepTimeout, EvalRanks: plan.evalRanks()}); err != nil {
		return nil, err
	}
	addrs, err := freeAddrs(cfg.Procs)
	if err != nil {
		return nil, err
	}
	conf, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("train: encoding the worker config: %w", err)
	}
	var traceEnv []string
	if cfg.Trace != "" && plan.sched != nil {
		// The stages record against the parent's clock origin (one host,
		// one wall clock) and send their spans with each step's answer.
		origin := time.Now()
		e.tw, e.tracePath, e.shipped = trace.NewWriter(origin), cfg.Trace, true
		traceEnv = []string{envTraceOrigin + "=" + strconv.FormatInt(origin.UnixNano(), 10)}
	}
	var children []*child
	var wg sync.WaitGroup
	coord := e.coord // close() clears e.coord; the waiters keep this one
	e.cleanup = append(e.cleanup, func() error { stopChildren(children, &wg); return nil })
	for r := 0; r < cfg.Procs; r++ {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(),
			envWorkerConfig+"="+string(conf), envWorkerRank+"="+strconv.Itoa(r),
			envWorkerAddrs+"="+strings.Join(addrs, ","), envCoordinator+"="+sys.Address())
		cmd.Env = append(cmd.Env, traceEnv...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, fmt.Errorf("train: worker %d: %w", r, err)
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("train: starting worker %d (%s): %w", r, argv[0], err)
		}
		ch := &child{rank: r, cmd: cmd, stdin: stdin, done: make(chan struct{})}
		children = append(children, ch)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(ch.done)
			err := cmd.Wait()
			cause := "process exited"
			if err != nil {
				cause = "process exited: " + err.Error()
			}
			sys.Root().Send(coord, &actors.WorkerLost{Rank: ch.rank, Cause: cause})
		}()
	}
	log.Info("started worker processes", zap.Int("procs", cfg.Procs), zap.Strings("addresses", addrs))
	res, err := sys.Root().RequestFuture(e.coord, &actors.ReadyCall{}, readyTimeout).Result()
	if err != nil {
		return nil, fmt.Errorf("train: waiting for %d worker processes: %w", cfg.Procs, err)
	}
	if rep := res.(*actors.ReadyReport); rep.Err != nil {
		return nil, fmt.Errorf("train: starting worker processes: %w", rep.Err)
	}
	return e, nil
}

// stopChildren closes the workers' stdin (they exit on EOF), waits a few
// seconds, kills what is left and waits for every waiter goroutine.
func stopChildren(children []*child, wg *sync.WaitGroup) {
	for _, c := range children {
		c.stdin.Close()
	}
	deadline := time.After(5 * time.Second)
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
	wg.Wait()
}

// RunWorkerProcess is the body of a worker process of a --procs world: it
// reads its configuration from the environment its parent set, joins the
// world's collectives, serves its Worker actor, says hello to the
// Coordinator and runs until its standard input closes (the parent is done
// or gone) or ctx is cancelled.
func RunWorkerProcess(ctx context.Context, stdin io.Reader, log *zap.Logger) error {
	var cfg Config
	if err := json.Unmarshal([]byte(os.Getenv(envWorkerConfig)), &cfg); err != nil {
		return fmt.Errorf("train: worker process: %s: %w (start workers with troupe train --procs)", envWorkerConfig, err)
	}
	rank, err := strconv.Atoi(os.Getenv(envWorkerRank))
	addrs := strings.Split(os.Getenv(envWorkerAddrs), ",")
	coordAddr := os.Getenv(envCoordinator)
	if err != nil || rank < 0 || rank >= len(addrs) || coordAddr == "" {
		return fmt.Errorf("train: worker process: bad %s/%s/%s environment", envWorkerRank, envWorkerAddrs, envCoordinator)
	}
	log = log.With(zap.Int("rank", rank))
	if err := cfg.Validate(); err != nil {
		return err
	}
	trainSet, testSet, err := OpenData(&cfg)
	if err != nil {
		return err
	}
	host, portStr, err := net.SplitHostPort(addrs[rank])
	if err != nil {
		return fmt.Errorf("train: worker address %q: %w", addrs[rank], err)
	}
	port, _ := strconv.Atoi(portStr)
	sys, err := actors.NewSystem(actors.SystemConfig{Remote: true, Host: host, Port: port, Logger: log})
	if err != nil {
		return err
	}
	defer sys.Close()
	comm, err := actors.StartRemote(sys, actors.RemoteWorld{Rank: rank, Addrs: addrs}, commConfig(&cfg, log))
	if err != nil {
		return err
	}
	defer comm.Close()
	meta, err := BuildModel(&cfg, cpu.New(1), trainSet)
	if err != nil {
		return err
	}
	plan, err := planWorld(&cfg, meta, trainSet)
	if err != nil {
		return err
	}
	if plan.grid.Size() != len(addrs) {
		return fmt.Errorf("train: worker process: a %d×%d world in %d processes", plan.grid.Replicas, plan.grid.Stages, len(addrs))
	}
	_, st := plan.grid.Coords(rank)
	var rec *pipeline.Recorder
	if ns := os.Getenv(envTraceOrigin); ns != "" && plan.sched != nil {
		n, err := strconv.ParseInt(ns, 10, 64)
		if err != nil {
			return fmt.Errorf("train: worker process: bad %s %q", envTraceOrigin, ns)
		}
		if rec, err = pipeline.NewRecorder(plan.grid.Stages, time.Unix(0, n)); err != nil {
			return err
		}
	}
	w, closer, err := newStepper(&cfg, plan, rank, threadsPerWorker(&cfg, 1), comm, rec, trainSet, testSet)
	if closer != nil {
		defer closer.Close()
	}
	if err != nil {
		return err
	}
	if rec != nil {
		w = traceShipper{Stepper: w, rec: rec, stage: st}
	}
	if _, err := actors.SpawnWorker(sys, actors.WorkerActorName, rank, st, w); err != nil {
		return err
	}
	sys.Root().Send(actor.NewPID(coordAddr, actors.CoordinatorActorName),
		&actorspb.WorkerHello{Rank: uint32(rank), Address: sys.Address(), Protocol: actors.TrainProtocol})
	log.Info("worker ready", zap.String("address", sys.Address()))
	// The reader ends at EOF (the parent closed our stdin or died). When
	// ctx ends first it stays blocked in the read; this function is the
	// whole worker process, which exits right after, ending it.
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

// traceShipper hands what a pipeline stage recorded in a step back with the
// step's result, for the parent process's --trace.
type traceShipper struct {
	ddp.Stepper
	rec   *pipeline.Recorder
	stage int
}

func (t traceShipper) Step(ctx context.Context, req ddp.StepRequest) (ddp.StepResult, error) {
	res, err := t.Stepper.Step(ctx, req)
	tl := t.rec.Take()
	res.Spans, res.Mem = tl.Spans[t.stage], tl.Mem[t.stage]
	return res, err
}

package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/internal/pki"
	"github.com/troupe-ml/troupe/internal/shmem"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/train"
)

type benchAllReduceFlags struct {
	ranks     int
	bytes     string
	transport string
	algo      string
	hosts     int
	iters     int
	warmup    int
	subChunk  string
	dtype     string
	window    int
	timeout   time.Duration
	json      bool
	tls       bool
	private   bool
	// a rank process's TLS files (allreduce-worker)
	tlsFiles train.TLSFiles
}

func newBenchAllReduceCmd() *cobra.Command {
	var f benchAllReduceFlags
	cmd := &cobra.Command{
		Use:   "allreduce --ranks P --bytes S --transport local|tcp|shm|actor",
		Short: "Measure all-reduce time and bandwidth (nccl-tests' algbw and busbw)",
		Long: `Runs a float32 sum all-reduce of S bytes on P ranks and reports the median
time, algbw = S / t and busbw = algbw × 2(P−1)/P in GB/s (10⁹ B/s), the
nccl-tests convention, as PyTorch's gloo anchor (torch_allreduce.py) prints
them. Each iteration refills the buffers (untimed), passes a barrier, and
times the all-reduce; the iteration's time is the slowest rank's.

Transports:
  local  one process, one Comm actor per rank, chunks passed by pointer
  tcp    one OS process per rank on loopback: control through protoactor
         remote (gRPC), chunk bytes on the framed TCP data plane
  shm    as tcp, but the chunk bytes go through memory the two processes
         share (a memfd region per connection; the socket carries headers)
  actor  one OS process per rank: chunk bytes as protobuf bytes through
         protoactor remote (kept to compare with tcp); "grpc" is an alias
  auto   as tcp to the ranks on another host, as shm to those on this one
         (what training uses)

With shm and auto each rank's buffer lies in registered memory (a memfd the
ranks on its host map, as training's gradient buffers do): a peer adds from
it and copies out of it where it lies, and the socket carries only headers
and references. --private-buffers allocates ordinary memory instead, which
costs one copy of every chunk into the receiver's slot.

--hosts H places the P rank processes on H "hosts" of P/H ranks each
(ranks 0…P/H−1 on the first; a host identity per group, as NCCL_HOSTID
does): with --transport auto they share memory within a host and talk TCP
between hosts, and an all-reduce above the recursive doubling threshold
runs hierarchically (--algo hier: reduce-scatter in each host, all-reduce
across hosts, all-gather in each host; --algo ring: one ring of all P).

--dtype bf16 or fp16 sends the values in 16 bits (two to a float32 word,
summed in fp32 and rounded at each hop, as --reduce-dtype does for
gradients): S bytes are then S/2 values, and algbw and busbw count the
16-bit bytes, as nccl-tests count a bf16 all-reduce's.

--tls runs the ranks' gRPC and data plane over mutually authenticated TLS
1.3, as agents with --tls-ca do (certificates of a CA made for the run), to
measure what encryption costs (tcp and actor transports).

--algo picks how the all-reduce runs: auto (the default, what training
runs: recursive doubling up to the sub-chunk size and 64 KiB, above it
hierarchical across --hosts, else the ring), ring, rd (recursive doubling:
log₂P exchanges of the whole buffer, for sizes up to --sub-chunk), hier
(the hierarchical all-reduce at every size; needs --hosts ≥ 2 of two ranks
or more each), or naive (gather to rank 0, then send the result back). The "algo" field of each
result names what ran.

--bytes (or --sizes) takes one size or a comma-separated list (4KiB,64KiB,
1MiB,…; K, M, G are binary, kB, MB, GB decimal); --json then prints one
JSON object per size, one per line.`,
		Example: "  troupe bench allreduce --ranks 2 --bytes 16MiB --transport tcp --json\n" +
			"  troupe bench allreduce --ranks 4 --transport tcp --algo rd --sizes 4KiB,64KiB,1MiB\n" +
			"  troupe bench allreduce --ranks 4 --hosts 2 --transport auto --algo hier --sizes 16MiB,64MiB",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBenchAllReduce(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.ranks, "ranks", 2, "number of ranks P")
	fl.StringVar(&f.bytes, "bytes", "16MiB", "bytes per rank: a size or a comma-separated list of sizes")
	fl.StringVar(&f.bytes, "sizes", "16MiB", "the same as --bytes")
	fl.StringVar(&f.transport, "transport", "local", "local, tcp, shm, auto or actor")
	fl.StringVar(&f.algo, "algo", "auto", "auto, ring, rd (recursive doubling), hier (hierarchical, with --hosts) or naive (gather to rank 0, then send the result back)")
	fl.IntVar(&f.hosts, "hosts", 1, "place the ranks on this many hosts of equal size (host identities; separate processes)")
	fl.StringVar(&f.dtype, "dtype", "fp32", "the type the values travel in: fp32, or bf16 or fp16 (ring only)")
	fl.IntVar(&f.iters, "iters", 0, "timed iterations per size (0: 50 up to 1 MiB, 20 up to 16 MiB, 10 above, as the gloo anchor)")
	fl.IntVar(&f.warmup, "warmup", 3, "untimed iterations before the timed ones")
	fl.StringVar(&f.subChunk, "sub-chunk", "1MiB", "sub-chunk size: the largest message (at most 1MiB on the actor transport)")
	fl.IntVar(&f.window, "window", 0, "frames (tcp) or messages (actor) in flight per peer (default 8)")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up (and stop every rank process) after this long")
	fl.BoolVar(&f.json, "json", false, "print JSON lines")
	fl.BoolVar(&f.tls, "tls", false, "TLS between the rank processes (tcp and actor transports)")
	fl.BoolVar(&f.private, "private-buffers", false, "shm and auto: the buffers in private memory, copied into the peer's slot (default: registered memory the peer reads in place)")
	return cmd
}

func init() {
	benchCmd.AddCommand(newBenchAllReduceCmd(), newBenchAllReduceWorkerCmd())
}

// benchAllReduceResult is one size's measurement; the field names follow
// the gloo anchor (torch_allreduce.py).
type benchAllReduceResult struct {
	Bench         string  `json:"bench"`
	Backend       string  `json:"backend"`
	Transport     string  `json:"transport"`
	Algo          string  `json:"algo"`
	Procs         int     `json:"procs"`
	Ranks         int     `json:"ranks"`
	Bytes         int64   `json:"bytes"`
	DType         string  `json:"dtype"`
	MiB           float64 `json:"mib"`
	SubChunkBytes int     `json:"sub_chunk_bytes"`
	TLS           bool    `json:"tls"`
	// Registered: the buffers lay in registered memory (shm, auto).
	Registered bool    `json:"registered"`
	Iters      int     `json:"iters"`
	TimeMedS   float64 `json:"time_med_s"`
	TimeMinS   float64 `json:"time_min_s"`
	TimeMaxS   float64 `json:"time_max_s"`
	AlgbwGBs   float64 `json:"algbw_gbs"`
	BusbwGBs   float64 `json:"busbw_gbs"`
	Correct    bool    `json:"correct"`
}

// allreduceParseSize reads "16MiB", "1M", "64kB", "4096".
func allreduceParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mul    int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
		{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1},
	}
	mul := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mul = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mul
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || v*float64(mul) > 1<<40 {
		return 0, fmt.Errorf("not a size")
	}
	return int64(math.Round(v * float64(mul))), nil
}

func allreduceParseSizes(list string) ([]int64, error) {
	var sizes []int64
	for _, item := range strings.Split(list, ",") {
		n, err := allreduceParseSize(item)
		if err != nil || n <= 0 || n%4 != 0 {
			return nil, fmt.Errorf("%w: --bytes %q: want a positive multiple of 4 bytes (float32), like 16MiB", errUsage, item)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

func allreduceIters(bytes int64, iters int) int {
	if iters > 0 {
		return iters
	}
	switch {
	case bytes <= 1<<20:
		return 50
	case bytes <= 16<<20:
		return 20
	}
	return 10
}

// allreducePlan is the checked command line.
type allreducePlan struct {
	ranks     int
	sizes     []int64
	transport string
	hosts     int
	kind      collective.Kind      // KindAllReduce or KindNaiveAllReduce
	algo      collective.Algorithm // an AllReduce's
	op        collective.ReduceOp
	dtype     kernels.DType
	iters     int
	warmup    int
	tls       bool
	// registered: the rank processes' buffers in registered memory
	registered bool
	comm       actors.CommConfig
}

func allreducePlanOf(f benchAllReduceFlags) (*allreducePlan, error) {
	p := &allreducePlan{ranks: f.ranks, iters: f.iters, warmup: f.warmup, transport: f.transport, tls: f.tls}
	if f.ranks < 1 || f.ranks > 64 {
		return nil, fmt.Errorf("%w: --ranks %d: want 1…64", errUsage, f.ranks)
	}
	if f.iters < 0 || f.warmup < 0 {
		return nil, fmt.Errorf("%w: --iters %d, --warmup %d: want ≥ 0", errUsage, f.iters, f.warmup)
	}
	sizes, err := allreduceParseSizes(f.bytes)
	if err != nil {
		return nil, err
	}
	p.sizes = sizes
	p.kind = collective.KindAllReduce
	if f.algo == "naive" {
		p.kind = collective.KindNaiveAllReduce
	} else if p.algo, err = collective.ParseAlgorithm(f.algo); err != nil {
		return nil, fmt.Errorf("%w: --algo %q: want auto, ring, rd or naive", errUsage, f.algo)
	}
	dt, err := kernels.ParseDType(f.dtype)
	if err != nil {
		return nil, fmt.Errorf("%w: --dtype: %v", errUsage, err)
	}
	if dt != kernels.F32 && (p.kind != collective.KindAllReduce || p.algo == collective.AlgoRecursiveDoubling) {
		return nil, fmt.Errorf("%w: --dtype %v: only the ring sends 16-bit values", errUsage, dt)
	}
	p.dtype, p.op = dt, collective.Sum.In(dt)
	p.comm = actors.DefaultCommConfig()
	switch f.transport {
	case "local":
	case "tcp":
		p.comm.Transport = actors.TransportTCP
	case "shm":
		p.comm.Transport = actors.TransportShm
	case "auto":
		p.comm.Transport = actors.TransportAuto
	case "actor", "grpc":
		p.transport = "actor"
		p.comm.Transport = actors.TransportActor
	default:
		return nil, fmt.Errorf("%w: --transport %q: want local, tcp, shm, auto or actor", errUsage, f.transport)
	}
	p.hosts = max(1, f.hosts)
	switch {
	case f.hosts < 1 || f.hosts > f.ranks || f.ranks%f.hosts != 0:
		return nil, fmt.Errorf("%w: --hosts %d: want a divisor of --ranks %d", errUsage, f.hosts, f.ranks)
	case f.hosts > 1 && p.transport == "local":
		return nil, fmt.Errorf("%w: --hosts %d: the local transport runs every rank in one process; use --transport auto or tcp", errUsage, f.hosts)
	case f.hosts > 1 && p.transport == "shm":
		return nil, fmt.Errorf("%w: --hosts %d: the shm transport needs every rank on one host; use --transport auto", errUsage, f.hosts)
	case p.algo == collective.AlgoHierarchical && (f.hosts < 2 || f.ranks/f.hosts < 2):
		return nil, fmt.Errorf("%w: --algo hier needs --hosts of two ranks or more each (2 ≤ --hosts ≤ --ranks/2), not %d hosts of %d ranks", errUsage, f.hosts, f.ranks)
	case p.algo == collective.AlgoHierarchical && p.dtype != kernels.F32:
		return nil, fmt.Errorf("%w: --algo hier reduces float32 only, not --dtype %v", errUsage, p.dtype)
	}
	if f.tls && p.transport == "local" {
		return nil, fmt.Errorf("%w: --tls: the local transport passes chunks by pointer in one process; use --transport tcp or actor", errUsage)
	}
	p.registered = (p.transport == "shm" || p.transport == "auto") && !f.private && shmem.Supported
	if f.private && p.transport != "shm" && p.transport != "auto" {
		return nil, fmt.Errorf("%w: --private-buffers: only the shm and auto transports read registered memory; %s buffers are always private", errUsage, p.transport)
	}
	if f.tls && p.transport == "shm" {
		return nil, fmt.Errorf("%w: --tls: the shm transport's bytes never leave the host; use --transport tcp or actor", errUsage)
	}
	sub := f.subChunk
	n, err := allreduceParseSize(sub)
	if err != nil || n < 4 || n%4 != 0 || n > 1<<30 {
		return nil, fmt.Errorf("%w: --sub-chunk %q: want a multiple of 4 bytes up to 1GiB", errUsage, sub)
	}
	if p.transport == "actor" && n > 1<<20 {
		return nil, fmt.Errorf("%w: --sub-chunk %q: the actor transport sends at most 1MiB per message", errUsage, sub)
	}
	p.comm.Collective.SubChunkBytes = int(n)
	p.comm.DataPlane.MaxFrameBytes = int(n)
	switch p.algo {
	case collective.AlgoRing:
		p.comm.Collective.SmallAllReduceBytes = -1
		p.comm.Collective.NoHierarchical = true
	case collective.AlgoHierarchical:
		p.comm.Collective.SmallAllReduceBytes = -1
	case collective.AlgoRecursiveDoubling:
		for _, b := range p.sizes {
			if b > n {
				return nil, fmt.Errorf("%w: --algo rd sends the whole buffer in one message: size %d exceeds --sub-chunk %d", errUsage, b, n)
			}
		}
		p.comm.Collective.SmallAllReduceBytes = int(n)
	}
	if f.window < 0 {
		return nil, fmt.Errorf("%w: --window %d", errUsage, f.window)
	}
	if f.window > 0 {
		p.comm.DataPlane.Window = f.window
		p.comm.ActorWindow = f.window
	}
	p.comm.Collective.Timeout = time.Minute
	p.comm.Logger = logger
	return p, nil
}

// hostIDs is each rank's host identity under --hosts (nil: the real one).
func (p *allreducePlan) hostIDs() []string {
	if p.hosts <= 1 {
		return nil
	}
	ids := make([]string, p.ranks)
	for r := range ids {
		ids[r] = fmt.Sprintf("bench-host-%d", r/(p.ranks/p.hosts))
	}
	return ids
}

func runBenchAllReduce(ctx context.Context, w io.Writer, f benchAllReduceFlags) error {
	plan, err := allreducePlanOf(f)
	if err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	var results []benchAllReduceResult
	if plan.transport == "local" {
		results, err = runAllReduceLocal(ctx, plan)
	} else {
		results, err = runAllReduceProcesses(ctx, plan, f)
	}
	if err != nil {
		return err
	}
	for _, r := range results {
		if f.json {
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			fmt.Fprintln(w, string(b))
			continue
		}
		transport := r.Transport
		if r.TLS {
			transport += "+tls"
		}
		if r.Registered {
			transport += "+reg"
		}
		fmt.Fprintf(w, "allreduce %-9s %-5s %s P=%d %9.2f MiB  median %9.3f ms  algbw %6.2f GB/s  busbw %6.2f GB/s  (%d iters, min %.3f ms, max %.3f ms, correct %v)\n",
			transport, r.Algo, r.DType, r.Ranks, r.MiB, r.TimeMedS*1e3, r.AlgbwGBs, r.BusbwGBs, r.Iters, r.TimeMinS*1e3, r.TimeMaxS*1e3, r.Correct)
	}
	for _, r := range results {
		if !r.Correct {
			return fmt.Errorf("allreduce of %d bytes gave a wrong sum", r.Bytes)
		}
	}
	return nil
}

// allreduceRankTimes is one rank's measurement of one size.
type allreduceRankTimes struct {
	Rank    int       `json:"rank"`
	Bytes   int64     `json:"bytes"`
	Times   []float64 `json:"times"`
	Correct bool      `json:"correct"`
}

// allreduceRank runs one rank's iterations of one size: fill (untimed),
// barrier, timed all-reduce, check (untimed).
//
// arena, when not nil, is registered memory for the buffer (at least its
// length).
func allreduceRank(ctx context.Context, c collective.Communicator, plan *allreducePlan, bytes int64, iters, warmup int, arena []float32) (allreduceRankTimes, error) {
	n := bytes / int64(plan.dtype.Size())
	var buf []float32
	if arena != nil {
		buf = arena[:n]
	} else {
		buf = make([]float32, n)
	}
	rt := allreduceRankTimes{Rank: c.Rank(), Bytes: bytes, Correct: true}
	want := float32(c.Size())
	for it := 0; it < warmup+iters; it++ {
		for i := range buf {
			buf[i] = 1
		}
		if err := c.Barrier(ctx).Wait(); err != nil {
			return rt, err
		}
		t0 := time.Now()
		var h *collective.Handle
		if plan.kind == collective.KindNaiveAllReduce {
			h = c.NaiveAllReduce(ctx, buf, plan.op)
		} else {
			h = c.AllReduce(ctx, buf, plan.op)
		}
		if err := h.Wait(); err != nil {
			return rt, err
		}
		dt := time.Since(t0).Seconds()
		if it >= warmup {
			rt.Times = append(rt.Times, dt)
		}
		for _, v := range buf {
			if v != want {
				rt.Correct = false
				break
			}
		}
	}
	return rt, nil
}

// allreduceSummarize turns every rank's times into the result: an iteration takes
// as long as its slowest rank; the median over iterations is reported.
func allreduceSummarize(plan *allreducePlan, bytes int64, procs int, ranks []allreduceRankTimes) benchAllReduceResult {
	iters := len(ranks[0].Times)
	per := make([]float64, iters)
	correct := true
	for _, r := range ranks {
		correct = correct && r.Correct && len(r.Times) == iters
		for i := 0; i < iters && i < len(r.Times); i++ {
			per[i] = max(per[i], r.Times[i])
		}
	}
	slices.Sort(per)
	med := per[iters/2]
	if iters%2 == 0 {
		med = (per[iters/2-1] + per[iters/2]) / 2
	}
	P := plan.ranks
	alg := float64(bytes) / med / 1e9
	algo := "naive"
	if plan.kind == collective.KindAllReduce {
		cfg := plan.comm.Collective
		if err := cfg.Validate(); err == nil {
			n := int(bytes) / plan.dtype.Size()
			algo = cfg.AllReduceAlgorithm(n, plan.op, P).String()
			if _, ok := collective.PlanHierarchical(plan.hostIDs(), 0); ok && algo == "ring" && !cfg.NoHierarchical && plan.op.Wire() == kernels.F32 {
				algo = collective.AlgoHierarchical.String()
			}
		}
	}
	return benchAllReduceResult{
		Bench: "allreduce", Backend: "troupe", Transport: plan.transport, Algo: algo,
		Procs: procs, Ranks: P, Bytes: bytes, DType: plan.dtype.String(), MiB: float64(bytes) / (1 << 20),
		SubChunkBytes: plan.comm.Collective.SubChunkBytes, TLS: plan.tls, Registered: plan.registered, Iters: iters,
		TimeMedS: med, TimeMinS: per[0], TimeMaxS: per[iters-1],
		AlgbwGBs: alg, BusbwGBs: alg * 2 * float64(P-1) / float64(P), Correct: correct,
	}
}

func runAllReduceLocal(ctx context.Context, plan *allreducePlan) ([]benchAllReduceResult, error) {
	sc := actors.DefaultSystemConfig()
	sc.Logger = logger
	sys, err := actors.NewSystem(sc)
	if err != nil {
		return nil, err
	}
	defer sys.Close()
	comms, err := actors.StartLocal(sys, plan.ranks, plan.comm)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	var results []benchAllReduceResult
	for _, bytes := range plan.sizes {
		iters := allreduceIters(bytes, plan.iters)
		ranks := make([]allreduceRankTimes, plan.ranks)
		errs := make([]error, plan.ranks)
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ranks[r], errs[r] = allreduceRank(ctx, c, plan, bytes, iters, plan.warmup, nil)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		results = append(results, allreduceSummarize(plan, bytes, 1, ranks))
	}
	return results, nil
}

// Multi-process runs: the parent starts P copies of this executable as
// `troupe bench allreduce-worker --rank r …`, and talks to each over its
// stdin and stdout, one JSON object per line:
//
//	worker → parent: {"rank":r,"addr":"127.0.0.1:port"}   its actor system is up
//	parent → worker: {"addrs":[…]}                         every rank's address
//	worker → parent: {"rank":r,"bytes":S,"times":[…],"correct":true}   per size
//	worker → parent: {"rank":r,"done":true}
//
// A worker exits when its stdin closes, so that none outlives the parent;
// the parent kills every worker when it gives up.

// allreduceWorkerEnv is added to the workers' environment (tests point it at
// their own binary's worker mode).
var allreduceWorkerEnv []string

// allreduceExecutable is the program started as the workers.
var allreduceExecutable = os.Executable

type allreduceWorkerLine struct {
	Rank    int       `json:"rank"`
	Addr    string    `json:"addr,omitempty"`
	Bytes   int64     `json:"bytes,omitempty"`
	Times   []float64 `json:"times,omitempty"`
	Correct bool      `json:"correct,omitempty"`
	Done    bool      `json:"done,omitempty"`
	Error   string    `json:"error,omitempty"`
}

type allreduceAddrsLine struct {
	Addrs []string `json:"addrs"`
}

func runAllReduceProcesses(ctx context.Context, plan *allreducePlan, f benchAllReduceFlags) ([]benchAllReduceResult, error) {
	exe, err := allreduceExecutable()
	if err != nil {
		return nil, fmt.Errorf("finding this program to start the ranks: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	P := plan.ranks
	var tlsDir string
	if plan.tls {
		if tlsDir, err = os.MkdirTemp("", "troupe-bench-certs-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(tlsDir)
		names := make([]string, P)
		for r := range names {
			names[r] = fmt.Sprintf("rank%d", r)
		}
		if err := runCerts(io.Discard, certsFlags{out: tlsDir, nodes: strings.Join(names, ","), caName: "troupe bench CA", valid: 24 * time.Hour}); err != nil {
			return nil, fmt.Errorf("making the ranks' certificates: %w", err)
		}
	}
	type worker struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		lines chan allreduceWorkerLine
		errs  chan error
	}
	workers := make([]*worker, P)
	var wg sync.WaitGroup
	defer func() {
		cancel() // kills every worker still running (exec.CommandContext)
		for _, w := range workers {
			if w != nil {
				w.stdin.Close()
				w.cmd.Wait()
			}
		}
		wg.Wait()
	}()
	for r := 0; r < P; r++ {
		args := []string{"bench", "allreduce-worker", "--rank", strconv.Itoa(r), "--ranks", strconv.Itoa(P),
			"--bytes", f.bytes, "--transport", plan.transport, "--algo", f.algo, "--dtype", plan.dtype.String(), "--hosts", strconv.Itoa(plan.hosts),
			"--iters", strconv.Itoa(plan.iters), "--warmup", strconv.Itoa(plan.warmup),
			"--sub-chunk", strconv.Itoa(plan.comm.Collective.SubChunkBytes), "--window", strconv.Itoa(f.window),
			"--log-level", logLevel, "--log-format", "json", "--private-buffers=" + strconv.FormatBool(f.private)}
		if plan.tls {
			n := filepath.Join(tlsDir, fmt.Sprintf("rank%d", r))
			args = append(args, "--tls", "--tls-ca", filepath.Join(tlsDir, "ca.pem"), "--tls-cert", n+".pem", "--tls-key", n+"-key.pem")
		}
		cmd := exec.CommandContext(ctx, exe, args...)
		cmd.Env = append(os.Environ(), allreduceWorkerEnv...)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("starting rank %d: %w", r, err)
		}
		w := &worker{cmd: cmd, stdin: stdin, lines: make(chan allreduceWorkerLine, 16), errs: make(chan error, 1)}
		workers[r] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(w.lines)
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 1<<16), 1<<24)
			for sc.Scan() {
				var l allreduceWorkerLine
				if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
					w.errs <- fmt.Errorf("rank %d printed %q: %w", r, sc.Text(), err)
					return
				}
				w.lines <- l
			}
			io.Copy(io.Discard, stdout)
		}()
	}
	next := func(r int) (allreduceWorkerLine, error) {
		w := workers[r]
		select {
		case l, ok := <-w.lines:
			if !ok {
				select {
				case err := <-w.errs:
					return l, err
				default:
				}
				return l, fmt.Errorf("rank %d exited early (see its log above)", r)
			}
			if l.Error != "" {
				return l, fmt.Errorf("rank %d: %s", r, l.Error)
			}
			return l, nil
		case <-ctx.Done():
			return allreduceWorkerLine{}, fmt.Errorf("waiting for rank %d: %w", r, ctx.Err())
		}
	}
	addrs := make([]string, P)
	for r := range workers {
		l, err := next(r)
		if err != nil {
			return nil, err
		}
		addrs[r] = l.Addr
	}
	msg, _ := json.Marshal(allreduceAddrsLine{Addrs: addrs})
	for r, w := range workers {
		if _, err := w.stdin.Write(append(msg, '\n')); err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
	}
	var results []benchAllReduceResult
	for _, bytes := range plan.sizes {
		ranks := make([]allreduceRankTimes, P)
		for r := range workers {
			l, err := next(r)
			if err != nil {
				return nil, err
			}
			if l.Bytes != bytes {
				return nil, fmt.Errorf("rank %d reported %d bytes, want %d", r, l.Bytes, bytes)
			}
			ranks[r] = allreduceRankTimes{Rank: r, Bytes: l.Bytes, Times: l.Times, Correct: l.Correct}
		}
		results = append(results, allreduceSummarize(plan, bytes, P, ranks))
	}
	for r := range workers {
		if l, err := next(r); err != nil || !l.Done {
			return nil, fmt.Errorf("rank %d did not finish: %v", r, err)
		}
	}
	for r, w := range workers {
		w.stdin.Close()
		if err := w.cmd.Wait(); err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
		workers[r] = nil
	}
	return results, nil
}

func newBenchAllReduceWorkerCmd() *cobra.Command {
	var f benchAllReduceFlags
	var rank int
	cmd := &cobra.Command{
		Use:    "allreduce-worker",
		Short:  "One rank of a multi-process troupe bench allreduce (started by it)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAllReduceWorker(cmd.Context(), os.Stdin, cmd.OutOrStdout(), rank, f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&rank, "rank", 0, "this rank")
	fl.IntVar(&f.ranks, "ranks", 2, "number of ranks")
	fl.StringVar(&f.bytes, "bytes", "16MiB", "sizes")
	fl.StringVar(&f.transport, "transport", "tcp", "tcp, shm, auto or actor")
	fl.StringVar(&f.algo, "algo", "auto", "auto, ring, rd, hier or naive")
	fl.IntVar(&f.hosts, "hosts", 1, "hosts")
	fl.StringVar(&f.dtype, "dtype", "fp32", "fp32, bf16 or fp16")
	fl.IntVar(&f.iters, "iters", 0, "timed iterations")
	fl.IntVar(&f.warmup, "warmup", 3, "untimed iterations")
	fl.StringVar(&f.subChunk, "sub-chunk", "1MiB", "sub-chunk bytes")
	fl.IntVar(&f.window, "window", 0, "window")
	fl.BoolVar(&f.tls, "tls", false, "TLS")
	fl.BoolVar(&f.private, "private-buffers", false, "private buffers")
	fl.StringVar(&f.tlsFiles.CA, "tls-ca", "", "CA certificate")
	fl.StringVar(&f.tlsFiles.Cert, "tls-cert", "", "certificate")
	fl.StringVar(&f.tlsFiles.Key, "tls-key", "", "key")
	return cmd
}

func runAllReduceWorker(ctx context.Context, stdin io.Reader, stdout io.Writer, rank int, f benchAllReduceFlags) error {
	plan, err := allreducePlanOf(f)
	if err != nil {
		return err
	}
	if rank < 0 || rank >= plan.ranks || plan.transport == "local" {
		return fmt.Errorf("%w: rank %d of %d over %s", errUsage, rank, plan.ranks, plan.transport)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	enc := json.NewEncoder(stdout)
	sc := actors.DefaultSystemConfig()
	sc.Remote = true
	sc.Logger = logger.With(zap.Int("rank", rank))
	if plan.tls {
		id, err := pki.Load(f.tlsFiles.CA, f.tlsFiles.Cert, f.tlsFiles.Key)
		if err != nil {
			return err
		}
		sc.TLS, plan.comm.DataPlane.TLS = id, id
	}
	if ids := plan.hostIDs(); ids != nil {
		plan.comm.HostID = ids[rank]
	}
	sys, err := actors.NewSystem(sc)
	if err != nil {
		return err
	}
	// The system is not closed: the process exits when this returns, and
	// protoactor's graceful stop only waits for peers that are leaving too.
	if err := enc.Encode(allreduceWorkerLine{Rank: rank, Addr: sys.Address()}); err != nil {
		return err
	}
	in := bufio.NewReader(stdin)
	line, err := in.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("reading the ranks' addresses: %w", err)
	}
	var al allreduceAddrsLine
	if err := json.Unmarshal(line, &al); err != nil || len(al.Addrs) != plan.ranks {
		return fmt.Errorf("bad addresses line %q: %v", line, err)
	}
	// The parent closes stdin once every rank reported done, or when it
	// dies or gives up: before done, that means exit now.
	stdinClosed := make(chan struct{})
	var finished atomic.Bool
	go func() {
		io.Copy(io.Discard, in)
		if !finished.Load() {
			os.Exit(3)
		}
		close(stdinClosed)
	}()
	comm, err := actors.StartRemote(sys, actors.RemoteWorld{Rank: rank, Addrs: al.Addrs}, plan.comm)
	if err != nil {
		enc.Encode(allreduceWorkerLine{Rank: rank, Error: err.Error()})
		return err
	}
	defer comm.Close()
	// One registered buffer of the largest size for every size: a peer
	// keeps its mapping of each segment it was handed until the
	// connection ends.
	var arena []float32
	if plan.registered {
		if !collective.ReadsRegisteredMemory(comm) {
			return fmt.Errorf("the %s transport does not read registered memory", plan.transport)
		}
		if arena, err = shmem.Alloc(int(slices.Max(plan.sizes) / int64(plan.dtype.Size()))); err != nil {
			return err
		}
		defer shmem.Free(arena)
	}
	for _, bytes := range plan.sizes {
		rt, err := allreduceRank(ctx, comm, plan, bytes, allreduceIters(bytes, plan.iters), plan.warmup, arena)
		if err != nil {
			enc.Encode(allreduceWorkerLine{Rank: rank, Error: err.Error()})
			return err
		}
		if err := enc.Encode(allreduceWorkerLine{Rank: rank, Bytes: bytes, Times: rt.Times, Correct: rt.Correct}); err != nil {
			return err
		}
	}
	// Stay up until the parent heard from every rank: a rank that left as
	// soon as its own last operation completed could cut the last message
	// another rank still waits for.
	finished.Store(true)
	if err := enc.Encode(allreduceWorkerLine{Rank: rank, Done: true}); err != nil {
		return err
	}
	<-stdinClosed
	return nil
}

package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/kernels"
	_ "github.com/troupe-ml/troupe/kernels/cpu"
)

func init() { benchCmd.AddCommand(newBenchGemmCmd()) }

// benchGemmOpts are the flags of troupe bench gemm.
type benchGemmOpts struct {
	m, n, k        int
	transA, transB bool
	threads        int
	iters          int
	samples        int
	minSample      time.Duration
	asJSON         bool
	dtype, cDtype  string
}

// benchGemmResult is what troupe bench gemm --json prints.
type benchGemmResult struct {
	M              int     `json:"m"`
	N              int     `json:"n"`
	K              int     `json:"k"`
	TransA         bool    `json:"trans_a"`
	TransB         bool    `json:"trans_b"`
	Threads        int     `json:"threads"`
	DType          string  `json:"dtype"`
	CDType         string  `json:"c_dtype"`
	SIMD           string  `json:"simd"`
	GFLOPS         float64 `json:"gflops"`
	GFLOPSMin      float64 `json:"gflops_min"`
	GFLOPSMax      float64 `json:"gflops_max"`
	Samples        int     `json:"samples"`
	CallsPerSample int     `json:"calls_per_sample"`
}

// newBenchGemmCmd builds `troupe bench gemm`. It returns a fresh command
// each call: cobra keeps flag values between executions, so tests build one
// per case.
func newBenchGemmCmd() *cobra.Command {
	o := benchGemmOpts{minSample: 300 * time.Millisecond}
	cmd := &cobra.Command{
		Use:   "gemm [--m M --n N --k K] [--trans-a] [--trans-b] [--dtype fp32|bf16|fp16] [--threads T] [--iters N] [--samples S] [--json]",
		Short: "Measure the CPU backend's matrix multiply in GFLOP/s",
		Long: `Times C = op(A)·op(B) with op(A) M×K and op(B) K×N on the CPU backend
(kernels/cpu), as PyTorch's torch.matmul would be timed: one warm-up call,
then --samples samples of back-to-back calls, each lasting at least 0.3 s
unless --iters fixes the calls per sample. GFLOP/s = 2·M·N·K·calls /
seconds; the median is the headline, min and max show the spread. Run it on
an otherwise idle machine, and set GOMAXPROCS to at least --threads.

--dtype bf16 or fp16 makes A, B and C 16-bit (as torch.matmul on bf16
tensors does; --c-dtype fp32 keeps C in fp32), with products and sums in
fp32. The path the product takes is printed: avx512bf16 (the native bf16
micro-kernel, on CPUs with AVX-512 BF16) or widen+… (the operands widened to
fp32 for the fp32 kernel).`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return runBenchGemm(cmd.OutOrStdout(), o)
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return fmt.Errorf("%w: %v", errUsage, err)
	})
	f := cmd.Flags()
	f.IntVar(&o.m, "m", 1024, "rows of op(A) and C")
	f.IntVar(&o.n, "n", 1024, "columns of op(B) and C")
	f.IntVar(&o.k, "k", 1024, "columns of op(A), rows of op(B)")
	f.BoolVar(&o.transA, "trans-a", false, "A is stored K×M (op(A) = Aᵀ)")
	f.BoolVar(&o.transB, "trans-b", false, "B is stored N×K (op(B) = Bᵀ)")
	f.IntVar(&o.threads, "threads", 0, "threads per GEMM (0: GOMAXPROCS)")
	f.IntVar(&o.iters, "iters", 0, "calls per sample (0: as many as fill 0.3 s)")
	f.IntVar(&o.samples, "samples", 5, "timed samples")
	f.BoolVar(&o.asJSON, "json", false, "print one JSON object instead of a line of text")
	f.StringVar(&o.dtype, "dtype", "fp32", "type of A and B (and C): fp32, bf16 or fp16")
	f.StringVar(&o.cDtype, "c-dtype", "", "type of C: fp32, or the --dtype (default)")
	return cmd
}

func (o benchGemmOpts) validate() error {
	for _, c := range []struct {
		flag string
		v    int
	}{{"--m", o.m}, {"--n", o.n}, {"--k", o.k}, {"--samples", o.samples}} {
		if c.v <= 0 {
			return fmt.Errorf("%w: %s must be positive, got %d", errUsage, c.flag, c.v)
		}
	}
	if o.threads < 0 {
		return fmt.Errorf("%w: --threads must be 0 (GOMAXPROCS) or positive, got %d", errUsage, o.threads)
	}
	if o.iters < 0 {
		return fmt.Errorf("%w: --iters must be 0 (automatic) or positive, got %d", errUsage, o.iters)
	}
	dt, err := kernels.ParseDType(o.dtype)
	if err != nil {
		return fmt.Errorf("%w: --dtype: %v", errUsage, err)
	}
	if o.cDtype != "" {
		ct, err := kernels.ParseDType(o.cDtype)
		if err != nil {
			return fmt.Errorf("%w: --c-dtype: %v", errUsage, err)
		}
		if ct != kernels.F32 && ct != dt {
			return fmt.Errorf("%w: --c-dtype %v with --dtype %v: C is fp32 or the operands' type", errUsage, ct, dt)
		}
	}
	return nil
}

// types are the benchmark's operand and C types (validated).
func (o benchGemmOpts) types() (ab, c kernels.DType) {
	ab, _ = kernels.ParseDType(o.dtype)
	c = ab
	if o.cDtype != "" {
		c, _ = kernels.ParseDType(o.cDtype)
	}
	return ab, c
}

func runBenchGemm(w io.Writer, o benchGemmOpts) error {
	be, err := kernels.Open("cpu", kernels.Options{Threads: o.threads})
	if err != nil {
		return fmt.Errorf("opening the cpu backend: %w", err)
	}
	g := kernels.GemmArgs{TransA: o.transA, TransB: o.transB, M: o.m, N: o.n, K: o.k, Alpha: 1}
	r := rand.New(rand.NewPCG(1, 2))
	abType, cType := o.types()
	alloc := be.Alloc
	path := be.Caps().SIMD
	if abType != kernels.F32 {
		lp, ok := kernels.LowPrecisionOf(be)
		if !ok {
			return fmt.Errorf("the %s backend has no %v kernels", be.Caps().Device, abType)
		}
		alloc = func(n int) kernels.Buffer { return lp.AllocAs(n, abType) }
		path = be.Caps().LowGemm
		if abType == kernels.F16 {
			path = "widen+" + be.Caps().SIMD
		}
	}
	a, b := alloc(o.m*o.k), alloc(o.k*o.n)
	be.Upload(a, randomValues(r, o.m*o.k))
	be.Upload(b, randomValues(r, o.k*o.n))
	c := be.Alloc(o.m * o.n)
	if cType != kernels.F32 {
		c = alloc(o.m * o.n)
	}
	call := func(n int) (time.Duration, error) {
		start := time.Now()
		for range n {
			be.Gemm(g, a, b, c)
		}
		err := be.Sync()
		return time.Since(start), err
	}

	// Warm up (pack buffers, caches, the goroutine pool), then size a
	// sample: double the calls until they take a tenth of a sample.
	calls := o.iters
	if _, err := call(1); err != nil {
		return fmt.Errorf("gemm: %w", err)
	}
	if calls == 0 {
		calls = 1
		for {
			d, err := call(calls)
			if err != nil {
				return fmt.Errorf("gemm: %w", err)
			}
			if d >= o.minSample/10 {
				calls = max(1, int(float64(calls)*float64(o.minSample)/float64(d)+0.999))
				break
			}
			calls *= 2
		}
	}
	flops := 2 * float64(o.m) * float64(o.n) * float64(o.k)
	rates := make([]float64, o.samples)
	for i := range rates {
		d, err := call(calls)
		if err != nil {
			return fmt.Errorf("gemm: %w", err)
		}
		rates[i] = flops * float64(calls) / d.Seconds() / 1e9
		logger.Debug("gemm sample", zap.Int("sample", i), zap.Int("calls", calls), zap.Duration("elapsed", d), zap.Float64("gflops", rates[i]))
	}
	slices.Sort(rates)
	caps := be.Caps()
	res := benchGemmResult{
		M: o.m, N: o.n, K: o.k, TransA: o.transA, TransB: o.transB,
		Threads: caps.Threads, SIMD: path, DType: abType.String(), CDType: cType.String(),
		GFLOPS: median(rates), GFLOPSMin: rates[0], GFLOPSMax: rates[len(rates)-1],
		Samples: o.samples, CallsPerSample: calls,
	}
	if o.asJSON {
		enc := json.NewEncoder(w)
		return enc.Encode(res)
	}
	op := func(t bool) string {
		if t {
			return "T"
		}
		return "N"
	}
	_, err = fmt.Fprintf(w, "gemm %d×%d×%d %s%s %s (C %s) threads=%d %s: %.1f GFLOP/s median (min %.1f, max %.1f) over %d samples of %d calls\n",
		o.m, o.n, o.k, op(o.transA), op(o.transB), res.DType, res.CDType, res.Threads, res.SIMD, res.GFLOPS, res.GFLOPSMin, res.GFLOPSMax, res.Samples, calls)
	return err
}

// randomValues returns n values uniform in [-1, 1): a product of such
// matrices has no denormals or overflow to distort the timing.
func randomValues(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.Float64()*2 - 1)
	}
	return x
}

// median of sorted values.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

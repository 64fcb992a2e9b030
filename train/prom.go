package train

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// promMetrics are a run's Prometheus metrics, named by Prometheus's
// conventions (the troupe_ prefix, base units, _total counters): what the
// step loop reports of every step (StepMetrics), of every generation
// (WorldInfo) and of every checkpoint write. A nil *promMetrics records
// nothing. Every method may be called from any goroutine.
type promMetrics struct {
	steps, samples, tokens           prometheus.Counter
	step, lastStep                   prometheus.Gauge
	stepSeconds                      prometheus.Histogram
	samplesPerS, tokensPerS          prometheus.Gauge
	loss, evalLoss, lr               prometheus.Gauge
	compute, comm, bubble            prometheus.Counter
	sent                             *prometheus.CounterVec
	paramBytes, gradBytes, optBytes  prometheus.Gauge
	actBytes                         prometheus.Gauge
	generation, worldSize, standby   prometheus.Gauge
	stragglerLag, stragglerRank      prometheus.Gauge
	rankCompute                      *prometheus.GaugeVec
	lossScale                        prometheus.Gauge
	skipped                          prometheus.Counter
	syncBytes, syncRounds            prometheus.Counter
	staleness                        prometheus.Histogram
	rejected                         prometheus.Counter
	collective                       *prometheus.HistogramVec
	resumeSeconds                    prometheus.Histogram
	ckptPause, ckptWrite             prometheus.Histogram
	ckptBytes, ckptWrites, ckptFails prometheus.Counter
	dropped                          *prometheus.CounterVec
}

// newPromMetrics registers a run's metrics on reg, each with labels (the
// agent's node name; none for troupe train).
func newPromMetrics(reg prometheus.Registerer, labels prometheus.Labels) (*promMetrics, error) {
	f := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "troupe", Name: name, Help: help, ConstLabels: labels}
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts(f(name, help)))
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts(f(name, help)))
	}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		o := f(name, help)
		return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: o.Namespace, Name: o.Name, Help: o.Help, ConstLabels: labels, Buckets: buckets})
	}
	seconds := prometheus.ExponentialBuckets(0.001, 2, 17) // 1 ms to 65 s
	p := &promMetrics{
		steps:         counter("steps_total", "Optimizer steps completed."),
		samples:       counter("samples_total", "Training samples consumed by completed steps."),
		tokens:        counter("tokens_total", "Training tokens consumed by completed steps (sequence models)."),
		step:          gauge("step", "The last completed step."),
		lastStep:      gauge("last_step_timestamp_seconds", "Unix time the last step completed (alert on a stall)."),
		stepSeconds:   hist("step_duration_seconds", "Wall time of a step.", seconds),
		samplesPerS:   gauge("samples_per_second", "Training throughput of the last step."),
		tokensPerS:    gauge("tokens_per_second", "Training throughput of the last step, in tokens (sequence models)."),
		loss:          gauge("loss", "Mean training loss of the last step."),
		evalLoss:      gauge("eval_loss", "The last held-out loss."),
		lr:            gauge("learning_rate", "Learning rate of the last step."),
		compute:       counter("compute_seconds_total", "Time the slowest rank computed, summed over steps."),
		comm:          counter("communication_seconds_total", "Time the slowest rank spent in collectives, summed over steps."),
		bubble:        counter("pipeline_bubble_seconds_total", "Idle time per pipeline stage, summed over steps."),
		sent:          prometheus.NewCounterVec(prometheus.CounterOpts(f("collective_sent_bytes_total", "Bytes the busiest rank sent in collectives, by kind.")), []string{"kind"}),
		paramBytes:    gauge("param_bytes", "Parameter bytes the fullest rank holds between steps."),
		gradBytes:     gauge("gradient_bytes", "Gradient bytes the fullest rank holds between steps."),
		optBytes:      gauge("optimizer_bytes", "Optimizer-state bytes the fullest rank holds."),
		actBytes:      gauge("activation_peak_bytes", "Activation bytes at the peak of the last step (stage 0)."),
		generation:    gauge("generation", "The elastic generation the job trains in (0: not elastic)."),
		worldSize:     gauge("world_size", "Members that hold a place in the world (dp × pp × tp)."),
		standby:       gauge("standby_members", "Members waiting without a place."),
		stragglerLag:  gauge("straggler_lag_seconds", "How much longer the slowest replica computed in the last step than its part's median replica."),
		stragglerRank: gauge("straggler_rank", "The mesh rank of that replica (-1: no replicas to compare)."),
		lossScale:     gauge("loss_scale", "The fp16 dynamic loss scale of the last step (0 without fp16)."),
		skipped:       counter("skipped_steps_total", "Steps whose gradients overflowed under the fp16 loss scale and that no rank applied."),
		syncBytes:     counter("sync_sent_bytes_total", "Bytes the busiest rank sent to its part's other replicas: gradients under --sync step, rounds under local-sgd and diloco."),
		syncRounds:    counter("sync_rounds_total", "Synchronisation rounds completed (local-sgd, diloco)."),
		staleness:     hist("async_staleness", "Updates the parameter server applied between the weights a gradient was computed on and its own (--sync async).", prometheus.LinearBuckets(0, 1, 17)),
		rejected:      counter("async_rejected_total", "Gradients the parameter server rejected as computed on weights more than --max-staleness updates old (--sync async)."),
		rankCompute:   prometheus.NewGaugeVec(prometheus.GaugeOpts(f("rank_compute_seconds", "Time each rank computed in the last step.")), []string{"rank"}),
		collective: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "troupe", Name: "collective_duration_seconds",
			Help:        "Time from a rank entering a collective operation to its completion there, by kind and rank.",
			ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)}, []string{"kind", "rank"}),
		resumeSeconds: hist("resume_duration_seconds", "Time from a generation's commit to its first completed step.", seconds),
		ckptPause:     hist("checkpoint_pause_seconds", "Time the step loop paused for a checkpoint.", seconds),
		ckptWrite:     hist("checkpoint_write_duration_seconds", "Time to write and commit a checkpoint.", seconds),
		ckptBytes:     counter("checkpoint_written_bytes_total", "Bytes of checkpoint files written."),
		ckptWrites:    counter("checkpoints_total", "Checkpoints written and committed."),
		ckptFails:     counter("checkpoint_failures_total", "Checkpoint writes that failed."),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts(f("dropped_messages_total",
			"Messages from a peer that did not decode and were dropped (each logged), by message.")), []string{"message"}),
	}
	for _, c := range []prometheus.Collector{p.steps, p.samples, p.tokens, p.step, p.lastStep, p.stepSeconds, p.samplesPerS, p.tokensPerS,
		p.loss, p.evalLoss, p.lr, p.compute, p.comm, p.bubble, p.sent, p.paramBytes, p.gradBytes, p.optBytes, p.actBytes,
		p.generation, p.worldSize, p.standby, p.stragglerLag, p.stragglerRank, p.rankCompute, p.collective, p.lossScale, p.skipped, p.syncBytes, p.syncRounds, p.staleness, p.rejected, p.resumeSeconds, p.ckptPause, p.ckptWrite, p.ckptBytes, p.ckptWrites, p.ckptFails, p.dropped} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("train: registering the Prometheus metrics: %w", err)
		}
	}
	for _, k := range sentKinds {
		p.sent.WithLabelValues(k) // present from the start, at 0
	}
	p.dropped.WithLabelValues("progress")
	return p, nil
}

var sentKinds = []string{"all_reduce", "reduce_scatter", "all_gather", "broadcast"}

// kindLabel is a collective kind's name as a label value: AllReduce is
// all_reduce.
func kindLabel(kind string) string {
	var b strings.Builder
	for i, c := range kind {
		if unicode.IsUpper(c) {
			if i > 0 {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}

// observeStep records a completed step.
func (p *promMetrics) observeStep(m StepMetrics) {
	if p == nil {
		return
	}
	p.steps.Inc()
	p.samples.Add(float64(m.Batch))
	if m.TokensPerS > 0 && m.SamplesPerS > 0 {
		p.tokens.Add(float64(m.Batch) * m.TokensPerS / m.SamplesPerS)
	}
	p.step.Set(float64(m.Step))
	p.lastStep.SetToCurrentTime()
	p.stepSeconds.Observe(m.StepMs / 1e3)
	p.samplesPerS.Set(m.SamplesPerS)
	p.tokensPerS.Set(m.TokensPerS)
	p.loss.Set(m.Loss)
	if m.EvalLoss > 0 {
		p.evalLoss.Set(m.EvalLoss)
	}
	p.lr.Set(m.LR)
	p.compute.Add(m.ComputeMs / 1e3)
	p.comm.Add(m.CommMs / 1e3)
	p.bubble.Add(m.BubbleMs / 1e3)
	for i, b := range []int64{m.SentAllReduceBytes, m.SentReduceScatterBytes, m.SentAllGatherBytes, m.SentBroadcastBytes} {
		p.sent.WithLabelValues(sentKinds[i]).Add(float64(b))
	}
	p.paramBytes.Set(float64(m.ParamBytes))
	p.gradBytes.Set(float64(m.GradHeldBytes))
	p.optBytes.Set(float64(m.OptimizerBytes))
	p.actBytes.Set(float64(m.PeakActBytes))
	p.generation.Set(float64(m.Generation))
	p.stragglerLag.Set(m.StragglerLagMs / 1e3)
	p.stragglerRank.Set(float64(m.StragglerRank))
	p.lossScale.Set(m.LossScale)
	if m.Skipped {
		p.skipped.Inc()
	}
	p.syncBytes.Add(float64(m.SyncBytes))
	if m.SyncRound {
		p.syncRounds.Inc()
	}
	if a := m.Async; a != nil {
		p.staleness.Observe(float64(a.Staleness))
		p.rejected.Add(float64(a.Rejected))
	}
	for r, ms := range m.RankComputeMs {
		p.rankCompute.WithLabelValues(strconv.Itoa(r)).Set(ms / 1e3)
	}
	for _, op := range m.Collectives {
		p.collective.WithLabelValues(kindLabel(op.Kind), strconv.Itoa(op.Rank)).Observe(op.Seconds)
	}
	if m.ResumeMs > 0 {
		p.resumeSeconds.Observe(m.ResumeMs / 1e3)
	}
	if m.CkptPauseMs > 0 {
		p.ckptPause.Observe(m.CkptPauseMs / 1e3)
	}
}

// observeWorld records a generation formed.
func (p *promMetrics) observeWorld(w WorldInfo) {
	p.setWorld(w.Generation, len(w.Members), len(w.Standby))
}

// observeDropped counts a message from a peer that did not decode.
func (p *promMetrics) observeDropped(message string) {
	if p == nil {
		return
	}
	p.dropped.WithLabelValues(message).Inc()
}

// setWorld records the world: its generation, members with a place, and
// members on standby.
func (p *promMetrics) setWorld(gen uint64, members, standby int) {
	if p == nil {
		return
	}
	p.generation.Set(float64(gen))
	p.worldSize.Set(float64(members))
	p.standby.Set(float64(standby))
}

// observeCheckpoint records a checkpoint write: its bytes and time, or
// its failure.
func (p *promMetrics) observeCheckpoint(bytes int64, d time.Duration, err error) {
	if p == nil {
		return
	}
	if err != nil {
		p.ckptFails.Inc()
		return
	}
	p.ckptWrites.Inc()
	p.ckptBytes.Add(float64(bytes))
	p.ckptWrite.Observe(d.Seconds())
}

// metricsServer serves /metrics (Prometheus), /healthz (the process
// answers), /readyz (it trains: 503 until then) and /debug/flight (the
// flight recorders of the ranks the process reaches, as JSON) on
// Config.MetricsAddr.
type metricsServer struct {
	srv   *http.Server
	addr  string // where it listens
	ready atomic.Bool
	done  chan struct{}
}

// serveMetrics listens on addr at once (a bad address fails the run
// before it starts) and serves g there until close.
func serveMetrics(addr string, g prometheus.Gatherer, flights http.Handler, log *zap.Logger) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fieldErr("MetricsAddr", "%q: %v", addr, err)
	}
	s := &metricsServer{addr: ln.Addr().String(), done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorLog: zap.NewStdLog(log)}))
	paths := []string{"/metrics", "/healthz", "/readyz"}
	if flights != nil {
		mux.Handle("/debug/flight", flights)
		paths = append(paths, "/debug/flight")
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not training yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", zap.Error(err))
		}
	}()
	log.Info("serving metrics", zap.String("addr", s.addr), zap.Strings("paths", paths))
	return s, nil
}

// setReady says whether the run trains now (/readyz).
func (s *metricsServer) setReady(ready bool) {
	if s != nil {
		s.ready.Store(ready)
	}
}

// close stops the server (a scrape in flight gets up to a second) and
// waits for its goroutine.
func (s *metricsServer) close() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
	<-s.done
}

// promRun is a run's metrics and where they are served.
type promRun struct {
	metrics *promMetrics
	srv     *metricsServer
	reg     prometheus.Registerer // Options.Registerer, unregistered at close
	cs      []prometheus.Collector
}

// openProm makes a run's metrics when anything wants them
// (Config.MetricsAddr, Options.Registerer; else a nil *promRun records
// nothing): registered on a registry of their own, with the Go runtime's
// and the process's, served on MetricsAddr, and on Options.Registerer.
func openProm(cfg *Config, o Options, labels prometheus.Labels, flights *flightSource, log *zap.Logger) (*promRun, error) {
	if cfg.MetricsAddr == "" && o.Registerer == nil {
		return nil, nil
	}
	if len(o.MetricLabels) > 0 {
		all := prometheus.Labels{}
		for k, v := range o.MetricLabels {
			all[k] = v
		}
		for k, v := range labels {
			if _, dup := all[k]; dup {
				return nil, fmt.Errorf("%w: Options.MetricLabels sets %q, a label troupe sets itself", ErrConfig, k)
			}
			all[k] = v
		}
		labels = all
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, err
	}
	tee := &teeRegisterer{regs: []prometheus.Registerer{reg}}
	if o.Registerer != nil {
		tee.regs = append(tee.regs, o.Registerer)
	}
	m, err := newPromMetrics(tee, labels)
	if err != nil {
		tee.unregisterAll(o.Registerer)
		var dup prometheus.AlreadyRegisteredError
		if errors.As(err, &dup) {
			err = fmt.Errorf("%w: Options.Registerer holds another run's metrics with the same labels %v: give each run that shares it Options.MetricLabels of its own (e.g. {\"run\": \"a\"})", err, labels)
		}
		return nil, err
	}
	p := &promRun{metrics: m, reg: o.Registerer, cs: tee.added}
	if cfg.MetricsAddr != "" {
		if p.srv, err = serveMetrics(cfg.MetricsAddr, reg, flights, log); err != nil {
			p.close()
			return nil, err
		}
	}
	return p, nil
}

// setReady says whether the run trains now (/readyz).
func (p *promRun) setReady(ready bool) {
	if p != nil {
		p.srv.setReady(ready)
	}
}

// close stops serving and unregisters the metrics from
// Options.Registerer.
func (p *promRun) close() {
	if p == nil {
		return
	}
	p.srv.close()
	if p.reg != nil {
		for _, c := range p.cs {
			p.reg.Unregister(c)
		}
	}
}

// teeRegisterer registers every collector on all of regs (our own
// registry and an embedder's), remembering what it added.
type teeRegisterer struct {
	regs  []prometheus.Registerer
	added []prometheus.Collector
}

func (t *teeRegisterer) Register(c prometheus.Collector) error {
	for i, r := range t.regs {
		if err := r.Register(c); err != nil {
			for _, done := range t.regs[:i] {
				done.Unregister(c)
			}
			return err
		}
	}
	t.added = append(t.added, c)
	return nil
}

func (t *teeRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

func (t *teeRegisterer) Unregister(c prometheus.Collector) bool {
	ok := true
	for _, r := range t.regs {
		ok = r.Unregister(c) && ok
	}
	return ok
}

// unregisterAll takes what t added off the embedder's registry.
func (t *teeRegisterer) unregisterAll(r prometheus.Registerer) {
	if r == nil {
		return
	}
	for _, c := range t.added {
		r.Unregister(c)
	}
}

// m is the run's metrics (nil: none).
func (p *promRun) m() *promMetrics {
	if p == nil {
		return nil
	}
	return p.metrics
}

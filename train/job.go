package train

import (
	"math"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/worker"
)

// job is what every part of a run shares: the configuration with its
// defaults, the data, the model's shape and its cut into pipeline stages.
type job struct {
	cfg         Config
	train, test data.Dataset
	model       nn.Spec
	cuts        []pipeline.Range
	// steps is the run's last step (Steps, or Epochs' worth).
	steps int
	// describe names the model; params counts its parameters.
	describe string
	params   int
	// context is the tokens of one sample (a sequence model; 0
	// otherwise); accuracy says the model's outputs are class scores.
	context  int
	accuracy bool
	// straggler is a test's slow worker (envStraggler; nil: none).
	straggler *worker.Straggler
	// overflow is a test's overflowing gradient (envOverflow; nil: none).
	overflow *worker.Overflow
}

// openJob validates cfg, opens the data and cuts the model into cfg.PP
// stages (StageLayers, or balanced by Partition).
func openJob(cfg Config, given *givenData) (*job, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return openValidJob(cfg, given)
}

// givenData is data a program gives a run in place of Config.Data
// (Options.Train and Test).
type givenData struct {
	train, test data.Dataset
}

// openValidJob is openJob for a configuration validated already (an
// agent's, validated as one shard group: AgentConfig.Validate).
func openValidJob(cfg Config, given *givenData) (*job, error) {
	cfg = cfg.withDefaults()
	j := &job{cfg: cfg, steps: cfg.Steps}
	var err error
	switch {
	case given != nil:
		j.train, j.test = given.train, given.test
		if j.cfg.Data == "" {
			j.cfg.Data = j.train.Name() // what the summary and checkpoints record
		}
	default:
		if j.train, j.test, err = OpenData(&j.cfg); err != nil {
			return nil, err
		}
	}
	if cfg.Epochs > 0 {
		j.steps = int(math.Ceil(cfg.Epochs * float64(j.train.Len()) / float64(cfg.Batch)))
	}
	whole, err := BuildModel(&j.cfg, cpu.New(1), j.train)
	if err != nil {
		return nil, err
	}
	j.model, j.describe, j.params = whole.Spec, whole.Describe, whole.Set.Len()
	j.context, j.accuracy = whole.Context, whole.Accuracy
	if err := nn.CheckTPOf(j.model, j.place(0)); err != nil {
		if cfg.SequenceParallel && nn.CheckTPOf(j.model, nn.TP{Size: cfg.TP}) == nil {
			return nil, modelErr("SequenceParallel", err)
		}
		return nil, fieldErr("TP", "%d: %s", cfg.TP, modelErr("TP", err).Msg)
	}
	if j.cuts, err = cutStages(&j.cfg, whole, j.train); err != nil {
		return nil, err
	}
	if testHooks != nil {
		if j.straggler, j.overflow, err = testHooks(); err != nil {
			return nil, err
		}
	}
	return j, nil
}

// cutStages cuts model into cfg.PP stages: as StageLayers says, or
// balanced by parameter count, or by measured time.
func cutStages(cfg *Config, model *nn.Model, ds data.Dataset) ([]pipeline.Range, error) {
	if cfg.PP == 1 {
		return []pipeline.Range{{Lo: 0, Hi: model.Units}}, nil
	}
	var cuts []pipeline.Range
	var err error
	switch {
	case cfg.StageLayers != "":
		cuts, err = pipeline.ParseStageLayers(cfg.StageLayers, model.Units, cfg.PP)
	case cfg.Partition == ByTime:
		cuts, err = timeCuts(cfg, model, ds)
	default:
		var costs []float64
		if costs, err = pipeline.ParamCosts(pipeline.LayerParams(model)); err == nil {
			cuts, err = pipeline.Partition(costs, cfg.PP)
		}
	}
	if err != nil {
		return nil, fieldErr("PP", "%d: cutting %d units into %d stages: %v", cfg.PP, model.Units, cfg.PP, err)
	}
	return cuts, nil
}

// workerSpec is the spec every worker of the job is built from.
func (j *job) workerSpec() *worker.Spec {
	c := &j.cfg
	return &worker.Spec{
		Model: j.model, Cuts: j.cuts, TP: c.TP, SP: c.SequenceParallel, Zero: c.Zero, ZeroGroup: c.ZeroGroup, Schedule: c.PipelineSchedule, MicroBatches: c.microBatches(), Recompute: c.Recompute,
		Optim: c.Optim, ClipNorm: c.ClipNorm, BucketBytes: int64(c.BucketMB * (1 << 20)),
		Seed: c.Seed, Init: c.Init, Shuffle: c.Shuffle, Train: j.train, Test: j.test, CkptDir: c.CkptDir, Straggler: j.straggler, Overflow: j.overflow, Precision: c.Precision.kernel(), ReduceDType: c.ReduceDType.kernel(),
		Sync: c.sync(),
	}
}

// replicaSpec is the spec of asynchronous replica r, a world of one: the
// test's straggler, when it names replica r, is its rank 0.
func (j *job) replicaSpec(r int) *worker.Spec {
	s := j.workerSpec()
	if st := j.straggler; st != nil {
		s.Straggler = nil
		if st.Rank == r {
			s.Straggler = &worker.Straggler{Rank: 0, Delay: st.Delay}
		}
	}
	return s
}

// serverJob is j for its parameter servers (Sync async): a world of
// Servers ranks, each with the whole model when one, else ZeRO-3's shard
// of it.
func (j *job) serverJob() *job {
	s := *j
	s.cfg.DP, s.cfg.Procs, s.cfg.Zero, s.cfg.ZeroGroup = max(1, j.cfg.Servers), 0, 0, 0
	if s.cfg.DP > 1 {
		s.cfg.Zero = 3
	}
	s.straggler = nil
	return &s
}

// zeroGroup is the ZeRO shard group's size in a world of dp replicas (0:
// no ZeRO).
func (j *job) zeroGroup(dp int) int {
	switch {
	case j.cfg.Zero == 0:
		return 0
	case j.cfg.ZeroGroup > 0:
		return j.cfg.ZeroGroup
	}
	return dp
}

// zeroShards is the ZeRO-3 shard group's size, 0 below stage 3: the
// replicas whose weight checksums differ (each hashes its own shard).
func (j *job) zeroShards() int {
	if j.cfg.Zero < 3 {
		return 0
	}
	return j.zeroGroup(j.cfg.DP)
}

// place is tensor-parallel shard rank's place.
func (j *job) place(rank int) nn.TP {
	return nn.TP{Rank: rank, Size: j.cfg.TP, SP: j.cfg.SequenceParallel}
}

// tokensPerRow is the tokens of one sample (language models), 0 otherwise.
func (j *job) tokensPerRow() int { return j.context }

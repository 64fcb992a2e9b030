package report

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/train"
)

// A settings table shows each run's configuration (when the run has one)
// and what its metrics lines carry about the world it trained in, one
// column per run. A value is "" where the run says nothing of it; a row
// nobody has a value for is left out.
type settingsTable struct {
	// Runs are the columns' heads (only shown with several runs).
	Runs []string
	// Groups are the rows, by where their values come from.
	Groups []settingsGroup
}

type settingsGroup struct {
	Title string
	Note  string
	Rows  []settingsRow
}

type settingsRow struct {
	Name   string
	Values []string
	// Differs marks a row whose runs do not all agree.
	Differs bool
}

// Cols is the number of columns of the table, the row names' included.
func (t settingsTable) Cols() int { return len(t.Runs) + 1 }

// Several says the table compares runs (its columns have heads).
func (t settingsTable) Several() bool { return len(t.Runs) > 1 }

func settings(runs []Run) settingsTable {
	t := settingsTable{}
	known, configured := 0, make([]bool, len(runs))
	for i, r := range runs {
		t.Runs = append(t.Runs, r.Name)
		if r.Config != nil {
			known++
			configured[i] = true
		}
	}
	all := make([]bool, len(runs))
	for i := range all {
		all[i] = true
	}
	if known > 0 {
		g := settingsGroup{Title: "Configuration"}
		from := make([]string, len(runs))
		for i, r := range runs {
			if r.Config != nil {
				from[i] = r.ConfigFrom
			}
		}
		// Where each came from is no setting: it is never highlighted.
		g.Rows = append(g.Rows, settingsRow{Name: "read from", Values: from})
		for _, s := range configRows {
			vals := make([]string, len(runs))
			for i, r := range runs {
				if r.Config != nil {
					vals[i] = s.value(r.Config)
				}
			}
			if slices.ContainsFunc(vals, func(v string) bool { return v != "" }) {
				g.Rows = append(g.Rows, row(s.name, vals, configured))
			}
		}
		if known < len(runs) {
			g.Note = "A run without a value here was given no configuration."
		}
		t.Groups = append(t.Groups, g)
	}
	g := settingsGroup{Title: "From the metrics lines"}
	if known == 0 {
		g.Note = "The metrics lines do not carry the run's configuration: troupe report --config adds it, " +
			"from the run's checkpoint directory (every checkpoint's manifest carries it) or a JSON or YAML file of it."
	}
	for _, s := range metricsRows {
		vals := make([]string, len(runs))
		for i, r := range runs {
			vals[i] = s.value(r.Steps)
		}
		if slices.ContainsFunc(vals, func(v string) bool { return v != "" }) {
			g.Rows = append(g.Rows, row(s.name, vals, all))
		}
	}
	t.Groups = append(t.Groups, g)
	return t
}

// row is a settings row; it differs where two of the runs that say
// (known) do not agree (a run without a configuration disagrees with
// nobody).
func row(name string, vals []string, known []bool) settingsRow {
	r := settingsRow{Name: name, Values: vals}
	first := -1
	for i, v := range vals {
		switch {
		case !known[i]:
		case first < 0:
			first = i
		case v != vals[first]:
			r.Differs = true
		}
	}
	return r
}

// configRows are the settings a reader of a run looks for first, in the
// order of troupe train's flags; the report's "every setting" lists the
// rest.
var configRows = []struct {
	name  string
	value func(*train.Config) string
}{
	{"model", modelOf},
	{"data", dataOf},
	{"batch", batchOf},
	{"steps", stepsOf},
	{"optimizer", optimizerOf},
	{"learning rate", func(c *train.Config) string {
		if c.LR > 0 {
			return num(c.LR)
		}
		return ""
	}},
	{"lr schedule", scheduleOf},
	{"gradient clipping", func(c *train.Config) string {
		if c.ClipNorm > 0 {
			return "to a global norm of " + num(c.ClipNorm)
		}
		return "off"
	}},
	{"precision", precisionOf},
	{"parallelism", parallelismOf},
	{"synchronisation", syncOf},
	{"seed", func(c *train.Config) string { return strconv.FormatUint(c.Seed, 10) }},
	{"initial weights", func(c *train.Config) string { return c.Init }},
	{"evaluation", evalOf},
	{"checkpoints", ckptOf},
	{"device", func(c *train.Config) string {
		if c.Device != "" && c.Threads > 0 {
			return fmt.Sprintf("%s, %s", c.Device, count(c.Threads, "thread"))
		}
		return c.Device
	}},
}

// modelOf is the model and every option of it, the run's or the
// model's default ("layers from the data" for an option without one).
func modelOf(c *train.Config) string {
	def, err := nn.Lookup(c.Model)
	if err != nil {
		return c.Model
	}
	var parts []string
	for _, o := range def.Options {
		v, set := c.ModelArgs[o.Name]
		switch {
		case set:
		case o.Default != "":
			v = o.Default
		default:
			v = "from the data"
		}
		parts = append(parts, o.Name+" "+v)
	}
	s := def.Name
	if len(parts) > 0 {
		s += ": " + strings.Join(parts, ", ")
	}
	if def.Data != "mnist" && c.Context > 0 {
		s += fmt.Sprintf(", context %d", c.Context)
	}
	return s
}

func dataOf(c *train.Config) string {
	s := c.Data
	if s == "" {
		// train.OpenData's default: the model's.
		def, err := nn.Lookup(c.Model)
		if err != nil || def.Data == "" {
			return ""
		}
		s = fmt.Sprintf("%s (the %s's default)", def.Data, def.Name)
	}
	if c.Vocab != "" && !strings.HasPrefix(s, "mnist") && !strings.HasPrefix(s, "synthetic") && !strings.Contains(s, ".safetensors") { // text data
		s += ", " + c.Vocab + " vocabulary"
	}
	if c.Shuffle {
		return s + ", shuffled every epoch"
	}
	return s + ", in order"
}

func batchOf(c *train.Config) string {
	if c.Batch <= 0 {
		return ""
	}
	s := fmt.Sprintf("%d (global)", c.Batch)
	if c.Accum > 1 {
		s += fmt.Sprintf(", %d accumulation steps", c.Accum)
	}
	return s
}

func stepsOf(c *train.Config) string {
	var s string
	switch {
	case c.Epochs > 0:
		s = num(c.Epochs) + " epochs"
	case c.Steps > 0:
		s = strconv.Itoa(c.Steps)
	}
	if c.Resume {
		s = strings.TrimPrefix(s+", resumed from the latest checkpoint", ", ")
	}
	return s
}

func optimizerOf(c *train.Config) string {
	o := c.Optim
	if o.Name == "" {
		return ""
	}
	parts := []string{o.Name}
	switch o.Name {
	case "sgd":
		if o.Momentum != 0 {
			m := "momentum " + num32(o.Momentum)
			if o.Nesterov {
				m += " (Nesterov)"
			}
			parts = append(parts, m)
		}
		if o.Dampening != 0 {
			parts = append(parts, "dampening "+num32(o.Dampening))
		}
	case "adamw":
		parts = append(parts, "β "+num32(o.Beta1)+", "+num32(o.Beta2), "ε "+num32(o.Eps))
	}
	if o.WeightDecay != 0 {
		parts = append(parts, "weight decay "+num32(o.WeightDecay))
	}
	return strings.Join(parts, ", ")
}

func scheduleOf(c *train.Config) string {
	var s string
	switch c.Schedule {
	case train.Cosine:
		s = "cosine to " + num(c.MinLRFactor) + " × lr"
		if c.MinLRFactor == 0 {
			s = "cosine to 0"
		}
	case "":
		return ""
	default:
		s = string(c.Schedule)
	}
	if c.Warmup > 0 {
		s += fmt.Sprintf(", after %d warm-up steps", c.Warmup)
	}
	return s
}

func precisionOf(c *train.Config) string {
	s := string(c.Precision)
	if s == "" {
		s = string(train.FP32)
	}
	if c.ReduceDType != "" && c.ReduceDType != train.FP32 {
		s += ", gradients reduced in " + string(c.ReduceDType)
	}
	return s
}

func parallelismOf(c *train.Config) string {
	one := func(v int) int { return max(v, 1) }
	s := fmt.Sprintf("dp %d × pp %d × tp %d", one(c.DP), one(c.PP), one(c.TP))
	if c.PP > 1 {
		s += fmt.Sprintf(", %d micro-batches, %s", one(c.MicroBatches), c.PipelineSchedule)
		if c.StageLayers != "" {
			s += ", stages of " + c.StageLayers + " units"
		}
		if c.Recompute {
			s += ", recompute"
		}
	}
	if c.SequenceParallel {
		s += ", sequence parallel"
	}
	if c.Zero > 0 {
		s += fmt.Sprintf(", ZeRO-%d", c.Zero)
		if c.ZeroGroup > 0 {
			s += fmt.Sprintf(" in groups of %d", c.ZeroGroup)
		}
	}
	if c.Procs > 0 {
		s += fmt.Sprintf(", %d processes", c.Procs)
	}
	return s
}

func syncOf(c *train.Config) string {
	switch c.Sync {
	case "", train.SyncStep:
		return ""
	case train.SyncLocalSGD:
		return fmt.Sprintf("local-sgd, rounds of %d steps", c.SyncEvery)
	case train.SyncDiLoCo:
		return fmt.Sprintf("diloco, rounds of %d steps, outer lr %s, momentum %s", c.SyncEvery, num(c.OuterLR), num(c.OuterMomentum))
	case train.SyncAsync:
		return fmt.Sprintf("async, at most %d updates stale, %d parameter servers", c.MaxStaleness, max(c.Servers, 1))
	}
	return string(c.Sync)
}

func evalOf(c *train.Config) string {
	s := "at the end"
	if c.EvalEvery > 0 {
		s = fmt.Sprintf("every %d steps", c.EvalEvery)
	}
	if c.EvalBatches > 0 {
		s += fmt.Sprintf(", %d batches each", c.EvalBatches)
	}
	return s
}

func ckptOf(c *train.Config) string {
	if c.CkptEvery <= 0 || c.CkptDir == "" {
		return ""
	}
	s := fmt.Sprintf("every %d steps in %s", c.CkptEvery, c.CkptDir)
	if c.Keep > 0 {
		s += fmt.Sprintf(", the last %d kept", c.Keep)
	}
	return s
}

// metricsRows are what every metrics line carries about its run.
var metricsRows = []struct {
	name  string
	value func([]train.StepMetrics) string
}{
	{"steps logged", func(s []train.StepMetrics) string {
		return fmt.Sprintf("%d (steps %d to %d)", len(s), s[0].Step, s[len(s)-1].Step)
	}},
	{"world", func(s []train.StepMetrics) string {
		return distinct(s, func(m train.StepMetrics) string { return strconv.Itoa(m.World) })
	}},
	{"dp × pp × tp", func(s []train.StepMetrics) string {
		return distinct(s, func(m train.StepMetrics) string {
			if m.DP == 0 {
				return ""
			}
			return fmt.Sprintf("%d × %d × %d", m.DP, m.PP, max(m.TP, 1))
		})
	}},
	{"batch", func(s []train.StepMetrics) string {
		return distinct(s, func(m train.StepMetrics) string { return positive(m.Batch) })
	}},
	{"micro-batches", func(s []train.StepMetrics) string {
		return distinct(s, func(m train.StepMetrics) string { return positive(m.Micro) })
	}},
	{"accumulation", func(s []train.StepMetrics) string {
		return distinct(s, func(m train.StepMetrics) string { return positive(m.Accum) })
	}},
	{"generations", func(s []train.StepMetrics) string {
		gens := map[uint64]bool{}
		for _, m := range s {
			gens[m.Generation] = true
		}
		if len(gens) < 2 {
			return ""
		}
		return strconv.Itoa(len(gens))
	}},
	{"learning rate", func(s []train.StepMetrics) string {
		peak := slices.MaxFunc(s, func(a, b train.StepMetrics) int { return cmp.Compare(a.LR, b.LR) }).LR
		first, last := s[0].LR, s[len(s)-1].LR
		if first == last && last == peak {
			return short(peak)
		}
		return fmt.Sprintf("%s at step %d, peak %s, %s at step %d", short(first), s[0].Step, short(peak), short(last), s[len(s)-1].Step)
	}},
	{"fp16 loss scale", func(s []train.StepMetrics) string {
		skipped, scaled := 0, false
		for _, m := range s {
			scaled = scaled || m.LossScale > 0
			if m.Skipped {
				skipped++
			}
		}
		if !scaled {
			return ""
		}
		return fmt.Sprintf("%s at the end, %s skipped", short(s[len(s)-1].LossScale), count(skipped, "step"))
	}},
}

// distinct is f's values over the steps, each once, in the order they
// first appear ("" where none has one).
func distinct(s []train.StepMetrics, f func(train.StepMetrics) string) string {
	var seen []string
	for _, m := range s {
		if v := f(m); v != "" && !slices.Contains(seen, v) {
			seen = append(seen, v)
		}
	}
	return strings.Join(seen, ", then ")
}

// count is "1 step", "2 steps".
func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func positive(v int) string {
	if v <= 0 {
		return ""
	}
	return strconv.Itoa(v)
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// short is a measured value to 4 significant digits.
func short(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

func num32(v float32) string { return strconv.FormatFloat(float64(v), 'g', -1, 32) }

func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, sep)
}

package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/nn"
)

// resumeFields are the fields a checkpoint's recorded configuration gives
// a resumed run that does not set them. Strict ones must not differ from
// the checkpoint's (the model and the data it was trained on: another
// value would not fit the weights or would train other samples); the
// others are the training's schedule and optimisation, which a resumed
// run may change.
var resumeFields = []struct {
	name   string
	strict bool
}{
	{"Model", true},
	{"Context", true}, {"Data", true}, {"Vocab", true}, {"Shuffle", true}, {"Seed", true},
	{"Batch", false}, {"Steps", false}, {"Epochs", false}, {"Accum", false}, {"Optim", false},
	{"LR", false}, {"Schedule", false}, {"Warmup", false}, {"MinLRFactor", false}, {"ClipNorm", false},
	{"Precision", false},
}

// FromCheckpoint gives c, a run that resumes (Resume), the configuration
// recorded in the latest checkpoint of CkptDir, so that resuming needs no
// model flags: every field of the model, its data, its schedule and its
// optimisation that set reports unset (by field name) takes the
// checkpoint's value. A model or data field set to another value than the
// checkpoint's is an error naming each such field. It returns the step of
// the checkpoint read, or -1 and c unchanged when CkptDir holds none (the
// run then starts from scratch, or fails with ResumeRequired).
func (c *Config) FromCheckpoint(set func(field string) bool) (int64, error) {
	if !c.Resume || c.CkptDir == "" {
		return -1, nil
	}
	ck, err := checkpoint.OpenLatest(checkpoint.OSFS{}, c.CkptDir)
	if errors.Is(err, checkpoint.ErrNoCheckpoint) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("train: resume: %w", err)
	}
	m := ck.Manifest
	ck.Close()
	if len(m.Config) == 0 {
		return -1, fmt.Errorf("train: resume: %w: checkpoint step %d in %s records no configuration", checkpoint.ErrManifest, m.Step, c.CkptDir)
	}
	var saved Config
	if err := json.Unmarshal(m.Config, &saved); err != nil {
		return -1, fmt.Errorf("train: resume: %w: checkpoint step %d in %s: its configuration: %v", checkpoint.ErrManifest, m.Step, c.CkptDir, err)
	}
	return m.Step, c.takeRecorded(saved, set, fmt.Sprintf("the checkpoint's (%s, step %d)", c.CkptDir, m.Step))
}

// takeRecorded is FromCheckpoint's core: the unset resume fields from
// saved, the strict ones set to other values refused (whose says whose
// values saved holds).
func (c *Config) takeRecorded(saved Config, set func(field string) bool, whose string) error {
	cur, rec := reflect.ValueOf(c).Elem(), reflect.ValueOf(&saved).Elem()
	var differ []string
	var mine []any
	var theirs []string
	for _, f := range resumeFields {
		dst, src := cur.FieldByName(f.name), rec.FieldByName(f.name)
		switch {
		case !set(f.name):
			dst.Set(src)
		case f.strict && !reflect.DeepEqual(dst.Interface(), src.Interface()):
			differ = append(differ, f.name)
			was := fmt.Sprint(src.Interface())
			if was == "" {
				was = "(unset: the default)"
			}
			mine, theirs = append(mine, dst.Interface()), append(theirs, was)
		}
	}
	for _, d := range c.takeModelArgs(saved) {
		differ = append(differ, "ModelArgs."+d[0])
		mine, theirs = append(mine, d[1]), append(theirs, d[2])
	}
	if len(differ) == 0 {
		return nil
	}
	var msg strings.Builder
	fmt.Fprintf(&msg, "%v", mine[0])
	for i, name := range differ[1:] {
		fmt.Fprintf(&msg, ", {%s} %v", name, mine[i+1])
	}
	verb := "differs from"
	if len(differ) > 1 {
		verb = "differ from"
	}
	fmt.Fprintf(&msg, " %s %s %s: a resumed run keeps the model and the data it was trained on", verb, whose, strings.Join(theirs, ", "))
	return &FieldError{Field: differ[0], Msg: msg.String()}
}

// takeModelArgs gives c the model options saved records, overlaid by the
// ones c sets; it returns each option c sets to another value than saved
// (its default when saved does not set it): its name, c's value, saved's.
func (c *Config) takeModelArgs(saved Config) [][3]string {
	def, err := nn.Lookup(saved.Model)
	if err != nil || !strings.EqualFold(c.Model, saved.Model) {
		return nil // the Model field's own check says what differs
	}
	merged := nn.Args{}
	for k, v := range saved.ModelArgs {
		merged[k] = v
	}
	var differ [][3]string
	for _, k := range slices.Sorted(maps.Keys(c.ModelArgs)) {
		v := c.ModelArgs[k]
		was, ok := saved.ModelArgs[k]
		if !ok {
			o, _ := def.Option(k)
			was = o.Default
		}
		if v != was {
			differ = append(differ, [3]string{k, v, was})
		}
		merged[k] = v
	}
	if len(merged) > 0 {
		c.ModelArgs = merged
	}
	return differ
}

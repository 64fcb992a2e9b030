package cli

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/train"
)

// modelOption is a flag of the registered models' options: its text,
// checked against its kind as it is set; which models take it is said in
// its help.
type modelOption struct {
	opt  nn.Option
	text string
}

func (o *modelOption) String() string { return o.text }

func (o *modelOption) Set(s string) error {
	if _, err := (nn.ModelDef{Name: "flag", Options: []nn.Option{o.opt}}).Resolve(nn.Args{o.opt.Name: s}); err != nil {
		return fmt.Errorf("not %s", o.opt.Kind.Article())
	}
	o.text = s
	return nil
}

func (o *modelOption) Type() string { return o.opt.Kind.String() }

// modelFlagNames lists the flags of every registered model's options, in
// the order the models declare them.
func modelFlagNames() []string {
	var names []string
	for _, d := range nn.Models() {
		for _, o := range d.Options {
			if !slices.Contains(names, o.Name) {
				names = append(names, o.Name)
			}
		}
	}
	return names
}

// registerModelFlags adds a flag for each option of the registered models
// (one flag for an option several declare; they must agree on its kind).
// Its default is the first model's that has it, and its help says which
// models take it and any other model's default.
func registerModelFlags(fl *pflag.FlagSet) {
	type use struct {
		model string
		opt   nn.Option
	}
	uses := map[string][]use{}
	for _, d := range nn.Models() {
		for _, o := range d.Options {
			uses[o.Name] = append(uses[o.Name], use{d.Name, o})
		}
	}
	for _, name := range modelFlagNames() {
		us := uses[name]
		first := us[0].opt
		var models, others []string
		for _, u := range us {
			if u.opt.Kind != first.Kind {
				panic(fmt.Sprintf("model option --%s is a %v for %s but a %v for %s", name, first.Kind, us[0].model, u.opt.Kind, u.model))
			}
			models = append(models, u.model)
			if u.opt.Default != first.Default {
				others = append(others, fmt.Sprintf("with --model %s %s", u.model, u.opt.Default))
			}
		}
		usage := fmt.Sprintf("%s [%s]", first.Usage, strings.Join(models, ", "))
		if len(others) > 0 {
			usage += " (" + strings.Join(others, "; ") + ")"
		}
		v := &modelOption{opt: first, text: first.Default}
		fl.Var(v, name, usage)
		f := fl.Lookup(name)
		if first.Kind == nn.BoolOption {
			f.NoOptDefVal = "true"
			if f.DefValue == "" {
				f.DefValue = "false"
			}
		}
	}
}

// modelArgs are the model options the user set.
func modelArgs(fl *pflag.FlagSet) nn.Args {
	args := nn.Args{}
	for _, name := range modelFlagNames() {
		if f := fl.Lookup(name); f != nil && f.Changed {
			args[name] = f.Value.String()
		}
	}
	if len(args) == 0 {
		return nil
	}
	return args
}

// modelHelp is the --model flag's help: the registered models.
func modelHelp() string {
	var names []string
	for _, d := range nn.Models() {
		names = append(names, d.Name+": "+d.Summary)
	}
	return "the registered model to train (" + strings.Join(names, "; ") + ")"
}

// annotateModelDefaults marks each flag whose default a model's recipe
// changes (annModelDefault: "model=value" per such model), for the help
// and the --config checks.
func annotateModelDefaults(fl *pflag.FlagSet) {
	d := train.DefaultConfig()
	flagValue := map[string]func(c train.Config) string{
		"batch":         func(c train.Config) string { return strconv.Itoa(c.Batch) },
		"steps":         func(c train.Config) string { return strconv.Itoa(c.Steps) },
		"epochs":        func(c train.Config) string { return strconv.FormatFloat(c.Epochs, 'g', -1, 64) },
		"optimizer":     func(c train.Config) string { return c.Optim.Name },
		"lr":            func(c train.Config) string { return strconv.FormatFloat(c.LR, 'g', -1, 64) },
		"lr-schedule":   func(c train.Config) string { return string(c.Schedule) },
		"lr-warmup":     func(c train.Config) string { return strconv.Itoa(c.Warmup) },
		"min-lr-factor": func(c train.Config) string { return strconv.FormatFloat(c.MinLRFactor, 'g', -1, 64) },
		"momentum":      func(c train.Config) string { return strconv.FormatFloat(float64(c.Optim.Momentum), 'g', -1, 32) },
		"weight-decay":  func(c train.Config) string { return strconv.FormatFloat(float64(c.Optim.WeightDecay), 'g', -1, 32) },
		"clip":          func(c train.Config) string { return strconv.FormatFloat(c.ClipNorm, 'g', -1, 64) },
	}
	names := make([]string, 0, len(flagValue))
	for n := range flagValue {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, def := range nn.Models() {
		if def.Recipe == nil {
			continue
		}
		m, err := train.DefaultConfigFor(def.Name)
		if err != nil {
			panic(err)
		}
		for _, n := range names {
			if v := flagValue[n](m); v != flagValue[n](d) {
				f := fl.Lookup(n)
				if f.Annotations == nil {
					f.Annotations = map[string][]string{}
				}
				f.Annotations[annModelDefault] = append(f.Annotations[annModelDefault], def.Name+"="+v)
			}
		}
	}
}

// modelDefault is flag f's default with --model model: a recipe's
// (annModelDefault) or the flag's own.
func modelDefault(f *pflag.Flag, model string) string {
	for _, a := range f.Annotations[annModelDefault] {
		if m, v, _ := strings.Cut(a, "="); m == model {
			return v
		}
	}
	return f.DefValue
}

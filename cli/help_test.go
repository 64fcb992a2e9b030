package cli

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/train"
)

// runTree runs troupe with args on a command tree of its own, built as
// rootCmd's is for train, agent and bench train (a command keeps its
// flags' values between runs, so each run gets new ones), and returns
// what it wrote on its output.
func runTree(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := &cobra.Command{Use: "troupe", SilenceUsage: true, SilenceErrors: true, PersistentPreRunE: prepare}
	root.PersistentFlags().AddFlagSet(rootCmd.PersistentFlags())
	root.SetFlagErrorFunc(rootCmd.FlagErrorFunc())
	root.SetUsageTemplate(usageTemplate)
	bench := &cobra.Command{Use: "bench"}
	bench.AddCommand(newBenchTrainCmd())
	root.AddCommand(newTrainCmd(), newAgentCmd(), bench)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// helpSections splits a help text into its sections: heading → lines.
func helpSections(help string) map[string][]string {
	out := map[string][]string{}
	var cur string
	for _, line := range strings.Split(help, "\n") {
		switch {
		case line == "":
		case !strings.HasPrefix(line, " ") && strings.HasSuffix(line, ":"):
			cur = strings.TrimSuffix(line, ":")
		default:
			out[cur] = append(out[cur], line)
		}
	}
	return out
}

// flagLine is the help line of --name in lines, "" when there is none.
func flagLine(lines []string, name string) string {
	for _, l := range lines {
		if strings.Contains(l, "--"+name+" ") || strings.HasSuffix(l, "--"+name) {
			return l
		}
	}
	return ""
}

// troupe train --help lists every flag under its heading, in the
// headings' order, and a float32 default as it was typed.
func TestTrainHelpGroups(t *testing.T) {
	help, err := runTree(t, "train", "--help")
	if err != nil {
		t.Fatal(err)
	}
	var headings []string
	for _, line := range strings.Split(help, "\n") {
		if h, ok := strings.CutSuffix(line, ":"); ok && !strings.HasPrefix(line, " ") && slices.Contains(groupOrder, h) {
			headings = append(headings, h)
		}
	}
	want := []string{groupModel, groupData, groupOptim, groupParallel, groupComm, groupSync, groupPrecision, groupOutputs, groupEval, groupObserve, groupRuntime, groupConfig}
	if !slices.Equal(headings, want) {
		t.Errorf("headings %q, want %q", headings, want)
	}
	secs := helpSections(help)
	if l := secs["Flags"]; len(l) != 1 || !strings.Contains(l[0], "--help") {
		t.Errorf("flags under no heading:\n%s", strings.Join(l, "\n"))
	}
	for group, names := range map[string][]string{
		groupModel: {"model", "layers", "d-model"}, groupData: {"data", "batch", "steps", "epochs"},
		groupOptim: {"lr", "lr-warmup", "weight-decay"}, groupParallel: {"dp", "pp", "tp", "zero"},
		groupPrecision: {"precision"}, groupOutputs: {"ckpt-dir", "resume", "metrics-out", "report"},
		groupObserve: {"metrics-addr", "trace"}, groupConfig: {"config", "print-config"},
	} {
		for _, n := range names {
			if flagLine(secs[group], n) == "" {
				t.Errorf("--%s is not under %s", n, group)
			}
		}
	}
	wd := flagLine(secs[groupOptim], "weight-decay")
	if !strings.Contains(wd, "(default 0.01; with --model mlp 0)") {
		t.Errorf("--weight-decay reads %q, want its defaults 0.01 and, with --model mlp, 0", wd)
	}
	if strings.Contains(help, "0.0099999") || strings.Contains(help, "0.899999") {
		t.Errorf("a float32 default printed through float64:\n%s", help)
	}
	if flagLine(strings.Split(help, "\n"), "warmup") != "" {
		t.Errorf("--warmup, the old name of --lr-warmup, is listed")
	}
}

// No flag of any command states two defaults: pflag's "(default …)" and
// another in its text.
func TestHelpStatesOneDefault(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, line := range strings.Split(c.UsageString(), "\n") {
			if strings.Count(line, "default") > 1 {
				t.Errorf("%s: %s", c.CommandPath(), strings.TrimSpace(line))
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(rootCmd)
}

// The default the help states for a training flag is its default: giving
// it explicitly makes the same configuration as leaving it out, with
// --model gpt and with --model mlp (whose defaults the help gives where
// they differ).
func TestStatedDefaultsAreDefaults(t *testing.T) {
	// Flags refused outside their mode, and what puts them in it.
	mode := map[string][]string{"outer-lr": {"--sync=diloco"}, "outer-momentum": {"--sync=diloco"}, "max-staleness": {"--sync=async"}}
	// AdamW's settings, which SGD (the MLP's optimizer) does not read.
	adamW := []string{"beta1", "beta2", "eps"}
	build := func(args ...string) (train.Config, error) {
		f := &trainFlags{}
		fl := pflag.NewFlagSet("train", pflag.ContinueOnError)
		f.register(fl)
		if err := fl.Parse(args); err != nil {
			return train.Config{}, err
		}
		return f.build(fl)
	}
	probe := &trainFlags{}
	fl := pflag.NewFlagSet("train", pflag.ContinueOnError)
	probe.register(fl)
	for _, model := range []string{"gpt", "mlp"} {
		fl.VisitAll(func(f *pflag.Flag) {
			if notInConfig[f.Name] || f.Name == "model" || model == "mlp" && slices.Contains(adamW, f.Name) {
				return
			}
			stated := modelDefault(f, model)
			def, err := nn.Lookup(model)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(modelFlagNames(), f.Name) {
				o, ok := def.Option(f.Name)
				if !ok || o.Default == "" {
					return // another model's option, or one without a default
				}
				stated = o.Default
			}
			base := append([]string{"--model=" + model}, mode[f.Name]...)
			want, err := build(base...)
			if err != nil {
				t.Fatalf("%s: %v", base, err)
			}
			args := append(base, "--"+f.Name+"="+stated)
			got, err := build(args...)
			if err != nil {
				t.Errorf("%s: %v", args, err)
				return
			}
			if got.ModelArgs[f.Name] == stated {
				got.ModelArgs = nil // the model's default, given
			}
			if f.Name == "servers" && got.Servers == 1 && want.Servers == 0 {
				got.Servers = 0 // 0 is one server
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: the help states %s as --%s's default, but giving it changes the configuration:\n%+v\nwant\n%+v", model, stated, f.Name, got, want)
			}
		})
	}
}

// troupe bench train's --warmup-steps are untimed steps and its LR
// warm-up is --lr-warmup: no --warmup to mistake for either.
func TestBenchTrainWarmupFlags(t *testing.T) {
	help, err := runTree(t, "bench", "train", "--help")
	if err != nil {
		t.Fatal(err)
	}
	secs := helpSections(help)
	if l := flagLine(secs[groupBench], "warmup-steps"); !strings.Contains(l, "before the timing") {
		t.Errorf("--warmup-steps: %q", l)
	}
	if flagLine(secs[groupOptim], "lr-warmup") == "" {
		t.Errorf("no --lr-warmup under %s", groupOptim)
	}
	if _, err := runTree(t, "bench", "train", "--warmup", "3"); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--warmup") {
		t.Errorf("bench train --warmup 3: %v, want a usage error naming it", err)
	}
}

// --warmup, the old name of --lr-warmup, still sets it (troupe train and
// troupe agent), and cannot be given beside it.
func TestOldWarmupName(t *testing.T) {
	for _, newCmd := range []func() *cobra.Command{newTrainCmd, newAgentCmd} {
		cmd := newCmd()
		if err := cmd.ParseFlags([]string{"--warmup", "3"}); err != nil {
			t.Fatal(err)
		}
		if err := prepareFlags(cmd); err != nil {
			t.Fatal(err)
		}
		if f := cmd.Flags().Lookup("lr-warmup"); !f.Changed || f.Value.String() != "3" {
			t.Errorf("%s --warmup 3: --lr-warmup is %s (set: %v)", cmd.Name(), f.Value, f.Changed)
		}
		cmd = newCmd()
		if err := cmd.ParseFlags([]string{"--warmup", "3", "--lr-warmup", "4"}); err != nil {
			t.Fatal(err)
		}
		if err := prepareFlags(cmd); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--warmup is the old name of --lr-warmup") {
			t.Errorf("%s --warmup with --lr-warmup: %v", cmd.Name(), err)
		}
	}
}

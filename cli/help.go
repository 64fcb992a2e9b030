package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Flag annotations (pflag) that the help, --config and --print-config read.
const (
	// annGroup is the heading a flag is listed under, and its place there.
	annGroup = "troupe_group"
	// annModelDefault lists, as "model=value", the flag's default with
	// --model model where that model's recipe makes it differ from the one
	// it was registered with (the trainer's).
	annModelDefault = "troupe_model_default"
	// annAliasOf is, on an old flag name, the flag it now is.
	annAliasOf = "troupe_alias_of"
	// annFromConfig is, on a flag a --config file set, that file.
	annFromConfig = "troupe_from_config"
	// annConfigFile marks the flag that names a --config file of flags
	// (troupe report's --config is another thing: a run's configuration).
	annConfigFile = "troupe_config_file"
)

// The headings of the training commands' help.
const (
	groupCluster   = "Cluster"
	groupSecurity  = "Security"
	groupBench     = "Benchmark"
	groupGenerate  = "Generation"
	groupModel     = "Model"
	groupData      = "Data"
	groupOptim     = "Optimisation"
	groupParallel  = "Parallelism"
	groupComm      = "Communication"
	groupSync      = "Synchronisation of replicas"
	groupPrecision = "Precision"
	groupOutputs   = "Checkpoints and outputs"
	groupEval      = "Evaluation"
	groupObserve   = "Observability"
	groupRuntime   = "Runtime"
	groupConfig    = "Configuration"
)

// groupOrder is the order of the headings: a command's own first (agent,
// bench train), then the training flags'.
var groupOrder = []string{groupCluster, groupSecurity, groupBench, groupGenerate, groupModel, groupData, groupOptim, groupParallel,
	groupComm, groupSync, groupPrecision, groupOutputs, groupEval, groupObserve, groupRuntime, groupConfig}

func setAnnotation(fl *pflag.FlagSet, name, key string, values ...string) {
	if err := fl.SetAnnotation(name, key, values); err != nil {
		panic(err) // a flag registered under another name: a bug here
	}
}

// inGroup lists the flags names under heading group, in that order.
func inGroup(fl *pflag.FlagSet, group string, names ...string) {
	if !slices.Contains(groupOrder, group) {
		panic("no heading " + group)
	}
	for i, n := range names {
		setAnnotation(fl, n, annGroup, group, strconv.Itoa(i))
	}
}

// flagSection is a heading and its flags.
type flagSection struct {
	title string
	flags []*pflag.Flag
}

// sections are fl's flags that keep says, under their headings in
// groupOrder; the flags of no heading come last, under "Flags" (so that
// a command without headings reads as cobra's own help).
func sections(fl *pflag.FlagSet, keep func(*pflag.Flag) bool) []flagSection {
	byGroup := map[string][]*pflag.Flag{}
	fl.VisitAll(func(f *pflag.Flag) {
		if !keep(f) {
			return
		}
		g := ""
		if a := f.Annotations[annGroup]; len(a) > 0 {
			g = a[0]
		}
		byGroup[g] = append(byGroup[g], f)
	})
	var out []flagSection
	for _, g := range append(slices.Clone(groupOrder), "") {
		fs := byGroup[g]
		if len(fs) == 0 {
			continue
		}
		slices.SortStableFunc(fs, func(a, b *pflag.Flag) int { return groupPlace(a) - groupPlace(b) })
		title := g
		if title == "" {
			title = "Flags"
		}
		out = append(out, flagSection{title, fs})
	}
	return out
}

func groupPlace(f *pflag.Flag) int {
	if a := f.Annotations[annGroup]; len(a) > 1 {
		i, _ := strconv.Atoi(a[1])
		return i
	}
	return 0
}

// flagSections renders c's own flags for its help, under their headings.
func flagSections(c *cobra.Command) string {
	var b strings.Builder
	for i, s := range sections(c.LocalFlags(), func(f *pflag.Flag) bool { return !f.Hidden }) {
		fs := pflag.NewFlagSet(s.title, pflag.ContinueOnError)
		fs.SortFlags = false
		for _, f := range s.flags {
			fs.AddFlag(shown(f))
		}
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s:\n%s", s.title, fs.FlagUsages())
	}
	return b.String()
}

// shown is f as its help line shows it: a default that changes with
// --model said once, in the flag's text, rather than pflag's "(default …)"
// beside a second one.
func shown(f *pflag.Flag) *pflag.Flag {
	a := f.Annotations[annModelDefault]
	if len(a) == 0 {
		return f
	}
	c := *f
	quote := func(s string) string { return s }
	switch f.Value.Type() {
	case "string":
		quote, c.DefValue = strconv.Quote, ""
	case "bool":
		c.DefValue = "false"
	default:
		c.DefValue = "0"
	}
	text := fmt.Sprintf("%s (default %s", f.Usage, quote(f.DefValue))
	for _, m := range a {
		model, v, _ := strings.Cut(m, "=")
		text += fmt.Sprintf("; with --model %s %s", model, quote(v))
	}
	c.Usage = text + ")"
	return &c
}

// usageTemplate is cobra's, with the flags under their headings.
const usageTemplate = `Usage:{{if .Runnable}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} [command]{{end}}{{if gt (len .Aliases) 0}}

Aliases:
  {{.NameAndAliases}}{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Available Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

{{flagSections . | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasHelpSubCommands}}

Additional help topics:{{range .Commands}}{{if .IsAdditionalHelpTopicCommand}}
  {{rpad .CommandPath .CommandPathPadding}} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableSubCommands}}

Use "{{.CommandPath}} [command] --help" for more information about a command.{{end}}
`

func init() {
	cobra.AddTemplateFunc("flagSections", flagSections)
	rootCmd.SetUsageTemplate(usageTemplate)
}

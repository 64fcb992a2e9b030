package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// troupe agent's help lists exactly the training flags an agent accepts.
// Which it refuses is found here by asking it: for every training flag,
// command lines that set it (the table only says how the flag is used;
// that troupe train accepts one of them is checked) go to the agent's own
// validation. A flag the agent refuses in every one must be hidden; one
// it accepts in some must be listed.
func TestAgentHelpListsWhatItAccepts(t *testing.T) {
	dir := t.TempDir()
	ck := "--ckpt-dir=" + filepath.Join(dir, "ck")
	async := []string{"--sync=async", ck}
	usages := map[string][][]string{
		"model":             {{"--model=mlp"}},
		"layers":            {{"--model=mlp", "--layers=784,32,10"}},
		"data":              {{"--data=synthetic-tokens"}},
		"vocab":             {{"--vocab=byte"}},
		"optimizer":         {{"--optimizer=sgd"}},
		"lr-schedule":       {{"--lr-schedule=constant"}},
		"nesterov":          {{"--optimizer=sgd", "--momentum=0.9", "--nesterov"}},
		"init":              {{"--init=" + filepath.Join(dir, "w.safetensors")}},
		"save":              {{"--save=" + filepath.Join(dir, "out.safetensors")}},
		"metrics-out":       {{"--metrics-out=" + filepath.Join(dir, "m.jsonl")}},
		"metrics-addr":      {{"--metrics-addr=127.0.0.1:0"}},
		"dump-dir":          {{"--dump-dir=" + filepath.Join(dir, "dumps")}},
		"trace":             {{"--pp=2", "--trace=" + filepath.Join(dir, "t.json")}},
		"d-model":           {{"--d-model=64"}},
		"n-kv-heads":        {{"--model=llama", "--n-kv-heads=1"}},
		"ffn-hidden":        {{"--model=llama", "--ffn-hidden=256"}},
		"rope-theta":        {{"--model=llama", "--rope-theta=500000"}},
		"norm-eps":          {{"--model=llama", "--norm-eps=1e-6"}},
		"tie":               {{"--model=llama", "--tie"}},
		"device":            {{"--device=cpu"}},
		"transport":         {{"--transport=tcp"}},
		"allreduce-algo":    {{"--allreduce-algo=ring"}},
		"sequence-parallel": {{"--tp=2", "--sequence-parallel"}},
		"zero":              {{"--dp=2", "--zero=1"}, {"--zero=1", "--zero-group=2"}},
		"zero-group":        {{"--dp=4", "--zero=1", "--zero-group=2"}, {"--zero=1", "--zero-group=2"}},
		"precision":         {{"--precision=bf16"}},
		"reduce-dtype":      {{"--reduce-dtype=bf16"}},
		"sync":              {{"--dp=2", "--sync=local-sgd", "--sync-every=2"}, {"--sync=local-sgd", "--sync-every=2"}},
		"sync-every":        {{"--dp=2", "--sync=local-sgd", "--sync-every=2"}, {"--sync=local-sgd", "--sync-every=2"}},
		"sync-dtype":        {{"--dp=2", "--sync=diloco", "--sync-every=2", "--sync-dtype=bf16"}, {"--sync=diloco", "--sync-every=2", "--sync-dtype=bf16"}},
		"outer-lr":          {{"--dp=2", "--sync=diloco", "--sync-every=2", "--outer-lr=0.5"}, {"--sync=diloco", "--sync-every=2", "--outer-lr=0.5"}},
		"outer-momentum":    {{"--dp=2", "--sync=diloco", "--sync-every=2", "--outer-momentum=0.5"}, {"--sync=diloco", "--sync-every=2", "--outer-momentum=0.5"}},
		"outer-nesterov":    {{"--dp=2", "--sync=diloco", "--sync-every=2", "--outer-nesterov"}, {"--sync=diloco", "--sync-every=2", "--outer-nesterov"}},
		"max-staleness":     {append([]string{"--dp=2", "--max-staleness=2"}, async...), append([]string{"--max-staleness=2"}, async...)},
		"servers":           {append([]string{"--dp=2", "--servers=2"}, async...), append([]string{"--servers=2"}, async...)},
		"max-restarts":      {append([]string{"--procs=2", "--max-restarts=1"}, async...), {"--max-restarts=1"}}, // the agent's: restarts of generations
		"loss-scale-init":   {{"--precision=fp16", "--loss-scale-init=1024"}},
		"loss-scale-window": {{"--precision=fp16", "--loss-scale-window=100"}},
		"loss-scale-min":    {{"--precision=fp16", "--loss-scale-min=2"}},
		"micro-batches":     {{"--pp=2", "--micro-batches=2"}},
		"schedule":          {{"--pp=2", "--micro-batches=2", "--schedule=gpipe"}},
		"stage-layers":      {{"--pp=2", "--stage-layers=3,3"}},
		"partition":         {{"--pp=2", "--partition=time"}, {"--pp=2", "--partition=params"}},
		"recompute":         {{"--pp=2", "--recompute"}},
		"ckpt-dir":          {{ck}},
		"ckpt-every":        {{ck, "--ckpt-every=2"}},
		"keep":              {{ck, "--ckpt-every=2", "--keep=2"}},
		"resume":            {{ck, "--resume"}},
		"check-every":       {{"--dp=2", "--check-every=2"}, {"--check-every=2"}},
	}
	trainAccepts := func(args []string) error {
		f := &trainFlags{}
		fl := pflag.NewFlagSet("train", pflag.ContinueOnError)
		f.register(fl)
		if err := fl.Parse(args); err != nil {
			return err
		}
		_, err := f.config(fl)
		return err
	}
	agentAccepts := func(args []string) error {
		a := &agentFlags{}
		cmd := newAgentCmdWith(a)
		if err := cmd.Flags().Parse(append(args, "--name=n1", "--listen=127.0.0.1:7946")); err != nil {
			return err
		}
		_, err := a.config(cmd.Flags())
		return err
	}
	help, err := runTree(t, "agent", "--help")
	if err != nil {
		t.Fatal(err)
	}
	agentFlagSet := newAgentCmd().Flags()
	training := pflag.NewFlagSet("train", pflag.ContinueOnError)
	(&trainFlags{}).register(training)
	var refused []string
	training.VisitAll(func(f *pflag.Flag) {
		if notInConfig[f.Name] {
			return
		}
		lines := usages[f.Name]
		if lines == nil {
			lines = [][]string{{"--" + f.Name + "=" + probeValue(f)}}
		}
		usable, accepted := false, false
		var why []string
		for _, args := range lines {
			// An agent's line may need what troupe train refuses (--zero
			// with --zero-group and no --dp: the agents make the world).
			if err := trainAccepts(args); err == nil {
				usable = true
			} else {
				why = append(why, "troupe train: "+err.Error())
			}
			if err := agentAccepts(args); err == nil {
				accepted = true
			} else {
				why = append(why, "troupe agent: "+err.Error())
			}
		}
		if !usable {
			t.Errorf("troupe train refuses every usage of --%s in the table (fix the table): %s", f.Name, strings.Join(why, "; "))
			return
		}
		hidden := agentFlagSet.Lookup(f.Name).Hidden
		listed := flagLine(strings.Split(help, "\n"), f.Name) != ""
		switch {
		case !accepted && (!hidden || listed):
			t.Errorf("the agent refuses --%s (%s), but its help lists it", f.Name, strings.Join(why, "; "))
		case accepted && (hidden || !listed):
			t.Errorf("the agent accepts --%s, but its help does not list it", f.Name)
		}
		if !accepted {
			refused = append(refused, f.Name)
		}
	})
	t.Logf("the agent refuses %s", strings.Join(refused, ", "))
}

// probeValue is a value other than f's default, of f's type.
func probeValue(f *pflag.Flag) string {
	switch f.Value.Type() {
	case "bool":
		if f.DefValue == "true" {
			return "false"
		}
		return "true"
	case "duration":
		return "3s"
	case "float32", "float64":
		return "0.5"
	default:
		return "2"
	}
}

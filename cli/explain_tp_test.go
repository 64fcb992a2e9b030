package cli

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

func runExplainTPCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runExplainCmd(t, "tp", args...)
}

// The collectives of a block come from its own passes: four all-reduces
// without sequence parallelism, with it two all-gathers and two
// reduce-scatters forward and four all-gathers and two reduce-scatters
// backward; a shard sends exactly the formula's bytes. Every cut
// parameter's ranks hold each row or column of the whole exactly once.
func TestExplainTPJSON(t *testing.T) {
	for _, c := range []struct {
		args []string
		want map[string]int // "pass kind" → count
	}{
		{[]string{"--tp", "4"}, map[string]int{"forward all-reduce": 2, "backward all-reduce": 2}},
		{[]string{"--tp", "4", "--sequence-parallel"}, map[string]int{"forward all-gather": 2, "forward reduce-scatter": 2, "backward all-gather": 4, "backward reduce-scatter": 2}},
		{[]string{"--tp", "2", "--d-model", "64", "--n-heads", "2", "--batch", "3"}, map[string]int{"forward all-reduce": 2, "backward all-reduce": 2}},
		{[]string{"--tp", "2", "--model", "llama"}, map[string]int{"forward all-reduce": 2, "backward all-reduce": 2}},
		{[]string{"--tp", "2", "--model", "llama", "--n-kv-heads", "1", "--sequence-parallel"}, map[string]int{"forward all-gather": 2, "forward reduce-scatter": 2, "backward all-gather": 4, "backward reduce-scatter": 2}},
	} {
		out, err := runExplainTPCmd(t, append(c.args, "--json")...)
		if err != nil {
			t.Fatal(err)
		}
		var doc explainTPDoc
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("%v in %s", err, out)
		}
		got := map[string]int{}
		for _, op := range doc.Ops {
			got[op.Pass+" "+op.Kind]++
			if op.Values != doc.Context*doc.Batch*doc.DModel {
				t.Errorf("%v: %s of %d values, want the block's activation, %d", c.args, op.Kind, op.Values, doc.Context*doc.Batch*doc.DModel)
			}
		}
		if len(got) != len(c.want) {
			t.Errorf("%v: collectives %v, want %v", c.args, got, c.want)
		}
		for k, n := range c.want {
			if got[k] != n {
				t.Errorf("%v: %d × %s, want %d (all: %v)", c.args, got[k], k, n, got)
			}
		}
		if doc.SentBytes != doc.FormulaBytes || doc.SentBytes == 0 {
			t.Errorf("%v: sends %v bytes, formula %v", c.args, doc.SentBytes, doc.FormulaBytes)
		}
		for _, p := range doc.Params {
			if p.Cut == "whole" {
				continue
			}
			dim := p.Shape[0]
			if p.Cut == "columns" {
				dim = p.Shape[1]
			}
			seen := make([]int, dim)
			for _, sh := range p.Shards {
				for _, r := range sh.Ranges {
					for i := r[0]; i < r[1]; i++ {
						seen[i]++
					}
				}
			}
			if slices.ContainsFunc(seen, func(n int) bool { return n != 1 }) || len(p.Shards) != doc.TP {
				t.Errorf("%v: %s's shards %+v do not cover its %d %s once", c.args, p.Name, p.Shards, dim, p.Cut)
			}
		}
	}
}

// The Llama's cut, as docs/TP.md states it: q by heads, k and v by kv
// heads when T divides them and otherwise whole with their gradients
// summed over the shards; gate/up by rows, o/down by columns; an untied
// LM head by vocabulary rows.
func TestExplainTPLlama(t *testing.T) {
	for _, c := range []struct {
		kv   string
		want map[string]string // name → cut
		sum  bool              // k and v's gradients summed over the shards
	}{
		{"2", map[string]string{"self_attn.q_proj.weight": "rows", "self_attn.k_proj.weight": "rows", "self_attn.v_proj.weight": "rows"}, false},
		{"1", map[string]string{"self_attn.q_proj.weight": "rows", "self_attn.k_proj.weight": "whole", "self_attn.v_proj.weight": "whole"}, true},
	} {
		out, err := runExplainTPCmd(t, "--tp", "2", "--model", "llama", "--n-heads", "4", "--n-kv-heads", c.kv, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var doc explainTPDoc
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("%v in %s", err, out)
		}
		want := map[string]string{"model.embed_tokens.weight": "rows", "model.layers.0.mlp.gate_proj.weight": "rows",
			"model.layers.0.mlp.up_proj.weight": "rows", "model.layers.0.mlp.down_proj.weight": "columns",
			"model.layers.0.self_attn.o_proj.weight": "columns", "model.layers.0.input_layernorm.weight": "whole",
			"model.norm.weight": "whole", "lm_head.weight": "rows"}
		for k, v := range c.want {
			want["model.layers.0."+k] = v
		}
		got := map[string]explainTPParam{}
		for _, p := range doc.Params {
			got[p.Name] = p
		}
		for name, cut := range want {
			if p, ok := got[name]; !ok || p.Cut != cut {
				t.Errorf("--n-kv-heads %s: %s cut %q, want %q", c.kv, name, p.Cut, cut)
			}
		}
		if k := got["model.layers.0.self_attn.k_proj.weight"]; k.PartialGrad != c.sum {
			t.Errorf("--n-kv-heads %s: k_proj's gradient summed over the shards: %v, want %v", c.kv, k.PartialGrad, c.sum)
		}
		if doc.Model != "llama" || !strings.HasPrefix(doc.Describe, "Llama") {
			t.Errorf("model %q %q", doc.Model, doc.Describe)
		}
	}
}

func TestExplainTPText(t *testing.T) {
	out, err := runExplainTPCmd(t, "--tp", "4")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"tok.weight", "rank 3 96:126 (+2 padding)", "blocks.0.proj.weight", "columns: rank 0 0:32", "formula"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

func TestExplainTPUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--tp", "0"},
		{"--tp", "3"},
		{"--tp", "1", "--sequence-parallel"},
		{"--tp", "2", "--batch", "0"},
		{"--tp", "2", "--model", "mlp"},
		{"--tp", "2", "--model", "nosuch"},
		{"--tp", "3", "--model", "llama"},
		{"--tp", "2", "--model", "llama", "--n-kv-heads", "3"},
	} {
		if _, err := runExplainTPCmd(t, args...); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

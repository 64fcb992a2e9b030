package cli

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/generate"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/train"
)

// gptShape is the tiny GPT of these tests, as flags.
var gptShape = []string{"--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--context", "16"}

// writeGPT writes the weights of the tiny GPT shaped for dataSpec (wide
// ones, N(0, 0.3²) on its init, so that greedy choices are far from ties)
// and returns the path and the model.
func writeGPT(t *testing.T, dataSpec string) (string, *nn.Model, data.Dataset) {
	t.Helper()
	cfg := train.DefaultConfig()
	cfg.Data, cfg.Context = dataSpec, 16
	cfg.ModelArgs = nn.Args{"d-model": "16", "n-layers": "1", "n-heads": "2"}
	ds, _, err := train.OpenData(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := train.ModelSpec(&cfg, ds)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.BuildWhole(cpu.New(1), spec, 9)
	if err != nil {
		t.Fatal(err)
	}
	w := m.Set.HostWeights()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range w {
		w[i] += float32(0.3 * r.NormFloat64())
	}
	if err := m.Set.SetHostWeights(w); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gpt.safetensors")
	if err := m.Set.SaveWeights(path, nil); err != nil {
		t.Fatal(err)
	}
	return path, m, ds
}

// TestGenerateGreedyIsRecompute: troupe generate --temperature 0 --json
// prints the new ids of a full-recompute greedy decoding of the same
// weights, and their text with the data's tokenizer; plain output is that
// text.
func TestGenerateGreedyIsRecompute(t *testing.T) {
	path, m, ds := writeGPT(t, "gospec")
	vocab := ds.(data.TextDataset).Vocab()
	prompt, err := vocab.Encode("func ")
	if err != nil {
		t.Fatal(err)
	}
	want, err := generate.Recompute(context.Background(), m, prompt, generate.Options{MaxNewTokens: 11})
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--init", path, "--prompt", "func ", "--max-new-tokens", "11", "--temperature", "0"}, gptShape...)
	out, err := execute(newGenerateCmd(), append(args, "--json")...)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		IDs  []int32 `json:"ids"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	if !slices.Equal(got.IDs, want) || got.Text == nil || *got.Text != vocab.Decode(want) {
		t.Errorf("troupe generate printed %s; the recompute gives %v (%q)", out, want, vocab.Decode(want))
	}
	plain, err := execute(newGenerateCmd(), args...)
	if err != nil || plain != vocab.Decode(want)+"\n" {
		t.Errorf("plain output %q (%v), want %q", plain, err, vocab.Decode(want)+"\n")
	}
	ids := make([]string, len(prompt))
	for i, id := range prompt {
		ids[i] = strconv.Itoa(int(id))
	}
	byIDs, err := execute(newGenerateCmd(), append(slices.Clone(gptShape), "--init", path, "--prompt-ids", strings.Join(ids, ", "),
		"--max-new-tokens", "11", "--temperature", "0", "--json")...)
	if err != nil || byIDs != out {
		t.Errorf("--prompt-ids %s printed %s (%v), --prompt %q %s", strings.Join(ids, ","), byIDs, err, "func ", out)
	}
}

// TestGenerateSeeded: a seed prints the same sample twice, another seed
// another; data without a tokenizer prints ids, and has no "text".
func TestGenerateSeeded(t *testing.T) {
	path, _, _ := writeGPT(t, "synthetic-tokens:vocab=23")
	run := func(seed string) string {
		t.Helper()
		out, err := execute(newGenerateCmd(), append(slices.Clone(gptShape), "--data", "synthetic-tokens:vocab=23", "--init", path,
			"--prompt-ids", "1,2,3", "--max-new-tokens", "12", "--temperature", "1.5", "--top-k", "10", "--seed", seed, "--json")...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "text") {
			t.Errorf("data without a tokenizer printed a text: %s", out)
		}
		return out
	}
	if a, b := run("5"), run("5"); a != b {
		t.Errorf("seed 5 printed %s, then %s", a, b)
	}
	if a, b := run("5"), run("6"); a == b {
		t.Errorf("seeds 5 and 6 both printed %s", a)
	}
	plain, err := execute(newGenerateCmd(), append(slices.Clone(gptShape), "--data", "synthetic-tokens:vocab=23", "--init", path,
		"--prompt-ids", "1", "--max-new-tokens", "4")...)
	if f := strings.Fields(plain); err != nil || len(f) != 4 {
		t.Errorf("plain ids: %q, %v", plain, err)
	}
}

// TestGenerateBadInput: every input troupe generate cannot use is a usage
// error (exit status 2) that names what was wrong.
func TestGenerateBadInput(t *testing.T) {
	path, _, _ := writeGPT(t, "gospec")
	dir := t.TempDir()
	notWeights := writeFile(t, dir, "x.safetensors", "not safetensors")
	ok := append(slices.Clone(gptShape), "--init", path)
	for _, c := range []struct {
		args []string
		says []string
	}{
		{append(slices.Clone(gptShape), "--prompt", "a"), []string{"--init is required"}},
		{ok, []string{"--prompt", "--prompt-ids", "neither"}},
		{append(slices.Clone(ok), "--prompt", "a", "--prompt-ids", "1"), []string{"both"}},
		{append(slices.Clone(ok), "--prompt-ids", "1,9999"), []string{"--prompt-ids", "9999", "vocabulary of 126"}},
		{append(slices.Clone(ok), "--prompt-ids", "1,-2"), []string{"--prompt-ids", `"-2"`}},
		{append(slices.Clone(ok), "--prompt-ids", ""), []string{"--prompt-ids", "no ids"}},
		{append(slices.Clone(ok), "--prompt", ""), []string{"--prompt is empty"}},
		{append(slices.Clone(ok), "--prompt", "€"), []string{"--prompt", "'€' is not in the vocabulary"}},
		{append(slices.Clone(ok), "--prompt", "a", "--top-p", "0"), []string{"--top-p 0", "(0, 1]"}},
		{append(slices.Clone(ok), "--prompt", "a", "--top-p", "1.2"), []string{"--top-p 1.2"}},
		{append(slices.Clone(ok), "--prompt", "a", "--temperature", "-1"), []string{"--temperature -1"}},
		{append(slices.Clone(ok), "--prompt", "a", "--top-k", "-3"), []string{"--top-k -3"}},
		{append(slices.Clone(ok), "--prompt", "a", "--max-new-tokens", "0"), []string{"--max-new-tokens 0"}},
		{append(slices.Clone(ok), "--prompt", "abc", "--max-new-tokens", "14"), []string{"--max-new-tokens 14", "3 tokens", "17 positions", "context of 16", "at most 13"}},
		{append(slices.Clone(gptShape), "--init", notWeights, "--prompt", "a"), []string{"--init " + notWeights, "safetensors"}},
		{append(slices.Clone(gptShape), "--init", filepath.Join(dir, "none"), "--prompt", "a"), []string{"--init", "none"}},
		{append(slices.Clone(gptShape), "--init", path, "--d-model", "32", "--prompt", "a"), []string{"--init", "tok.weight", "shape"}},
		{[]string{"--model", "mlp", "--data", "synthetic-mlp", "--init", path, "--prompt-ids", "1"}, []string{"--model mlp", "cannot generate"}},
		{[]string{"--model", "mlp", "--data", "synthetic-tokens", "--init", path, "--prompt-ids", "1"}, []string{"--model mlp", "token sequences"}},
		{append(slices.Clone(ok), "--model", "nope", "--prompt", "a"), []string{"nope"}},
	} {
		_, err := execute(newGenerateCmd(), c.args...)
		if !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", c.args, err)
			continue
		}
		for _, s := range c.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%v: %q does not say %q", c.args, err, s)
			}
		}
	}
}

// FuzzParsePromptIDs: --prompt-ids never panics, and what it accepts are
// non-negative ids that print back to an equivalent list.
func FuzzParsePromptIDs(f *testing.F) {
	for _, s := range []string{"1,2,3", " 4 , 5", "", ",", "1,,2", "-1", "2147483648", "0x10", "1e3", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := parsePromptIDs(s)
		if err != nil {
			return
		}
		if len(ids) == 0 {
			t.Fatalf("%q: no ids and no error", s)
		}
		text := make([]string, len(ids))
		for i, id := range ids {
			if id < 0 {
				t.Fatalf("%q: id %d", s, id)
			}
			text[i] = strconv.Itoa(int(id))
		}
		again, err := parsePromptIDs(strings.Join(text, ","))
		if err != nil || !slices.Equal(again, ids) {
			t.Fatalf("%q → %v → %v (%v)", s, ids, again, err)
		}
	})
}

// TestGenerateGPT2Prompt: on data tokenized with GPT-2's BPE, --prompt is
// encoded and the new ids decoded with that tokenizer, not by characters.
func TestGenerateGPT2Prompt(t *testing.T) {
	path, m, _ := writeGPT(t, "gospec:vocab=gpt2")
	tok, err := data.GPT2()
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := tok.Encode(nil, []byte("Hello world"))
	if err != nil || !slices.Equal(prompt, []int32{15496, 995}) {
		t.Fatalf("GPT-2 ids of %q: %v (%v)", "Hello world", prompt, err)
	}
	want, err := generate.Recompute(context.Background(), m, prompt, generate.Options{MaxNewTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	out, err := execute(newGenerateCmd(), append(slices.Clone(gptShape), "--data", "gospec:vocab=gpt2", "--init", path,
		"--prompt", "Hello world", "--max-new-tokens", "5", "--temperature", "0", "--json")...)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		IDs  []int32 `json:"ids"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	if !slices.Equal(got.IDs, want) || got.Text == nil || *got.Text != tok.Decode(want) {
		t.Errorf("troupe generate printed %s; the recompute from GPT-2's ids gives %v (%q)", out, want, tok.Decode(want))
	}
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/generate"
	"github.com/troupe-ml/troupe/kernels"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/train"
)

// generateFlags are troupe generate's flags.
type generateFlags struct {
	model, data, vocab, init string
	context                  int
	prompt, promptIDs        string
	maxNew, topK             int
	temperature, topP        float64
	seed                     uint64
	device                   string
	threads                  int
	jsonOut                  bool
}

// generateOutput is troupe generate --json's document: the new tokens
// only, and their text when the data has a tokenizer.
type generateOutput struct {
	IDs  []int32 `json:"ids"`
	Text *string `json:"text,omitempty"`
}

func newGenerateCmd() *cobra.Command {
	f := &generateFlags{}
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Sample text from a trained causal language model (KV cache; greedy at --temperature 0)",
		Long: `Generate continues a prompt with a causal language model (any registered model that
opts in to generation: gpt, llama, a user's), from the weights in --init. The model's
shape comes from its flags and from the data, as in troupe train: give the --model,
model flags, --data, --vocab and --context of the run that wrote the weights (the data's
tokenizer encodes --prompt and decodes the new tokens).

Each new token is drawn from the logits divided by --temperature, cut to the --top-k most
likely and then to the nucleus of probability --top-p (Hugging Face's order); at
--temperature 0 the most likely token is taken. The prompt and the new tokens must fit
the model's context. Only the new tokens are printed: their text, or with --json
{"ids": [...], "text": "..."}.`,
		Example: `  troupe train --steps 2000 --save gpt.safetensors
  troupe generate --init gpt.safetensors --prompt "The zero value" --max-new-tokens 40 --temperature 0
  troupe generate --init gpt.safetensors --prompt-ids 12,40,7 --temperature 0.8 --top-k 20 --seed 3 --json
  troupe generate --model gpt --d-model 64 --n-layers 2 --data ./input.txt --context 128 --init w.safetensors --prompt "ROMEO:" --top-p 0.9`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			run, err := f.prepare(cmd.Flags())
			if err != nil {
				return err
			}
			return run.generate(ctx, cmd.OutOrStdout(), f.jsonOut)
		},
	}
	f.register(cmd.Flags())
	return cmd
}

func init() { rootCmd.AddCommand(newGenerateCmd()) }

func (f *generateFlags) register(fl *pflag.FlagSet) {
	d, o := train.DefaultConfig(), generate.DefaultOptions()
	var causal []string
	for _, m := range nn.Models() {
		if ok, _ := causalModel(m); ok {
			causal = append(causal, m.Name)
		}
	}
	fl.StringVar(&f.model, "model", d.Model, "the registered model the weights are of (models that generate: "+strings.Join(causal, ", ")+")")
	registerModelFlags(fl)
	fl.IntVar(&f.context, "context", d.Context, "context length of the model (tokens per sample it was trained on): the prompt and the new tokens must fit it")
	fl.StringVar(&f.data, "data", "", "the data the model was trained on, for its vocabulary and tokenizer (as troupe train --data; default: the model's, gospec for gpt)")
	fl.StringVar(&f.vocab, "vocab", d.Vocab, "text tokenisation of the data: char or byte")
	fl.StringVar(&f.init, "init", "", "the weights to generate from: a safetensors file (troupe train --save, or PyTorch's state_dict by the same names); required")
	fl.StringVar(&f.prompt, "prompt", "", "the text to continue, encoded with the data's tokenizer (give --prompt or --prompt-ids)")
	fl.StringVar(&f.promptIDs, "prompt-ids", "", "the token ids to continue, comma-separated: 1,2,3")
	fl.IntVar(&f.maxNew, "max-new-tokens", o.MaxNewTokens, "the tokens to generate")
	fl.Float64Var(&f.temperature, "temperature", o.Temperature, "divide the logits by this before sampling (0: greedy, the most likely token at every step)")
	fl.IntVar(&f.topK, "top-k", o.TopK, "sample from the K most likely tokens only (0: all)")
	fl.Float64Var(&f.topP, "top-p", o.TopP, "sample from the most likely tokens whose probabilities first reach P (nucleus sampling), in (0, 1]; 1: all")
	fl.Uint64Var(&f.seed, "seed", o.Seed, "seed of the sampler: the same weights, prompt, flags and seed give the same tokens")
	fl.BoolVar(&f.jsonOut, "json", false, `print {"ids": [the new tokens], "text": "their text"} on stdout instead of the text`)
	fl.StringVar(&f.device, "device", d.Device, "kernels backend: cpu (cuda when built with -tags cuda)")
	fl.IntVar(&f.threads, "threads", 0, "threads for the kernels (0: GOMAXPROCS)")

	inGroup(fl, groupGenerate, "init", "prompt", "prompt-ids", "max-new-tokens", "temperature", "top-k", "top-p", "seed", "json")
	inGroup(fl, groupModel, append(append([]string{"model"}, modelFlagNames()...), "context")...)
	inGroup(fl, groupData, "data", "vocab")
	inGroup(fl, groupRuntime, "device", "threads")
}

// causalModel reports whether the registered model d generates: whether
// its Spec for a small token dataset implements nn.CausalLM (known is
// false when d makes no Spec for one; its Spec for the real data decides).
func causalModel(d nn.ModelDef) (causal, known bool) {
	v, err := d.Resolve(nil)
	if err != nil {
		return false, false
	}
	s, err := d.New(v, nn.DataShape{Tokens: true, Classes: 2, Context: 2})
	if err != nil {
		return false, false
	}
	_, ok := s.(nn.CausalLM)
	return ok, true
}

// generation is a prepared troupe generate: the model with its weights,
// the prompt's ids, the options and the tokenizer.
type generation struct {
	model  *nn.Model
	prompt []int32
	opts   generate.Options
	tok    tokenizer
	// promptFlag is the flag the prompt came from.
	promptFlag string
}

// usagef is a command-line error (exit status 2).
func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// prepare checks the flags, opens the data for its vocabulary, builds the
// model, loads its weights and encodes the prompt. Everything the user
// gave wrong is a usage error naming its flag.
func (f *generateFlags) prepare(fl *pflag.FlagSet) (*generation, error) {
	switch {
	case f.init == "":
		return nil, usagef("--init is required: the weights to generate from (a safetensors file, e.g. troupe train --save's)")
	case fl.Changed("prompt") == fl.Changed("prompt-ids"):
		return nil, usagef("give one of --prompt TEXT and --prompt-ids 1,2,3 (got %s)", map[bool]string{true: "both", false: "neither"}[fl.Changed("prompt")])
	case !(f.topP > 0 && f.topP <= 1):
		return nil, usagef("--top-p %g: want a probability in (0, 1] (1 keeps every token)", f.topP)
	case f.maxNew < 1:
		return nil, usagef("--max-new-tokens %d: want at least 1", f.maxNew)
	case f.temperature < 0 || math.IsNaN(f.temperature) || math.IsInf(f.temperature, 0):
		return nil, usagef("--temperature %g: want 0 (greedy) or more", f.temperature)
	case f.topK < 0:
		return nil, usagef("--top-k %d: want 0 (every token) or more", f.topK)
	}
	cfg, err := train.DefaultConfigFor(f.model)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, inFlags(err))
	}
	cfg.ModelArgs, cfg.Data, cfg.Vocab, cfg.Context = modelArgs(fl), f.data, f.vocab, f.context
	def, err := nn.Lookup(cfg.Model)
	if err != nil {
		return nil, usagef("--model %s: %s", f.model, strings.TrimPrefix(err.Error(), nn.ErrConfig.Error()+": "))
	}
	notCausal := usagef("--model %s is not a causal language model: it cannot generate", def.Name)
	if causal, known := causalModel(def); known && !causal {
		return nil, notCausal
	}
	ds, _, err := train.OpenData(&cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, inFlags(err))
	}
	spec, err := train.ModelSpec(&cfg, ds)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, inFlags(err))
	}
	if _, ok := spec.(nn.CausalLM); !ok {
		return nil, notCausal
	}
	be, err := kernels.Open(f.device, kernels.Options{Threads: f.threads})
	if err != nil {
		return nil, usagef("--device %s: %v", f.device, err)
	}
	m, err := generate.Load(be, spec, f.init)
	if err != nil {
		return nil, usagef("--init %s: %v (the model is %s %+v: give the model flags, --data, --vocab and --context of the run that wrote the weights)",
			f.init, err, spec.Name(), spec)
	}
	g := &generation{model: m, tok: tokenizerOf(ds), opts: generate.Options{
		MaxNewTokens: f.maxNew, Temperature: f.temperature, TopK: f.topK, TopP: f.topP, Seed: f.seed,
	}}
	if fl.Changed("prompt") {
		if g.tok == nil {
			return nil, usagef("--prompt: the data %s has no tokenizer (its tokens are ids only); give --prompt-ids", ds.Name())
		}
		if g.prompt, err = g.tok.Encode(f.prompt); err != nil {
			return nil, usagef("--prompt: %v", err)
		}
		if len(g.prompt) == 0 {
			return nil, usagef("--prompt is empty: give at least one token of text")
		}
	} else if g.prompt, err = parsePromptIDs(f.promptIDs); err != nil {
		return nil, usagef("--prompt-ids %q: %v", f.promptIDs, err)
	}
	g.promptFlag = "--prompt-ids"
	if fl.Changed("prompt") {
		g.promptFlag = "--prompt"
	}
	return g, nil
}

// generate runs the generation and writes its output: the text as it
// comes (or the ids, space-separated, for data without a tokenizer), or
// one JSON document at the end.
func (g *generation) generate(ctx context.Context, w io.Writer, jsonOut bool) error {
	o := g.opts
	if !jsonOut {
		o.OnToken = func(id int32) error {
			if g.tok == nil {
				_, err := fmt.Fprintf(w, "%d ", id)
				return err
			}
			_, err := io.WriteString(w, g.tok.Decode([]int32{id}))
			return err
		}
	}
	ids, err := generate.Generate(ctx, g.model, g.prompt, o)
	switch {
	case errors.Is(err, generate.ErrPrompt):
		return usagef("%s: %v", g.promptFlag, err)
	case errors.Is(err, generate.ErrContext):
		return usagef("--max-new-tokens %d with --context %d: %v", g.opts.MaxNewTokens, g.model.Context, err)
	case errors.Is(err, generate.ErrOptions):
		return fmt.Errorf("%w: %w", errUsage, err)
	case err != nil:
		return err
	}
	if !jsonOut {
		_, err := fmt.Fprintln(w)
		return err
	}
	out := generateOutput{IDs: ids}
	if g.tok != nil {
		text := g.tok.Decode(ids)
		out.Text = &text
	}
	return writeJSON(w, out)
}

// tokenizer turns text into token ids and back.
type tokenizer interface {
	Encode(text string) ([]int32, error)
	Decode(ids []int32) string
}

// tokenizerOf is the tokenizer of the data a model was trained on (nil
// when its tokens have no text): the one place troupe generate learns
// it, so that another tokenizer (a BPE one) plugs in here.
func tokenizerOf(ds data.Dataset) tokenizer {
	if t, ok := ds.(data.Tokenized); ok && t.Tokenizer() != nil {
		return dataTokenizer{t.Tokenizer()}
	}
	if t, ok := ds.(data.TextDataset); ok {
		return t.Vocab()
	}
	return nil
}

// parsePromptIDs reads --prompt-ids: non-negative integers separated by
// commas (spaces around them allowed), at least one.
func parsePromptIDs(s string) ([]int32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("no ids; want comma-separated token ids like 1,2,3")
	}
	parts := strings.Split(s, ",")
	ids := make([]int32, len(parts))
	for i, p := range parts {
		v, err := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("item %d, %q, is not a token id (a non-negative integer)", i+1, strings.TrimSpace(p))
		}
		ids[i] = int32(v)
	}
	return ids, nil
}

// dataTokenizer is a data.Tokenizer (gpt2 of prepared shards, or a text
// corpus's) as troupe generate uses it.
type dataTokenizer struct{ t data.Tokenizer }

func (d dataTokenizer) Encode(text string) ([]int32, error) { return d.t.Encode(nil, []byte(text)) }
func (d dataTokenizer) Decode(ids []int32) string           { return d.t.Decode(ids) }

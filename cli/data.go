package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/troupe-ml/troupe/data"
)

func init() { rootCmd.AddCommand(newDataCmd()) }

// newDataCmd is `troupe data`: corpora for training.
func newDataCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "data",
		Short: "Prepare training corpora (token shards)",
	}
	cmd.AddCommand(newDataPrepareCmd())
	return cmd
}

type dataPrepareFlags struct {
	tokenizer, out string
	shardTokens    int
	valFraction    float64
	workers        int
	json           bool
}

// prepareSummary is troupe data prepare's --json document: meta.json's
// fields, the directory and the time taken.
type prepareSummary struct {
	Out string `json:"out"`
	*data.Meta
	Seconds float64 `json:"seconds"`
}

func newDataPrepareCmd() *cobra.Command {
	d := data.DefaultPrepareConfig()
	f := dataPrepareFlags{}
	cmd := &cobra.Command{
		Use:   "prepare --tokenizer NAME --out DIR [--shard-tokens N] [--val-fraction F] INPUT...",
		Short: "Tokenize text into llm.c token shards for --data DIR",
		Long: `Tokenizes the inputs into token shards in llm.c's format (a header of 256
int32: magic 20240520, version 1, token count; then uint16 tokens), named
DIR_train_000000.bin … and DIR_val_000000.bin …, and a meta.json (tokenizer,
vocabulary size, token counts), for troupe train --data DIR.

Inputs are text files (one document each), JSONL files (.jsonl or .json: one
document a line, in its "text" field, as Hugging Face datasets export) and
directories of them (walked in name order, hidden entries skipped). Every
document begins with <|endoftext|>, as llm.c's scripts write them. The last
--val-fraction of the tokens are the val shards; each split is spread evenly
over as few shards as hold --shard-tokens each. Tokenizing runs on every
core; the output is the same on any machine. Tokenizers: gpt2 (GPT-2's BPE,
50,257 ids, built in), char (the corpus's characters), byte.`,
		Example: `  troupe data prepare --tokenizer gpt2 --out shakespeare input.txt
  troupe data prepare --tokenizer gpt2 --out web --shard-tokens 100000000 data/*.jsonl
  troupe train --model gpt --data shakespeare --context 256`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := data.DefaultPrepareConfig()
			c.Tokenizer, c.Out, c.ShardTokens, c.ValFraction, c.Workers, c.Inputs = f.tokenizer, f.out, f.shardTokens, f.valFraction, f.workers, args
			return runDataPrepare(cmd.OutOrStdout(), c, f.json)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.tokenizer, "tokenizer", d.Tokenizer, "gpt2, char or byte")
	fl.StringVar(&f.out, "out", "", "directory for the shards and meta.json (created; must hold no shards yet)")
	fl.IntVar(&f.shardTokens, "shard-tokens", d.ShardTokens, "most tokens per shard")
	fl.Float64Var(&f.valFraction, "val-fraction", d.ValFraction, "share of the tokens, from the end, for the val shards (0: none)")
	fl.IntVar(&f.workers, "workers", 0, "tokenizing goroutines (0: GOMAXPROCS)")
	fl.BoolVar(&f.json, "json", false, "print the summary as one JSON document")
	return cmd
}

func runDataPrepare(w io.Writer, c data.PrepareConfig, asJSON bool) error {
	if c.Out == "" {
		return fmt.Errorf("%w: --out is required", errUsage)
	}
	start := time.Now()
	var bar *progressbar.ProgressBar
	if stderrTerm != nil {
		c.Progress = func(done, total int64) {
			if bar == nil {
				bar = progressbar.DefaultBytes(total, "tokenizing")
			}
			_ = bar.Set64(done)
		}
	} else {
		next := 0.1
		c.Progress = func(done, total int64) {
			if float64(done) >= next*float64(total) {
				logger.Info("tokenizing", zap.Int64("bytes", done), zap.Int64("of", total))
				next += 0.1
			}
		}
	}
	m, err := data.Prepare(c)
	if bar != nil {
		_ = bar.Finish()
		fmt.Fprintln(os.Stderr)
	}
	if errors.Is(err, data.ErrOptions) {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	logger.Info("corpus prepared", zap.String("out", c.Out), zap.String("tokenizer", m.Tokenizer),
		zap.Int64("documents", m.Documents), zap.Int64("train_tokens", m.TrainTokens), zap.Int64("val_tokens", m.ValTokens),
		zap.Int("shards", len(m.TrainShards)+len(m.ValShards)), zap.Float64("seconds", secs))
	if asJSON {
		return json.NewEncoder(w).Encode(prepareSummary{Out: c.Out, Meta: m, Seconds: secs})
	}
	_, err = fmt.Fprintf(w, "prepared %s: %d documents, %d train tokens in %d shards, %d val tokens in %d, %s vocabulary %d, %.2f s\n",
		c.Out, m.Documents, m.TrainTokens, len(m.TrainShards), m.ValTokens, len(m.ValShards), m.Tokenizer, m.VocabSize, secs)
	return err
}

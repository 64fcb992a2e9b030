package data

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readSplit returns the tokens of a prepared split, shard after shard.
func readSplit(t *testing.T, dir string, names []string) []int32 {
	t.Helper()
	var out []int32
	for _, n := range names {
		sh, _, err := openShard(filepath.Join(dir, n), 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range sh.toks {
			out = append(out, int32(v))
		}
	}
	return out
}

func specFile(t *testing.T) string {
	t.Helper()
	raw, err := goSpec()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "go_spec.html")
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The Go spec prepared with gpt2: one document, EOT first; train then val
// decode to exactly the file; the shards are even and at most
// ShardTokens; the output does not depend on the number of workers.
func TestPrepareGoSpec(t *testing.T) {
	in := specFile(t)
	raw, _ := goSpec()
	var outs [][]byte
	for _, workers := range []int{1, 3} {
		c := DefaultPrepareConfig()
		c.Out, c.Inputs, c.Workers, c.ShardTokens = filepath.Join(t.TempDir(), "spec"), []string{in}, workers, 30000
		var last, total int64
		c.Progress = func(done, all int64) { last, total = done, all }
		m, err := Prepare(c)
		if err != nil {
			t.Fatal(err)
		}
		if last != total || total != int64(len(raw)) {
			t.Errorf("progress ended at %d of %d bytes, want %d", last, total, len(raw))
		}
		if m.Documents != 1 || m.VocabSize != 50257 || m.EOT != 50256 || m.Tokenizer != "gpt2" {
			t.Fatalf("meta %+v", m)
		}
		all := append(readSplit(t, c.Out, m.TrainShards), readSplit(t, c.Out, m.ValShards)...)
		tok, _ := GPT2()
		if all[0] != 50256 || tok.Decode(all[1:]) != string(raw) {
			t.Fatal("the shards do not decode to EOT and the spec")
		}
		whole, _ := tok.Encode(nil, raw)
		if !slices.Equal(all[1:], whole) {
			t.Fatal("tokenizing in chunks gave other ids than the whole text")
		}
		total = int64(len(all))
		if m.TrainTokens+m.ValTokens != total || m.ValTokens != int64(float64(total)*0.1+0.5) {
			t.Errorf("train %d + val %d tokens of %d", m.TrainTokens, m.ValTokens, total)
		}
		if len(m.TrainShards) != 4 || m.TrainShards[0] != "spec_train_000000.bin" || len(m.ValShards) != 1 {
			t.Errorf("shards %v %v", m.TrainShards, m.ValShards)
		}
		for _, n := range m.TrainShards {
			sh, _, _ := openShard(filepath.Join(c.Out, n), 0)
			if d := len(sh.toks) - int(m.TrainTokens/4); d < 0 || d > 1 {
				t.Errorf("shard %s holds %d tokens, uneven", n, len(sh.toks))
			}
		}
		var dump bytes.Buffer
		for _, n := range append(append(m.TrainShards, m.ValShards...), MetaFile) {
			b, _ := os.ReadFile(filepath.Join(c.Out, n))
			dump.Write(b)
		}
		outs = append(outs, dump.Bytes())
		left, _ := filepath.Glob(filepath.Join(c.Out, ".tokens-*"))
		if len(left) > 0 {
			t.Errorf("temporary files left: %v", left)
		}
		// The prepared corpus opens as --data DIR, with its tokenizer.
		o := DefaultOptions()
		o.Context = 64
		train, test, err := Open(c.Out, o)
		if err != nil || test == nil || train.Classes() != 50257 || train.(Tokenized).Tokenizer().Name() != "gpt2" {
			t.Fatalf("open the prepared corpus: %v", err)
		}
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Error("1 and 3 workers wrote different shards")
	}
}

// JSONL lines and directories: every document after an EOT, in order
// (directories walked by name, hidden files skipped); char and byte.
func TestPrepareDocuments(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus")
	os.MkdirAll(filepath.Join(corpus, "sub"), 0o755)
	os.WriteFile(filepath.Join(corpus, "b.txt"), []byte("second"), 0o644)
	os.WriteFile(filepath.Join(corpus, "a.jsonl"), []byte("{\"text\":\"first\",\"id\":1}\n\n{\"text\":\"é\\n\"}\n"), 0o644)
	os.WriteFile(filepath.Join(corpus, "sub", "c.txt"), []byte("third"), 0o644)
	os.WriteFile(filepath.Join(corpus, ".hidden"), []byte("nope"), 0o644)
	for _, name := range []string{"char", "byte", "gpt2"} {
		c := DefaultPrepareConfig()
		c.Tokenizer, c.Out, c.Inputs, c.ValFraction = name, filepath.Join(dir, "out-"+name), []string{corpus}, 0
		m, err := Prepare(c)
		if err != nil {
			t.Fatal(err)
		}
		o := DefaultOptions()
		o.Context = 2
		train, _, err := Open(c.Out, o)
		if err != nil {
			t.Fatal(err)
		}
		tok := train.(Tokenized).Tokenizer()
		got := tok.Decode(readSplit(t, c.Out, m.TrainShards))
		if want := "<|endoftext|>first<|endoftext|>é\n<|endoftext|>second<|endoftext|>third"; got != want || m.Documents != 4 || len(m.ValShards) != 0 {
			t.Errorf("%s: corpus %q, want %q (%d documents)", name, got, want, m.Documents)
		}
	}
}

func TestPrepareErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte("{\"text\":\"ok\"}\n{\"txt\":\"no\"}\n"), 0o644)
	empty := filepath.Join(dir, "empty")
	os.MkdirAll(empty, 0o755)
	os.WriteFile(filepath.Join(empty, "e.txt"), nil, 0o644)
	used := filepath.Join(dir, "used")
	os.MkdirAll(used, 0o755)
	os.WriteFile(filepath.Join(used, MetaFile), []byte("{}"), 0o644)
	for _, c := range []struct {
		cfg  func(*PrepareConfig)
		want string
		sent error
	}{
		{func(c *PrepareConfig) { c.Inputs = []string{bad} }, "bad.jsonl line 2: no \"text\" string field", ErrFormat},
		{func(c *PrepareConfig) { c.Inputs = []string{empty} }, "the corpus is empty", ErrFormat},
		{func(c *PrepareConfig) { c.Inputs = []string{filepath.Join(dir, "missing")} }, "missing", ErrNotFound},
		{func(c *PrepareConfig) { c.Tokenizer = "bpe" }, `tokenizer "bpe"`, ErrOptions},
		{func(c *PrepareConfig) { c.ValFraction = 1 }, "val fraction", ErrOptions},
		{func(c *PrepareConfig) { c.Out = used }, "holds shards or meta.json already", ErrOptions},
	} {
		cfg := DefaultPrepareConfig()
		cfg.Out, cfg.Inputs = filepath.Join(t.TempDir(), "o"), []string{bad}
		c.cfg(&cfg)
		_, err := Prepare(cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, c.sent) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
	}
}

// A text file read with --vocab gpt2: GPT-2's ids, split 90/10.
func TestTextGPT2(t *testing.T) {
	o := DefaultOptions()
	o.Vocab, o.Context = VocabGPT2, 16
	train, test, err := Open("gospec:vocab=gpt2", o)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := goSpec()
	tok, _ := GPT2()
	ids, _ := tok.Encode(nil, raw)
	if train.Classes() != 50257 || train.Len() != (len(ids)*9/10-1)/16 || test.Len() != (len(ids)-len(ids)*9/10-1)/16 {
		t.Fatalf("train %d test %d windows of %d ids", train.Len(), test.Len(), len(ids))
	}
	var b Batch
	train.Fill([]int{3}, &b)
	if !slices.Equal(b.Tokens[:16], ids[48:64]) || train.(Tokenized).Tokenizer() != tok {
		t.Fatal("window 3 is not ids[48:64]")
	}
}

// BenchmarkPrepareGoSpec prepares the Go specification (≈290 kB) with
// GPT-2's tokenizer: docs/BENCHMARKS.md records it.
func BenchmarkPrepareGoSpec(b *testing.B) {
	raw, err := goSpec()
	if err != nil {
		b.Fatal(err)
	}
	in := filepath.Join(b.TempDir(), "go_spec.html")
	os.WriteFile(in, raw, 0o644)
	if _, err := GPT2(); err != nil { // built once per process, outside the timing
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	for i := 0; b.Loop(); i++ {
		c := DefaultPrepareConfig()
		c.Out, c.Inputs = filepath.Join(b.TempDir(), "spec"), []string{in}
		if _, err := Prepare(c); err != nil {
			b.Fatal(err)
		}
	}
}

package data

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
)

// MetaFile is the name of a prepared corpus's description, beside its
// shards.
const MetaFile = "meta.json"

// Meta is a prepared corpus's meta.json: how its shards were made and
// what they hold.
type Meta struct {
	// Format is "llm.c" (256 × int32 header, then uint16 tokens).
	Format string `json:"format"`
	// Tokenizer names the tokenizer (gpt2, char or byte); empty for shards
	// made elsewhere.
	Tokenizer string `json:"tokenizer,omitempty"`
	// Chars is a char tokenizer's character list (id i is its i-th).
	Chars string `json:"chars,omitempty"`
	// VocabSize is the number of token ids (EOT included).
	VocabSize int `json:"vocab_size"`
	// EOT is the id that begins every document.
	EOT int `json:"eot"`
	// Documents counts the documents of the inputs.
	Documents int64 `json:"documents"`
	// TrainTokens and ValTokens count the tokens of each split.
	TrainTokens int64 `json:"train_tokens"`
	ValTokens   int64 `json:"val_tokens"`
	// TrainShards and ValShards are the shard files, relative to the
	// directory of meta.json.
	TrainShards []string `json:"train_shards"`
	ValShards   []string `json:"val_shards"`
}

// ParseMeta decodes and checks a meta.json (path names it in errors).
func ParseMeta(path string, b []byte) (*Meta, error) {
	bad := func(format string, args ...any) (*Meta, error) {
		return nil, fmt.Errorf("%w: %s: %s", ErrFormat, path, fmt.Sprintf(format, args...))
	}
	var m Meta
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&m); err != nil {
		return bad("%v", err)
	}
	if d.More() {
		return bad("data after the JSON object")
	}
	if m.Format != "llm.c" {
		return bad("format %q, want %q", m.Format, "llm.c")
	}
	if m.VocabSize < 1 || m.VocabSize > MaxShardVocab {
		return bad("vocab_size %d, want 1 to %d (uint16 tokens)", m.VocabSize, MaxShardVocab)
	}
	if m.EOT < 0 || m.EOT >= m.VocabSize {
		return bad("eot %d outside the vocabulary [0, %d)", m.EOT, m.VocabSize)
	}
	if m.Documents < 0 || m.TrainTokens < 0 || m.ValTokens < 0 {
		return bad("negative counts")
	}
	for _, s := range slices.Concat(m.TrainShards, m.ValShards) {
		if s == "" || filepath.IsAbs(s) || strings.Contains(filepath.ToSlash(s), "/") {
			return bad("shard name %q: want a file name beside meta.json", s)
		}
	}
	if m.Tokenizer != "" {
		tok, err := m.tokenizer()
		if err != nil {
			return bad("%v", err)
		}
		if tok.VocabSize() != m.VocabSize || int(tok.EOT()) != m.EOT {
			return bad("tokenizer %s has %d ids and EOT %d, but vocab_size is %d and eot %d",
				m.Tokenizer, tok.VocabSize(), tok.EOT(), m.VocabSize, m.EOT)
		}
	}
	return &m, nil
}

// tokenizer returns the tokenizer meta.json names (nil when none).
func (m *Meta) tokenizer() (Tokenizer, error) {
	switch m.Tokenizer {
	case "":
		return nil, nil
	case TokenizerChar:
		return CharTokenizer(m.Chars)
	}
	return TokenizerFor(m.Tokenizer)
}

// shardSet serves token shards as windows of Context tokens: the samples
// of each shard in turn, sample j of a shard being its tokens
// [j·C, j·C+C] (as tokenSet's, stride C); windows never cross shards.
type shardSet struct {
	name   string
	shards []*shard
	// starts[k] is the first sample of shard k; starts[len] = Len.
	starts []int
	ctx    int
	vocab  int
	tok    Tokenizer
	// touched counts the windows Fill read, for releaseEvery.
	touched atomic.Int64
}

var _ Dataset = (*shardSet)(nil)

// releaseEvery is how many windows Fill reads between two releases of the
// shards' pages from the resident set. A read fault maps more than the
// window (the pages around it, up to a whole large folio of the page
// cache: 2 MiB), so without releases a shuffled run keeps mapping new
// parts of the corpus until all of it is resident (measured: +426 MiB
// after 480 windows of a 2 GiB corpus). Releasing every 64 windows bounds
// that to 64 folios, and its cost (one madvise per shard) spread over 64
// windows is small beside the faults themselves; releasing after every
// window cost 25 µs a window (BenchmarkShardFill).
const releaseEvery = 16

func (s *shardSet) Name() string  { return s.name }
func (s *shardSet) Len() int      { return s.starts[len(s.shards)] }
func (s *shardSet) Kind() Kind    { return Tokens }
func (s *shardSet) Features() int { return 0 }
func (s *shardSet) Classes() int  { return s.vocab }
func (s *shardSet) Context() int  { return s.ctx }

func (s *shardSet) Fill(idx []int, b *Batch) {
	c := s.ctx
	b.reset(len(idx), 0, c, c)
	n := s.Len()
	for r, i := range idx {
		if i < 0 || i >= n {
			panic(fmt.Sprintf("data: %s: sample index %d outside [0, %d)", s.name, i, n))
		}
		k := sort.SearchInts(s.starts, i+1) - 1
		w := s.shards[k].toks[(i-s.starts[k])*c:]
		x, y := b.Tokens[r*c:(r+1)*c], b.Y[r*c:(r+1)*c]
		for j := range c {
			x[j] = int32(w[j])
			y[j] = int32(w[j+1])
		}
	}
	if t := s.touched.Add(int64(len(idx))); t/releaseEvery != (t-int64(len(idx)))/releaseEvery {
		for _, sh := range s.shards {
			sh.mem.release()
		}
	}
}

// tokShardSet is a shardSet whose ids decode to text.
type tokShardSet struct{ *shardSet }

var _ Tokenized = tokShardSet{}

func (s tokShardSet) Tokenizer() Tokenizer { return s.tok }

// isShardSpec reports whether a --data path names token shards: a glob, a
// .bin file, or a directory holding meta.json or .bin files.
func isShardSpec(path string) bool {
	if strings.ContainsAny(path, "*?[") {
		return true
	}
	st, err := os.Stat(path)
	if err != nil {
		return false
	}
	if !st.IsDir() {
		return strings.EqualFold(filepath.Ext(path), ".bin")
	}
	if _, err := os.Stat(filepath.Join(path, MetaFile)); err == nil {
		return true
	}
	bins, _ := filepath.Glob(filepath.Join(path, "*.bin"))
	return len(bins) > 0
}

// isValShard reports whether a shard file holds held-out tokens: llm.c's
// *_val_*.bin and nanoGPT's val.bin (any name with "val" as a word).
func isValShard(path string) bool {
	b := strings.TrimSuffix(strings.ToLower(filepath.Base(path)), ".bin")
	return slices.Contains(strings.FieldsFunc(b, func(r rune) bool { return r == '_' || r == '-' || r == '.' }), "val")
}

// openShards opens the token shards a spec names (a directory, a glob or
// one .bin file): the training set from the shards whose name does not
// say val, the held-out set (nil if none) from those that do. The
// vocabulary is o.VocabSize, else meta.json's (in the directory, or
// beside the glob's matches), else the largest id + 1.
func openShards(spec string, o Options) (Dataset, Dataset, error) {
	var files []string
	dir := spec
	st, err := os.Stat(spec)
	switch {
	case err == nil && st.IsDir():
		files, _ = filepath.Glob(filepath.Join(spec, "*.bin"))
	case err == nil:
		files, dir = []string{spec}, filepath.Dir(spec)
	case strings.ContainsAny(spec, "*?["):
		if files, err = filepath.Glob(spec); err != nil {
			return nil, nil, fmt.Errorf("%w %q: %v", ErrSpec, spec, err)
		}
		if len(files) > 0 {
			dir = filepath.Dir(files[0])
		}
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil, fmt.Errorf("%w: token shards %s: no such file or directory", ErrNotFound, spec)
	default:
		return nil, nil, fmt.Errorf("%w: token shards %s: %v", ErrNotFound, spec, err)
	}
	var meta *Meta
	metaPath := filepath.Join(dir, MetaFile)
	if b, err := os.ReadFile(metaPath); err == nil {
		if meta, err = ParseMeta(metaPath, b); err != nil {
			return nil, nil, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	slices.Sort(files)
	var trainFiles, valFiles []string
	for _, f := range files {
		if isValShard(f) {
			valFiles = append(valFiles, f)
		} else {
			trainFiles = append(trainFiles, f)
		}
	}
	if meta != nil && st != nil && st.IsDir() && len(meta.TrainShards) > 0 {
		// A prepared directory: its shards are the ones meta.json lists,
		// whatever else lies beside them.
		trainFiles, valFiles = nil, nil
		for _, f := range meta.TrainShards {
			trainFiles = append(trainFiles, filepath.Join(dir, f))
		}
		for _, f := range meta.ValShards {
			valFiles = append(valFiles, filepath.Join(dir, f))
		}
	}
	if len(trainFiles) == 0 {
		return nil, nil, fmt.Errorf("%w: token shards %s: no training shard (*.bin without val in its name): the corpus is empty", ErrFormat, spec)
	}
	vocab := o.VocabSize
	var tok Tokenizer
	if meta != nil {
		if vocab > 0 && vocab < meta.VocabSize {
			return nil, nil, fmt.Errorf("%w: vocabulary size %d is smaller than the %d of %s", ErrOptions, vocab, meta.VocabSize, metaPath)
		}
		if vocab == 0 {
			vocab = meta.VocabSize
		}
		if tok, err = meta.tokenizer(); err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %v", ErrFormat, metaPath, err)
		}
	}
	// A vocabulary larger than the ids need is allowed (a model may pad
	// it, as nanoGPT's 50304 for GPT-2's 50257).
	if vocab > maxClasses {
		return nil, nil, fmt.Errorf("%w: vocabulary size %d is over the limit of %d", ErrOptions, vocab, maxClasses)
	}
	name := filepath.Base(dir)
	if st != nil && !st.IsDir() {
		name = baseName(spec)
	}
	train, hiTrain, err := newShardSet(name+"/train", trainFiles, o.Context, vocab)
	if err != nil {
		return nil, nil, err
	}
	var test *shardSet
	hi := hiTrain
	if len(valFiles) > 0 {
		var hiVal int
		if test, hiVal, err = newShardSet(name+"/val", valFiles, o.Context, vocab); err != nil {
			return nil, nil, err
		}
		hi = max(hi, hiVal)
	}
	if vocab == 0 {
		train.vocab = hi + 1
		if test != nil {
			test.vocab = hi + 1
		}
	}
	train.tok = tok
	if test == nil {
		return wrapShards(train), nil, nil
	}
	test.tok = tok
	return wrapShards(train), wrapShards(test), nil
}

func wrapShards(s *shardSet) Dataset {
	if s.tok != nil {
		return tokShardSet{s}
	}
	return s
}

// newShardSet maps files (checking their ids against vocab when it is not
// 0) and returns their windows and the largest id.
func newShardSet(name string, files []string, ctx, vocab int) (*shardSet, int, error) {
	s := &shardSet{name: name, ctx: ctx, vocab: vocab, starts: []int{0}}
	hi := 0
	for _, f := range files {
		sh, h, err := openShard(f, vocab)
		if err != nil {
			return nil, 0, err
		}
		if int(len(sh.toks)) < ctx+1 {
			return nil, 0, fmt.Errorf("%w: token shard %s holds %d tokens, fewer than context+1 = %d for one sample (use a smaller context, or larger shards)",
				ErrFormat, f, len(sh.toks), ctx+1)
		}
		s.shards = append(s.shards, sh)
		s.starts = append(s.starts, s.starts[len(s.starts)-1]+(len(sh.toks)-1)/ctx)
		hi = max(hi, int(h))
	}
	return s, hi, nil
}

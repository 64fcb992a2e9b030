package data

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// PrepareConfig is one run of Prepare (troupe data prepare).
type PrepareConfig struct {
	// Tokenizer is gpt2, char or byte.
	Tokenizer string
	// Out is the directory the shards and meta.json go to; created if
	// missing; it must hold no shards or meta.json already.
	Out string
	// ShardTokens is the most tokens of one shard (llm.c's fineweb script
	// writes 10^8); the tokens of a split are spread evenly over as few
	// shards as hold them.
	ShardTokens int
	// ValFraction is the share of the tokens, from the end of the corpus,
	// that go to the val shards (0: none).
	ValFraction float64
	// Inputs are text files (one document each), JSONL files (.jsonl or
	// .json: one document a line, in its "text" field) and directories
	// of them (walked in name order, hidden entries skipped).
	Inputs []string
	// Workers tokenizes in this many goroutines (0: GOMAXPROCS).
	Workers int
	// Progress, when set, is told the input bytes read so far and their
	// total, from the goroutine that called Prepare.
	Progress func(done, total int64)
}

// DefaultPrepareConfig returns troupe data prepare's defaults.
func DefaultPrepareConfig() PrepareConfig {
	return PrepareConfig{Tokenizer: TokenizerGPT2, ShardTokens: 100_000_000, ValFraction: 0.1}
}

// Validate checks c and fills Workers.
func (c *PrepareConfig) Validate() error {
	if !slices.Contains(Tokenizers, c.Tokenizer) {
		return fmt.Errorf("%w: tokenizer %q, want one of %s", ErrOptions, c.Tokenizer, strings.Join(Tokenizers, ", "))
	}
	if c.Out == "" {
		return fmt.Errorf("%w: no output directory", ErrOptions)
	}
	if c.ShardTokens < 1 || c.ShardTokens > math.MaxInt32 {
		return fmt.Errorf("%w: shard tokens %d, want 1 to %d", ErrOptions, c.ShardTokens, math.MaxInt32)
	}
	if !(c.ValFraction >= 0 && c.ValFraction < 1) {
		return fmt.Errorf("%w: val fraction %v, want 0 ≤ f < 1", ErrOptions, c.ValFraction)
	}
	if len(c.Inputs) == 0 {
		return fmt.Errorf("%w: no input files", ErrOptions)
	}
	if c.Workers < 0 {
		return fmt.Errorf("%w: %d workers", ErrOptions, c.Workers)
	}
	if c.Workers == 0 {
		c.Workers = runtime.GOMAXPROCS(0)
	}
	return nil
}

// source is one input file.
type source struct {
	path  string
	jsonl bool
	size  int64
}

// Prepare tokenizes the inputs into llm.c shards and meta.json in c.Out
// (see PrepareConfig): every document begins with the tokenizer's EOT, as
// llm.c's scripts write them. The output depends only on the inputs and
// the settings, not on Workers. It returns the written meta.json.
// Tokenizing runs in c.Workers goroutines, all ended when it returns.
func Prepare(c PrepareConfig) (*Meta, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	srcs, err := collectInputs(c.Inputs)
	if err != nil {
		return nil, err
	}
	if err := checkOut(c.Out); err != nil {
		return nil, err
	}
	var tok Tokenizer
	if c.Tokenizer == TokenizerChar {
		if tok, err = charsOf(srcs); err != nil {
			return nil, err
		}
	} else if tok, err = TokenizerFor(c.Tokenizer); err != nil {
		return nil, err
	}
	if tok.VocabSize() > MaxShardVocab {
		return nil, fmt.Errorf("%w: the %s tokenizer has %d ids, more than uint16 tokens hold", ErrOptions, tok.Name(), tok.VocabSize())
	}
	tmp, err := os.CreateTemp(c.Out, ".tokens-*.tmp")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrOutput, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	meta := &Meta{Format: "llm.c", Tokenizer: tok.Name(), VocabSize: tok.VocabSize(), EOT: int(tok.EOT())}
	if ct, ok := tok.(charTokenizer); ok {
		meta.Chars = ct.Chars()
	}
	total, textBytes, err := tokenizeAll(c, tok, srcs, tmp, meta)
	if err != nil {
		return nil, err
	}
	if meta.Documents == 0 || textBytes == 0 {
		return nil, fmt.Errorf("%w: the inputs (%s) hold no text: the corpus is empty", ErrFormat, strings.Join(c.Inputs, ", "))
	}
	nVal := int64(math.Round(c.ValFraction * float64(total)))
	meta.TrainTokens, meta.ValTokens = total-nVal, nVal
	prefix := shardPrefix(c.Out)
	if meta.TrainShards, err = writeSplit(tmp, 0, meta.TrainTokens, c, prefix+"_train"); err != nil {
		return nil, err
	}
	if meta.ValShards, err = writeSplit(tmp, meta.TrainTokens, nVal, c, prefix+"_val"); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(c.Out, MetaFile), append(b, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrOutput, err)
	}
	return meta, nil
}

// collectInputs expands the inputs into files, in order.
func collectInputs(inputs []string) ([]source, error) {
	var out []source
	add := func(path string, size int64) {
		ext := strings.ToLower(filepath.Ext(path))
		out = append(out, source{path: path, size: size, jsonl: ext == ".jsonl" || ext == ".json"})
	}
	for _, in := range inputs {
		st, err := os.Stat(in)
		if err != nil {
			return nil, fmt.Errorf("%w: input %v", ErrNotFound, err)
		}
		if !st.IsDir() {
			add(in, st.Size())
			continue
		}
		err = filepath.WalkDir(in, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p != in && strings.HasPrefix(d.Name(), ".") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.Type().IsRegular() {
				info, err := d.Info()
				if err != nil {
					return err
				}
				add(p, info.Size())
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%w: input %v", ErrNotFound, err)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: the inputs (%s) hold no files: the corpus is empty", ErrFormat, strings.Join(inputs, ", "))
	}
	return out, nil
}

// checkOut creates dir if needed and refuses one that holds a corpus
// already: old shards beside new ones would be read as one corpus.
func checkOut(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: output directory: %v", ErrOutput, err)
	}
	bins, _ := filepath.Glob(filepath.Join(dir, "*.bin"))
	if _, err := os.Stat(filepath.Join(dir, MetaFile)); err == nil || len(bins) > 0 {
		return fmt.Errorf("%w: output directory %s holds shards or %s already; remove them or choose another", ErrOptions, dir, MetaFile)
	}
	return nil
}

// shardPrefix names a corpus's shards after its directory, as llm.c's
// (tinyshakespeare_val.bin, edu_fineweb_train_000001.bin).
func shardPrefix(out string) string {
	b := filepath.Base(filepath.Clean(out))
	clean := strings.Map(func(r rune) rune {
		if r == '-' || r == '.' || r < utf8.RuneSelf && (r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return r
		}
		return '_'
	}, b)
	if clean == "" || clean == "." || clean == "_" {
		return "corpus"
	}
	return clean
}

// eachDocument calls fn with every document of srcs in order (the slice is
// valid only during the call) and the input bytes read so far.
func eachDocument(srcs []source, fn func(doc []byte, read int64) error) error {
	var read int64
	for _, s := range srcs {
		if !s.jsonl {
			b, err := os.ReadFile(s.path)
			if err != nil {
				return fmt.Errorf("%w: input %v", ErrNotFound, err)
			}
			read += s.size
			if err := fn(b, read); err != nil {
				return err
			}
			continue
		}
		f, err := os.Open(s.path)
		if err != nil {
			return fmt.Errorf("%w: input %v", ErrNotFound, err)
		}
		r := bufio.NewReaderSize(f, 1<<20)
		for line := 1; ; line++ {
			b, err := r.ReadBytes('\n')
			read += int64(len(b))
			if len(bytes.TrimSpace(b)) > 0 {
				text, perr := parseJSONLine(b)
				if perr != nil {
					f.Close()
					return fmt.Errorf("%w: %s line %d: %v", ErrFormat, s.path, line, perr)
				}
				if ferr := fn(text, read); ferr != nil {
					f.Close()
					return ferr
				}
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				f.Close()
				return fmt.Errorf("%w: %s: %v", ErrFormat, s.path, err)
			}
		}
		f.Close()
	}
	return nil
}

// parseJSONLine returns the "text" field of one JSONL line (Hugging Face
// datasets' export): a JSON object whose "text" is a string.
func parseJSONLine(b []byte) ([]byte, error) {
	var row struct {
		Text *string `json:"text"`
	}
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&row); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	if d.More() {
		return nil, errors.New("more than one JSON value on the line")
	}
	if row.Text == nil {
		return nil, errors.New(`no "text" string field`)
	}
	return []byte(*row.Text), nil
}

// charsOf reads every document once for the char tokenizer's character
// list: the corpus's distinct characters, sorted.
func charsOf(srcs []source) (Tokenizer, error) {
	seen := map[rune]bool{}
	err := eachDocument(srcs, func(doc []byte, _ int64) error {
		if i := invalidUTF8(doc); i >= 0 {
			return fmt.Errorf("%w: a document is not valid UTF-8 (at byte %d); the char tokenizer takes UTF-8 only: use byte or gpt2", ErrFormat, i)
		}
		for _, r := range string(doc) {
			seen[r] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("%w: the inputs hold no text: the corpus is empty", ErrFormat)
	}
	chars := slices.Sorted(func(yield func(rune) bool) {
		for r := range seen {
			if !yield(r) {
				return
			}
		}
	})
	return CharTokenizer(string(chars))
}

// batchBytes is how much text is tokenized at once: enough work for every
// core, little enough memory.
const batchBytes = 8 << 20

// tokenizeAll writes the tokens of every document of srcs to w as uint16,
// each document after an EOT, and returns the token and text byte counts.
func tokenizeAll(c PrepareConfig, tok Tokenizer, srcs []source, w io.Writer, meta *Meta) (int64, int64, error) {
	var total int64
	for _, s := range srcs {
		total += s.size
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var tokens, text int64
	var pending [][]byte
	var pendingBytes int
	var buf []uint16
	flush := func() error {
		ids, err := encodeDocs(tok, pending, c.Workers)
		if err != nil {
			return err
		}
		buf = buf[:0]
		for _, id := range ids {
			buf = append(buf, uint16(id))
		}
		if _, err := bw.Write(uint16Bytes(buf)); err != nil {
			return fmt.Errorf("%w: %v", ErrOutput, err)
		}
		tokens += int64(len(ids))
		pending, pendingBytes = pending[:0], 0
		return nil
	}
	err := eachDocument(srcs, func(doc []byte, read int64) error {
		meta.Documents++
		text += int64(len(doc))
		pending = append(pending, bytes.Clone(doc))
		pendingBytes += len(doc)
		if pendingBytes >= batchBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		if c.Progress != nil {
			c.Progress(read, total)
		}
		return nil
	})
	if err == nil && len(pending) > 0 {
		err = flush()
	}
	if err == nil {
		if err = bw.Flush(); err != nil {
			err = fmt.Errorf("%w: %v", ErrOutput, err)
		}
	}
	return tokens, text, err
}

// chunkBytes is the size of the pieces a document is cut into to be
// tokenized in parallel.
const chunkBytes = 64 << 10

// encodeDocs returns the ids of docs, each after an EOT, tokenizing their
// chunks (cutText) in up to workers goroutines.
func encodeDocs(tok Tokenizer, docs [][]byte, workers int) ([]int32, error) {
	type task struct {
		text []byte
		eot  bool // the first chunk of a document
		ids  []int32
		err  error
	}
	var tasks []task
	for _, d := range docs {
		for i, ch := range cutText(d, chunkBytes) {
			tasks = append(tasks, task{text: ch, eot: i == 0})
		}
		if len(d) == 0 {
			tasks = append(tasks, task{eot: true})
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, len(tasks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(tasks); i = int(next.Add(1) - 1) {
				t := &tasks[i]
				if t.eot {
					t.ids = append(t.ids, tok.EOT())
				}
				t.ids, t.err = tok.Encode(t.ids, t.text)
			}
		}()
	}
	wg.Wait()
	n := 0
	for _, t := range tasks {
		if t.err != nil {
			return nil, t.err
		}
		n += len(t.ids)
	}
	out := make([]int32, 0, n)
	for _, t := range tasks {
		out = append(out, t.ids...)
	}
	return out, nil
}

// encodeParallel tokenizes one text (no EOT) in GOMAXPROCS goroutines.
func encodeParallel(tok Tokenizer, text []byte) ([]int32, error) {
	ids, err := encodeDocs(tok, [][]byte{text}, runtime.GOMAXPROCS(0))
	if err != nil {
		return nil, err
	}
	return ids[1:], nil
}

// cutText cuts text into pieces of about size bytes whose tokens,
// concatenated, are the tokens of the whole: it cuts only right after a
// newline that stands between two printable ASCII characters other than
// space. GPT-2's pre-tokenizer makes such a newline a piece of its own
// whatever surrounds it (its only look-ahead is at whitespace runs, and
// this one is a run of one between non-spaces), and char and byte ids do
// not look around at all. A text without such a newline stays whole.
func cutText(text []byte, size int) [][]byte {
	var out [][]byte
	for len(text) > size {
		cut := -1
		for i := size; i < len(text)-1; i++ {
			if text[i] == '\n' && graphic(text[i-1]) && graphic(text[i+1]) {
				cut = i + 1
				break
			}
		}
		if cut < 0 {
			break
		}
		out = append(out, text[:cut])
		text = text[cut:]
	}
	if len(text) > 0 {
		out = append(out, text)
	}
	return out
}

func graphic(b byte) bool { return b > ' ' && b < 0x7f }

// writeSplit copies n tokens from offset off (in tokens) of the token file
// into shards named prefix_NNNNNN.bin, as few as hold ShardTokens each,
// their sizes differing by at most one; it returns their names.
func writeSplit(tmp *os.File, off, n int64, c PrepareConfig, prefix string) ([]string, error) {
	names := []string{}
	if n == 0 {
		return names, nil
	}
	k := (n + int64(c.ShardTokens) - 1) / int64(c.ShardTokens)
	buf := make([]byte, 1<<21)
	for i := range k {
		size := n / k
		if i < n%k {
			size++
		}
		name := fmt.Sprintf("%s_%06d.bin", prefix, i)
		if err := copyShard(tmp, off, size, filepath.Join(c.Out, name), buf); err != nil {
			return nil, err
		}
		names = append(names, name)
		off += size
	}
	return names, nil
}

func copyShard(tmp *os.File, off, size int64, path string, buf []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrOutput, err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	_, err = w.Write(shardHeader(int(size)))
	if err == nil {
		_, err = io.CopyBuffer(w, io.NewSectionReader(tmp, 2*off, 2*size), buf)
	}
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: shard %s: %v", ErrOutput, path, err)
	}
	return nil
}

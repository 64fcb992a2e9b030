package data

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeShardFile writes tokens as an llm.c shard at path.
func writeShardFile(t testing.TB, path string, tokens []uint16) {
	t.Helper()
	var b bytes.Buffer
	if err := WriteShard(&b, tokens); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func seq(n, mod int) []uint16 {
	out := make([]uint16, n)
	for i := range out {
		out[i] = uint16(i*7%mod + 1)
	}
	return out
}

// windows returns the windows a dataset's Fill gives for every sample.
func windows(t *testing.T, ds Dataset) (x, y [][]int32) {
	t.Helper()
	var b Batch
	c := ds.Context()
	for i := range ds.Len() {
		ds.Fill([]int{i}, &b)
		x = append(x, slices.Clone(b.Tokens[:c]))
		y = append(y, slices.Clone(b.Y[:c]))
	}
	return x, y
}

// wantWindows is the windows of token streams, shard by shard.
func wantWindows(c int, streams ...[]uint16) (x, y [][]int32) {
	for _, s := range streams {
		for j := 0; (j+1)*c+1 <= len(s); j++ {
			var xs, ys []int32
			for k := range c {
				xs = append(xs, int32(s[j*c+k]))
				ys = append(ys, int32(s[j*c+k+1]))
			}
			x, y = append(x, xs), append(y, ys)
		}
	}
	return x, y
}

// Shards written by numpy the way llm.c's write_datafile does train
// and val splits: the windows of every shard in name order, none across
// shards; the vocabulary from meta.json, --vocab-size or the largest id.
func TestShardsFromNumpy(t *testing.T) {
	py := numpyPython()
	if py == "" {
		t.Skip("no python3 with numpy")
	}
	dir := t.TempDir()
	script := `
import numpy as np, sys
d = sys.argv[1]
def write(name, toks):
    h = np.zeros(256, dtype=np.int32)
    h[0], h[1], h[2] = 20240520, 1, len(toks)
    with open(d + "/" + name, "wb") as f:
        f.write(h.tobytes())
        f.write(np.asarray(toks, dtype=np.uint16).tobytes())
write("c_train_000000.bin", [(i * 7) % 50 + 1 for i in range(100)])
write("c_train_000001.bin", [(i * 7) % 50 + 1 for i in range(37)])
write("c_val_000000.bin", [(i * 7) % 60 + 1 for i in range(40)])
`
	if out, err := exec.Command(py, "-c", script, dir).CombinedOutput(); err != nil {
		if strings.Contains(string(out), "No module named") {
			t.Skip("python3 has no numpy")
		}
		t.Fatalf("numpy: %v\n%s", err, out)
	}
	o := DefaultOptions()
	o.Context = 8
	train, test, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if train.Name() != filepath.Base(dir)+"/train" || test.Name() != filepath.Base(dir)+"/val" {
		t.Errorf("names %q %q", train.Name(), test.Name())
	}
	gx, gy := windows(t, train)
	wx, wy := wantWindows(8, seq(100, 50), seq(37, 50))
	if !slices.EqualFunc(gx, wx, slices.Equal) || !slices.EqualFunc(gy, wy, slices.Equal) {
		t.Fatalf("train windows differ from the shards' tokens")
	}
	if train.Len() != 12+4 || test.Len() != 4 {
		t.Errorf("%d train and %d val windows, want 16 and 4", train.Len(), test.Len())
	}
	// No meta.json: the largest id + 1 over both splits.
	if train.Classes() != 61 || test.Classes() != 61 {
		t.Errorf("vocabulary %d/%d, want the largest id + 1 = 61", train.Classes(), test.Classes())
	}
	o.VocabSize = 64
	if train, _, err = Open(filepath.Join(dir, "*.bin"), o); err != nil || train.Classes() != 64 || train.Len() != 16 {
		t.Fatalf("a glob with --vocab-size 64: %v", err)
	}
	o.VocabSize = 0
	if train, test, err = Open(filepath.Join(dir, "c_train_000001.bin"), o); err != nil || train.Len() != 4 || test != nil {
		t.Fatalf("one .bin file: %v", err)
	}
	if _, ok := train.(Tokenized); ok {
		t.Error("shards without meta.json have a tokenizer")
	}
}

// nanoGPT's train.bin and val.bin have no header.
func TestShardsNanoGPT(t *testing.T) {
	dir := t.TempDir()
	tr, va := seq(90, 30), seq(30, 30)
	os.WriteFile(filepath.Join(dir, "train.bin"), uint16Bytes(tr), 0o644)
	os.WriteFile(filepath.Join(dir, "val.bin"), uint16Bytes(va), 0o644)
	o := DefaultOptions()
	o.Context, o.VocabSize = 4, 50
	train, test, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	gx, _ := windows(t, train)
	wx, _ := wantWindows(4, tr)
	vx, _ := windows(t, test)
	wvx, _ := wantWindows(4, va)
	if !slices.EqualFunc(gx, wx, slices.Equal) || !slices.EqualFunc(vx, wvx, slices.Equal) || train.Classes() != 50 {
		t.Fatal("headerless windows differ from the files' tokens")
	}
}

// Bad shards and corpora are refused with an error that names the file
// and says what is wrong.
func TestShardErrors(t *testing.T) {
	o := DefaultOptions()
	o.Context = 8
	header := func(magic, version, n int32) []byte {
		h := make([]byte, ShardHeaderBytes)
		binary.LittleEndian.PutUint32(h, uint32(magic))
		binary.LittleEndian.PutUint32(h[4:], uint32(version))
		binary.LittleEndian.PutUint32(h[8:], uint32(n))
		return h
	}
	for _, c := range []struct {
		name  string
		files map[string][]byte
		vocab int
		want  string
		sent  error
	}{
		{"bad magic", map[string][]byte{"x_train_000000.bin": append(header(1234, 1, 20), uint16Bytes(seq(20, 9))...)}, 0, "bad magic 1234", ErrFormat},
		{"truncated", map[string][]byte{"x_train_000000.bin": append(header(ShardMagic, 1, 50), uint16Bytes(seq(20, 9))...)}, 0, "truncated: the header says 50 tokens, the file holds 20", ErrFormat},
		{"short header", map[string][]byte{"x_train_000000.bin": header(ShardMagic, 1, 5)[:100]}, 0, "shorter than llm.c's 1024-byte header", ErrFormat},
		{"trailing", map[string][]byte{"x_train_000000.bin": append(header(ShardMagic, 1, 10), uint16Bytes(seq(20, 9))...)}, 0, "20 bytes after the header's 10 tokens", ErrFormat},
		{"version 2", map[string][]byte{"x_train_000000.bin": append(header(ShardMagic, 2, 20), uint16Bytes(seq(20, 9))...)}, 0, "version 2", ErrFormat},
		{"id over vocabulary", map[string][]byte{"x_train_000000.bin": append(header(ShardMagic, 1, 20), uint16Bytes(seq(20, 9))...)}, 5, "token 1 is 8, outside the vocabulary [0, 5)", ErrFormat},
		{"context longer than shard", map[string][]byte{"x_train_000000.bin": append(header(ShardMagic, 1, 6), uint16Bytes(seq(6, 9))...)}, 0, "holds 6 tokens, fewer than context+1 = 9", ErrFormat},
		{"empty shard", map[string][]byte{"x_train_000000.bin": header(ShardMagic, 1, 0)}, 0, "holds no tokens", ErrFormat},
		{"empty corpus", map[string][]byte{"x_val_000000.bin": append(header(ShardMagic, 1, 20), uint16Bytes(seq(20, 9))...)}, 0, "the corpus is empty", ErrFormat},
		{"odd headerless", map[string][]byte{"train.bin": {1, 2, 3}}, 0, "odd size", ErrFormat},
		{"bad meta", map[string][]byte{"meta.json": []byte(`{"format":"llm.c","vocab_size":70000}`), "x_train_000000.bin": header(ShardMagic, 1, 0)}, 0, "vocab_size 70000", ErrFormat},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var named string
			for n, b := range c.files {
				os.WriteFile(filepath.Join(dir, n), b, 0o644)
				if named != MetaFile {
					named = n
				}
			}
			o.VocabSize = c.vocab
			_, _, err := Open(dir, o)
			if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, c.sent) {
				t.Fatalf("err = %v, want %q (%v)", err, c.want, c.sent)
			}
			if c.name != "empty corpus" && !strings.Contains(err.Error(), named) {
				t.Errorf("the error does not name %s: %v", named, err)
			}
		})
	}
	if _, _, err := Open(filepath.Join(t.TempDir(), "none*.bin"), o); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("a glob matching nothing: %v", err)
	}
}

// The held-out ids and the tokenizer come from meta.json; a --vocab-size
// may pad the vocabulary but not shrink it.
func TestShardsMeta(t *testing.T) {
	dir := t.TempDir()
	writeShardFile(t, filepath.Join(dir, "m_train_000000.bin"), seq(40, 200))
	meta := `{"format":"llm.c","tokenizer":"byte","vocab_size":257,"eot":256,"train_tokens":40,"train_shards":["m_train_000000.bin"],"val_shards":[]}`
	os.WriteFile(filepath.Join(dir, MetaFile), []byte(meta), 0o644)
	o := DefaultOptions()
	o.Context = 4
	train, test, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if test != nil || train.Classes() != 257 {
		t.Fatalf("test %v, vocabulary %d", test, train.Classes())
	}
	tk, ok := train.(Tokenized)
	if !ok || tk.Tokenizer().Name() != "byte" {
		t.Fatal("no byte tokenizer from meta.json")
	}
	// Only the shards meta.json lists belong to the corpus.
	writeShardFile(t, filepath.Join(dir, "stray_train_000000.bin"), seq(40, 300))
	if train, _, err := Open(dir, o); err != nil || train.Len() != 9 {
		t.Errorf("a stray shard beside meta.json's: %v", err)
	}
	o.VocabSize = 300
	if train, _, _ := Open(dir, o); train == nil || train.Classes() != 300 {
		t.Error("--vocab-size 300 does not pad meta.json's 257")
	}
	o.VocabSize = 100
	if _, _, err := Open(dir, o); err == nil || !strings.Contains(err.Error(), "smaller than the 257") {
		t.Errorf("--vocab-size 100 under meta.json's 257: %v", err)
	}
}

func TestParseMeta(t *testing.T) {
	good := `{"format":"llm.c","tokenizer":"gpt2","vocab_size":50257,"eot":50256}`
	if m, err := ParseMeta("m.json", []byte(good)); err != nil || m.VocabSize != 50257 {
		t.Fatalf("%v", err)
	}
	for _, bad := range []string{
		``, `[]`, `{"format":"x"}`, `{"format":"llm.c","vocab_size":0}`, `{"format":"llm.c","vocab_size":10,"eot":10}`,
		`{"format":"llm.c","tokenizer":"gpt2","vocab_size":100,"eot":5}`, `{"format":"llm.c","tokenizer":"char","vocab_size":3,"eot":2,"chars":"aa"}`,
		`{"format":"llm.c","vocab_size":10,"train_shards":["../x.bin"]}`, good + `{}`, `{"format":"llm.c","vocab_size":10,"documents":-1}`,
	} {
		if _, err := ParseMeta("m.json", []byte(bad)); err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "m.json") {
			t.Errorf("ParseMeta(%s) = %v", bad, err)
		}
	}
}

func FuzzShardHeader(f *testing.F) {
	f.Add(shardHeader(3), int64(ShardHeaderBytes+6), false)
	f.Add([]byte{1, 2, 3, 4}, int64(4), true)
	f.Add([]byte{}, int64(0), true)
	f.Fuzz(func(t *testing.T, head []byte, size int64, headerless bool) {
		if len(head) > ShardHeaderBytes {
			head = head[:ShardHeaderBytes]
		}
		lay, err := parseShardHeader("f.bin", head, size, headerless)
		if err != nil {
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "f.bin") {
				t.Fatalf("error %v does not wrap ErrFormat naming the file", err)
			}
			return
		}
		if lay.count < 0 || lay.offset < 0 || lay.offset+2*lay.count != size {
			t.Fatalf("layout %+v for a file of %d bytes", lay, size)
		}
	})
}

func FuzzMeta(f *testing.F) {
	f.Add([]byte(`{"format":"llm.c","tokenizer":"char","chars":"ab","vocab_size":3,"eot":2,"train_shards":["a.bin"]}`))
	f.Add([]byte(`{"format":"llm.c","vocab_size":65536,"eot":0}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMeta("meta.json", b)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		if m.VocabSize < 1 || m.VocabSize > MaxShardVocab || m.EOT < 0 || m.EOT >= m.VocabSize {
			t.Fatalf("accepted %+v", m)
		}
		if tok, err := m.tokenizer(); err != nil || tok != nil && tok.VocabSize() != m.VocabSize {
			t.Fatalf("accepted meta with tokenizer %v, %v", tok, err)
		}
	})
}

func FuzzJSONLine(f *testing.F) {
	f.Add([]byte(`{"text":"hello"}`))
	f.Add([]byte(`{"text":null}`))
	f.Add([]byte(`{"text":"a\u00e9"} {}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		text, err := parseJSONLine(b)
		if err == nil && text == nil {
			t.Fatal("no error and no text")
		}
	})
}

func ExampleWriteShard() {
	var b bytes.Buffer
	_ = WriteShard(&b, []uint16{50256, 15496, 995})
	h := b.Bytes()
	fmt.Println(binary.LittleEndian.Uint32(h), binary.LittleEndian.Uint32(h[4:]), binary.LittleEndian.Uint32(h[8:]), b.Len())
	// Output: 20240520 1 3 1030
}

// numpyPython is a python3 that has numpy: Debian's (/usr/bin/python3,
// with python3-numpy) before the one on PATH, which may be another.
func numpyPython() string {
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil && exec.Command(path, "-c", "import numpy").Run() == nil {
			return path
		}
	}
	return ""
}

// BenchmarkShardFill fills batches of 16 windows of 64 tokens from random
// places of 64 MiB of shards (each window's pages then leave the resident
// set: mapping.release).
func BenchmarkShardFill(b *testing.B) {
	dir := b.TempDir()
	for i := range 2 {
		writeShardFile(b, filepath.Join(dir, fmt.Sprintf("b_train_%06d.bin", i)), seq(1<<24, 50000))
	}
	o := DefaultOptions()
	o.Context = 64
	train, _, err := Open(dir, o)
	if err != nil {
		b.Fatal(err)
	}
	s, _ := NewSampler(train.Len(), 1, true)
	var batch Batch
	var idx []int
	b.SetBytes(16 * 64 * 2)
	for i := 0; b.Loop(); i++ {
		idx = s.At(Cursor(i*16), 16, idx)
		train.Fill(idx, &batch)
	}
	if kb, ok := rssFileKB(); ok {
		b.ReportMetric(float64(kb)/1024, "MiB-file-resident")
	}
}

// rssFileKB is this process's resident file-backed memory (Linux).
func rssFileKB() (int64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb)
			return kb, true
		}
	}
	return 0, false
}

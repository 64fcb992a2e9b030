package data

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// The gospec corpus: vocabulary = sorted distinct runes of the file, the
// split at int(0.9·len), windows as documented, and ids that decode back to
// the file.
func TestGoSpec(t *testing.T) {
	raw, err := goSpec()
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.Context = 32
	train, test, err := Open("gospec", o)
	if err != nil {
		t.Fatal(err)
	}
	runes := []rune(string(raw))
	distinct := slices.Compact(slices.Sorted(slices.Values(runes)))
	v := train.(TextDataset).Vocab()
	if v.Chars() != string(distinct) || train.Classes() != len(distinct) || test.Classes() != len(distinct) {
		t.Fatalf("vocabulary %d chars, want the %d sorted distinct runes", v.Size(), len(distinct))
	}
	split := len(runes) * 9 / 10
	if want := (split - 1) / 32; train.Len() != want {
		t.Errorf("train has %d windows, want %d", train.Len(), want)
	}
	if want := (len(runes) - split - 1) / 32; test.Len() != want {
		t.Errorf("test has %d windows, want %d", test.Len(), want)
	}
	var b Batch
	train.Fill([]int{0, 5, train.Len() - 1}, &b)
	for r, i := range []int{0, 5, train.Len() - 1} {
		if got, want := v.Decode(b.Tokens[r*32:(r+1)*32]), string(runes[i*32:i*32+32]); got != want {
			t.Fatalf("window %d input %q, want %q", i, got, want)
		}
		if got, want := v.Decode(b.Y[r*32:(r+1)*32]), string(runes[i*32+1:i*32+33]); got != want {
			t.Fatalf("window %d targets %q, want %q", i, got, want)
		}
	}
	test.Fill([]int{0}, &b)
	if got, want := v.Decode(b.Tokens[:32]), string(runes[split:split+32]); got != want {
		t.Fatalf("first test window %q, want %q (the text right after the split)", got, want)
	}
	if train.Name() != "gospec/train" || test.Name() != "gospec/test" || train.Kind() != Tokens || train.Context() != 32 {
		t.Errorf("names %q %q kind %v context %d", train.Name(), test.Name(), train.Kind(), train.Context())
	}
}

func writeText(t *testing.T, name, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTextFile(t *testing.T) {
	text := strings.Repeat("héllo wörld, ", 40) // 520 runes, 600 bytes
	p := writeText(t, "corpus.txt", text)
	o := Options{Context: 8}
	for _, spec := range []string{p, "text:" + p} {
		train, test, err := Open(spec, o)
		if err != nil {
			t.Fatal(err)
		}
		v := train.(TextDataset).Vocab()
		if v.Chars() != " ,dhlorwéö" {
			t.Errorf("vocabulary %q", v.Chars())
		}
		if train.Name() != "corpus/train" || train.Len() != (468-1)/8 || test.Len() != (52-1)/8 {
			t.Errorf("%s: %s %d/%d windows", spec, train.Name(), train.Len(), test.Len())
		}
	}
	o.Vocab = VocabByte
	train, test, err := Open(p, o)
	if err != nil {
		t.Fatal(err)
	}
	if train.Classes() != 256 || train.Len() != (540-1)/8 || test.Len() != (60-1)/8 {
		t.Errorf("byte level: vocab %d, %d/%d windows", train.Classes(), train.Len(), test.Len())
	}
	var b Batch
	train.Fill([]int{1}, &b)
	if got := train.(TextDataset).Vocab().Decode(b.Tokens); got != text[8:16] {
		t.Errorf("byte window 1 = %q, want %q", got, text[8:16])
	}
	if _, _, err := Open("gospec:vocab=byte,context=16", DefaultOptions()); err != nil {
		t.Errorf("gospec with parameters: %v", err)
	}
}

func TestTextErrors(t *testing.T) {
	bad := writeText(t, "bad.txt", "ok \xff\xfe more text here, and more text after it")
	if _, _, err := Open(bad, Options{Context: 2}); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "byte 3") ||
		!strings.Contains(err.Error(), "byte vocabulary") {
		t.Errorf("invalid UTF-8: %v", err)
	}
	if _, _, err := Open(bad, Options{Context: 2, Vocab: VocabByte}); err != nil {
		t.Errorf("invalid UTF-8 with byte vocabulary: %v", err)
	}
	small := writeText(t, "small.txt", strings.Repeat("a", 100))
	if _, _, err := Open(small, Options{Context: 10}); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "test split") {
		t.Errorf("test split too small: %v", err)
	}
	if _, _, err := Open(writeText(t, "empty.txt", ""), Options{}); !errors.Is(err, ErrFormat) {
		t.Errorf("empty file: %v", err)
	}
	if _, _, err := Open("text:"+filepath.Join(t.TempDir(), "none.txt"), Options{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing file: %v", err)
	}
}

// The spec ships in the binary: the bytes README.md records (Go 1.26.8's
// doc/go_spec.html), decompressed once, and read without a Go
// installation: no $GOROOT, no go command.
func TestGoSpecEmbedded(t *testing.T) {
	t.Setenv("GOROOT", t.TempDir())
	t.Setenv("PATH", "")
	raw, err := goSpec()
	if err != nil {
		t.Fatal(err)
	}
	if sum := fmt.Sprintf("%x", sha256.Sum256(raw)); sum != goSpecSHA256 {
		t.Fatalf("the embedded spec's SHA-256 is %s, want %s", sum, goSpecSHA256)
	}
	if !bytes.Contains(raw, []byte(`"Subtitle": "Language version go1.26`)) || len(raw) != 293469 {
		t.Errorf("the embedded spec (%d bytes) is not Go 1.26's doc/go_spec.html (293469 bytes)", len(raw))
	}
	again, _ := goSpec()
	if &again[0] != &raw[0] {
		t.Error("the spec was decompressed a second time")
	}
	readme, err := os.ReadFile("gospec/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{goSpecSHA256, "go1.26.8", "Creative Commons Attribution 3.0", "BSD"} {
		if !bytes.Contains(readme, []byte(want)) {
			t.Errorf("gospec/README.md does not say %q", want)
		}
	}
	train, _, err := Open("gospec", DefaultOptions())
	if err != nil || train.Name() != "gospec/train" {
		t.Fatalf("Open(gospec) without Go: %v", err)
	}
}

func TestVocab(t *testing.T) {
	v, err := CharVocabOf([]byte("hello, 世界"))
	if err != nil {
		t.Fatal(err)
	}
	if v.Chars() != " ,ehlo世界" || v.Size() != 8 || v.ByteLevel() || v.String() != "char(8)" {
		t.Fatalf("vocab %q size %d", v.Chars(), v.Size())
	}
	ids, err := v.Encode("hello 世界")
	if err != nil || !slices.Equal(ids, []int32{3, 2, 4, 4, 5, 0, 6, 7}) {
		t.Fatalf("Encode = %v %v", ids, err)
	}
	if s := v.Decode(ids); s != "hello 世界" {
		t.Errorf("Decode = %q", s)
	}
	if _, err := v.Encode("x"); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), `'x'`) {
		t.Errorf("Encode(x) = %v", err)
	}
	if s := v.Decode([]int32{0, 8, -1}); s != " \uFFFD\uFFFD" {
		t.Errorf("Decode out of range = %q", s)
	}
	back, err := NewCharVocab(v.Chars())
	if err != nil || back.Chars() != v.Chars() {
		t.Errorf("NewCharVocab(Chars()) = %v %v", back, err)
	}
	for _, bad := range []string{"", "aba", "\xff"} {
		if _, err := NewCharVocab(bad); !errors.Is(err, ErrFormat) {
			t.Errorf("NewCharVocab(%q) error = %v", bad, err)
		}
	}
	b := ByteVocab()
	ids, _ = b.Encode("\xffa")
	if b.Size() != 256 || !slices.Equal(ids, []int32{255, 97}) || b.Decode(ids) != "\xffa" || b.Chars() != "" {
		t.Errorf("byte vocab: %v %q", ids, b.Decode(ids))
	}
}

// FuzzText: any file content either is rejected with ErrFormat or yields
// windows whose ids decode back to the corpus.
func FuzzText(f *testing.F) {
	f.Add([]byte("hello world, hello gophers"), false)
	f.Add([]byte("h\xffllo wörld \x00 ..."), true)
	f.Add([]byte("日本語のテキストです。日本語のテキストです。"), false)
	f.Fuzz(func(t *testing.T, raw []byte, byteLevel bool) {
		o := Options{Context: 2, Vocab: VocabChar}
		if byteLevel {
			o.Vocab = VocabByte
		}
		train, test, err := textFromBytes("fuzz", raw, o)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		v := train.(TextDataset).Vocab()
		var b Batch
		var got strings.Builder
		for i := range train.Len() {
			train.Fill([]int{i}, &b)
			got.WriteString(v.Decode(b.Tokens))
		}
		want := string(raw)
		if !byteLevel {
			n := train.Len() * 2
			want = string([]rune(want)[:n])
		} else {
			want = want[:train.Len()*2]
		}
		if got.String() != want || !utf8.ValidString(got.String()) && !byteLevel {
			t.Fatalf("windows decode to %q, want %q", got.String(), want)
		}
		if test.Len() < 1 {
			t.Fatal("empty test set accepted")
		}
	})
}

package data

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer/codec"
)

// Tokenizer turns text into token ids and back. Implementations are safe
// for concurrent use.
type Tokenizer interface {
	// Name is the tokenizer's name as meta.json and --tokenizer give it:
	// "gpt2", "char" or "byte".
	Name() string
	// VocabSize is the number of ids, EOT included: every id Encode
	// returns, and EOT, are in [0, VocabSize).
	VocabSize() int
	// EOT is the id of <|endoftext|>, the token that begins every document
	// of a prepared corpus. Encode never returns it: text that spells
	// "<|endoftext|>" is encoded as ordinary text, as tiktoken's
	// encode_ordinary does.
	EOT() int32
	// Encode returns the ids of text, appended to dst. Decode(Encode(t))
	// is t for every t the tokenizer accepts: any bytes for gpt2 and byte,
	// valid UTF-8 of the vocabulary's characters for char (anything else
	// is an error naming the first character that is not).
	Encode(dst []int32, text []byte) ([]int32, error)
	// Decode returns the text of ids; EOT decodes to "<|endoftext|>" and
	// an id outside [0, VocabSize) to U+FFFD.
	Decode(ids []int32) string
}

// Tokenizer names accepted by TokenizerFor and troupe data prepare.
const (
	TokenizerGPT2 = "gpt2"
	TokenizerChar = VocabChar
	TokenizerByte = VocabByte
)

// EOTText is how <|endoftext|> is written when decoded.
const EOTText = "<|endoftext|>"

// Tokenizers lists the tokenizer names, for help texts and errors.
var Tokenizers = []string{TokenizerGPT2, TokenizerChar, TokenizerByte}

// TokenizerFor returns the tokenizer of that name: gpt2 or byte. A char
// tokenizer depends on its corpus: CharTokenizer builds it from the
// character list (a prepared corpus's meta.json records it; Tokenized
// datasets return theirs).
func TokenizerFor(name string) (Tokenizer, error) {
	switch name {
	case TokenizerGPT2:
		return GPT2()
	case TokenizerByte:
		return byteTokenizer{}, nil
	case TokenizerChar:
		return nil, fmt.Errorf("%w: the char tokenizer needs its corpus's character list (CharTokenizer)", ErrOptions)
	}
	return nil, fmt.Errorf("%w: tokenizer %q, want one of %s", ErrOptions, name, strings.Join(Tokenizers, ", "))
}

// Tokenized is implemented by datasets whose ids decode to text: text
// corpora and prepared shards whose meta.json names a tokenizer. A text
// file read as char or byte has no EOT in its ids: its Classes is then
// VocabSize − 1.
type Tokenized interface {
	Dataset
	Tokenizer() Tokenizer
}

// byteTokenizer: ids 0–255 are bytes, 256 is EOT.
type byteTokenizer struct{}

var _ Tokenizer = byteTokenizer{}

func (byteTokenizer) Name() string   { return TokenizerByte }
func (byteTokenizer) VocabSize() int { return 257 }
func (byteTokenizer) EOT() int32     { return 256 }

func (byteTokenizer) Encode(dst []int32, text []byte) ([]int32, error) {
	dst = slices.Grow(dst, len(text))
	for _, c := range text {
		dst = append(dst, int32(c))
	}
	return dst, nil
}

func (byteTokenizer) Decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		switch {
		case id >= 0 && id < 256:
			b.WriteByte(byte(id))
		case id == 256:
			b.WriteString(EOTText)
		default:
			b.WriteRune(utf8.RuneError)
		}
	}
	return b.String()
}

// charTokenizer: a char-level Vocab and EOT after its characters.
type charTokenizer struct{ v *Vocab }

var _ Tokenizer = charTokenizer{}

// CharTokenizer returns the char-level tokenizer whose id i is the i-th
// character of chars and whose EOT is len([]rune(chars)).
func CharTokenizer(chars string) (Tokenizer, error) {
	v, err := NewCharVocab(chars)
	if err != nil {
		return nil, err
	}
	return charTokenizer{v}, nil
}

func (t charTokenizer) Name() string   { return TokenizerChar }
func (t charTokenizer) VocabSize() int { return t.v.Size() + 1 }
func (t charTokenizer) EOT() int32     { return int32(t.v.Size()) }

// Chars is the character list (meta.json's "chars").
func (t charTokenizer) Chars() string { return t.v.Chars() }

func (t charTokenizer) Encode(dst []int32, text []byte) ([]int32, error) {
	if i := invalidUTF8(text); i >= 0 {
		return dst, fmt.Errorf("%w: text is not valid UTF-8 (at byte %d); use the byte or gpt2 tokenizer", ErrFormat, i)
	}
	for _, r := range string(text) {
		id, ok := t.v.index[r]
		if !ok {
			return dst, fmt.Errorf("%w: character %q is not in the vocabulary", ErrFormat, r)
		}
		dst = append(dst, id)
	}
	return dst, nil
}

func (t charTokenizer) Decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		if id == t.EOT() {
			b.WriteString(EOTText)
			continue
		}
		b.WriteString(t.v.Decode([]int32{id}))
	}
	return b.String()
}

// gpt2Tokenizer is GPT-2's byte-level BPE (tiktoken's r50k_base: 50,257
// ids, <|endoftext|> = 50256). The merges and the pre-tokenizing regular
// expression are tiktoken-go's (github.com/tiktoken-go/tokenizer), whose
// vocabulary is compiled into the binary, so it works offline.
type gpt2Tokenizer struct {
	c *codec.Codec
	// pieces[id] is the bytes of id; byteID[b] the id of the single byte b.
	pieces [][]byte
	byteID [256]int32
}

// gpt2Vocab is GPT-2's vocabulary size and gpt2EOT its <|endoftext|>.
const (
	gpt2Vocab = 50257
	gpt2EOT   = 50256
)

// GPT2 returns GPT-2's tokenizer. It is built once (about 0.1 s: the
// vocabulary's tables) and shared.
var GPT2 = sync.OnceValues(func() (Tokenizer, error) {
	c := codec.NewR50kBase()
	t := &gpt2Tokenizer{c: c, pieces: make([][]byte, gpt2Vocab)}
	for i := range t.byteID {
		t.byteID[i] = -1
	}
	for id := range gpt2EOT {
		s, err := c.Decode([]uint{uint(id)})
		if err != nil {
			return nil, fmt.Errorf("data: gpt2 vocabulary: id %d: %v", id, err)
		}
		t.pieces[id] = []byte(s)
		if len(s) == 1 {
			t.byteID[s[0]] = int32(id)
		}
	}
	for b, id := range t.byteID {
		if id < 0 {
			return nil, fmt.Errorf("data: gpt2 vocabulary has no token for byte %#x", b)
		}
	}
	t.pieces[gpt2EOT] = []byte(EOTText)
	return t, nil
})

func (t *gpt2Tokenizer) Name() string   { return TokenizerGPT2 }
func (t *gpt2Tokenizer) VocabSize() int { return gpt2Vocab }
func (t *gpt2Tokenizer) EOT() int32     { return gpt2EOT }

// Encode encodes the valid UTF-8 runs of text as tiktoken does and every
// byte that is not part of valid UTF-8 (and DEL: see validPrefix) as its
// single-byte token (tiktoken
// takes only strings; GPT-2's byte-level vocabulary has a token for every
// byte, so such text still round-trips). On valid UTF-8 the ids are
// tiktoken's.
func (t *gpt2Tokenizer) Encode(dst []int32, text []byte) ([]int32, error) {
	for len(text) > 0 {
		n := validPrefix(text)
		if n > 0 {
			ids, _, err := t.c.Encode(string(text[:n]))
			if err != nil {
				return dst, fmt.Errorf("%w: gpt2: %v", ErrFormat, err)
			}
			for _, id := range ids {
				dst = append(dst, int32(id))
			}
			text = text[n:]
			continue
		}
		dst = append(dst, t.byteID[text[0]])
		text = text[1:]
	}
	return dst, nil
}

// validPrefix returns the length of the longest valid UTF-8 prefix of b
// without DEL (0x7f): tiktoken-go v0.10.0's compiled pre-tokenizer skips
// DEL, losing it, so Encode gives it its single-byte token itself. No
// GPT-2 token holds DEL with another byte (TestGPT2Delete checks), so
// the ids are those tiktoken gives.
func validPrefix(b []byte) int {
	i := 0
	for i < len(b) {
		if b[i] == 0x7f {
			break
		}
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			break
		}
		i += n
	}
	return i
}

func (t *gpt2Tokenizer) Decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.pieces) {
			b.WriteRune(utf8.RuneError)
			continue
		}
		b.Write(t.pieces[id])
	}
	return b.String()
}

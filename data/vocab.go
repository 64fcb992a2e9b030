package data

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Vocab maps text to token ids and back. A byte-level Vocab has 256 ids,
// one per byte. A char-level Vocab has one id per character (rune) of its
// character list; built from a corpus, that list is the corpus's distinct
// characters in increasing code point order (nanoGPT's shakespeare_char
// vocabulary), so it is the same on every machine. Chars returns the list
// and NewCharVocab rebuilds the Vocab from it, for checkpoints and sampling.
type Vocab struct {
	chars []rune // nil for byte-level
	index map[rune]int32
}

// ByteVocab returns the byte-level vocabulary.
func ByteVocab() *Vocab { return &Vocab{} }

// NewCharVocab returns the char-level vocabulary whose id i is the i-th
// character of chars. chars must be valid UTF-8 without repeats.
func NewCharVocab(chars string) (*Vocab, error) {
	if !utf8.ValidString(chars) {
		return nil, fmt.Errorf("%w: vocabulary is not valid UTF-8", ErrFormat)
	}
	v := &Vocab{chars: []rune(chars), index: map[rune]int32{}}
	if len(v.chars) == 0 {
		return nil, fmt.Errorf("%w: empty vocabulary", ErrFormat)
	}
	for i, r := range v.chars {
		if _, dup := v.index[r]; dup {
			return nil, fmt.Errorf("%w: vocabulary repeats %q", ErrFormat, r)
		}
		v.index[r] = int32(i)
	}
	return v, nil
}

// CharVocabOf returns the char-level vocabulary of text: its distinct
// characters, sorted. text must be valid UTF-8 (a byte-level vocabulary
// takes anything).
func CharVocabOf(text []byte) (*Vocab, error) {
	if i := invalidUTF8(text); i >= 0 {
		return nil, fmt.Errorf("%w: text is not valid UTF-8 (at byte %d); use the byte vocabulary", ErrFormat, i)
	}
	seen := map[rune]bool{}
	for _, r := range string(text) {
		seen[r] = true
	}
	chars := make([]rune, 0, len(seen))
	for r := range seen {
		chars = append(chars, r)
	}
	slices.Sort(chars)
	return NewCharVocab(string(chars))
}

// invalidUTF8 returns the offset of the first invalid byte, or -1.
func invalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// Size returns the number of ids.
func (v *Vocab) Size() int {
	if v.chars == nil {
		return 256
	}
	return len(v.chars)
}

// ByteLevel reports whether ids are bytes.
func (v *Vocab) ByteLevel() bool { return v.chars == nil }

// Chars returns the character list of a char-level vocabulary ("" for
// byte-level).
func (v *Vocab) Chars() string { return string(v.chars) }

func (v *Vocab) String() string {
	if v.ByteLevel() {
		return "byte(256)"
	}
	return fmt.Sprintf("char(%d)", len(v.chars))
}

// Encode returns the ids of s. With a char-level vocabulary a character
// outside it is an error naming it.
func (v *Vocab) Encode(s string) ([]int32, error) {
	if v.ByteLevel() {
		ids := make([]int32, len(s))
		for i := 0; i < len(s); i++ {
			ids[i] = int32(s[i])
		}
		return ids, nil
	}
	if i := invalidUTF8([]byte(s)); i >= 0 {
		return nil, fmt.Errorf("%w: text is not valid UTF-8 (at byte %d)", ErrFormat, i)
	}
	ids := make([]int32, 0, len(s))
	for _, r := range s {
		id, ok := v.index[r]
		if !ok {
			return nil, fmt.Errorf("%w: character %q is not in the vocabulary", ErrFormat, r)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// Decode returns the text of ids; an id outside the vocabulary decodes to
// U+FFFD, so sampling output is always printable.
func (v *Vocab) Decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		switch {
		case id < 0 || int(id) >= v.Size():
			b.WriteRune(utf8.RuneError)
		case v.ByteLevel():
			b.WriteByte(byte(id))
		default:
			b.WriteRune(v.chars[id])
		}
	}
	return b.String()
}

package data

import "fmt"

// tokenSet serves a token stream as non-overlapping windows: sample i is
// tokens[i·C : i·C+C+1], its first C tokens the input and its last C the
// targets, so consecutive samples share one boundary token (stride C).
type tokenSet struct {
	name  string
	toks  []int32
	ctx   int
	vocab int
	v     *Vocab    // nil when ids have no text (synthetic, tensors without one)
	tok   Tokenizer // the ids' tokenizer when v is nil (gpt2 text); else nil
}

var _ Dataset = (*tokenSet)(nil)

// newTokenSet checks that the stream holds at least one window.
func newTokenSet(name string, toks []int32, ctx, vocab int, v *Vocab) (*tokenSet, error) {
	if len(toks) < ctx+1 {
		return nil, fmt.Errorf("%w: %s has %d tokens, fewer than context+1 = %d for one sample",
			ErrFormat, name, len(toks), ctx+1)
	}
	return &tokenSet{name: name, toks: toks, ctx: ctx, vocab: vocab, v: v}, nil
}

func (s *tokenSet) Name() string  { return s.name }
func (s *tokenSet) Len() int      { return (len(s.toks) - 1) / s.ctx }
func (s *tokenSet) Kind() Kind    { return Tokens }
func (s *tokenSet) Features() int { return 0 }
func (s *tokenSet) Classes() int  { return s.vocab }
func (s *tokenSet) Context() int  { return s.ctx }

func (s *tokenSet) Fill(idx []int, b *Batch) {
	c := s.ctx
	b.reset(len(idx), 0, c, c)
	n := s.Len()
	for r, i := range idx {
		if i < 0 || i >= n {
			panic(fmt.Sprintf("data: %s: sample index %d outside [0, %d)", s.name, i, n))
		}
		copy(b.Tokens[r*c:(r+1)*c], s.toks[i*c:])
		copy(b.Y[r*c:(r+1)*c], s.toks[i*c+1:])
	}
}

// textSet is a tokenSet whose ids decode to text.
type textSet struct{ *tokenSet }

var _ TextDataset = textSet{}

func (s textSet) Vocab() *Vocab { return s.v }

// Tokenizer is the char or byte tokenizer of the Vocab: the same ids, and
// one more for EOT, which the text's ids never use.
func (s textSet) Tokenizer() Tokenizer {
	if s.v.ByteLevel() {
		return byteTokenizer{}
	}
	return charTokenizer{s.v}
}

// tokenizedSet is a tokenSet whose ids are a Tokenizer's (gpt2 text).
type tokenizedSet struct{ *tokenSet }

var _ Tokenized = tokenizedSet{}

func (s tokenizedSet) Tokenizer() Tokenizer { return s.tok }

// tokenPair wraps train and test streams, exposing Vocab when there is one.
func tokenPair(train, test *tokenSet) (Dataset, Dataset) {
	wrap := func(s *tokenSet) Dataset {
		if s == nil {
			return nil
		}
		if s.v != nil {
			return textSet{s}
		}
		return s
	}
	return wrap(train), wrap(test)
}

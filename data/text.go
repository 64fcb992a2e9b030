package data

import (
	"fmt"
	"os"
)

// TestFraction is the share of a text corpus, taken from its end, that is
// held out as the test set (nanoGPT's split: train = first 90%).
const TestFraction = 0.1

// openText tokenizes the file at path and splits it into train (first 90%
// of the tokens) and test (last 10%), each served as context windows.
func openText(name, path string, o Options) (Dataset, Dataset, error) {
	if path == "" {
		return nil, nil, fmt.Errorf("%w: text: no path given", ErrSpec)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: text corpus: %v", ErrNotFound, err)
	}
	return textFromBytes(name, raw, o)
}

func textFromBytes(name string, raw []byte, o Options) (Dataset, Dataset, error) {
	var v *Vocab
	var toks []int32
	if o.Vocab == VocabGPT2 {
		return gpt2Text(name, raw, o)
	}
	if o.Vocab == VocabByte {
		v = ByteVocab()
		toks = make([]int32, len(raw))
		for i, c := range raw {
			toks[i] = int32(c)
		}
	} else {
		var err error
		if v, err = CharVocabOf(raw); err != nil {
			if len(raw) == 0 {
				return nil, nil, fmt.Errorf("%w: text corpus %s is empty", ErrFormat, name)
			}
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		toks, _ = v.Encode(string(raw)) // every character is in its own vocabulary
	}
	// Integer arithmetic, so the split is exactly nanoGPT's int(n*0.9).
	split := len(toks) * 9 / 10
	train, err := newTokenSet(name+"/train", toks[:split], o.Context, v.Size(), v)
	if err != nil {
		return nil, nil, err
	}
	test, err := newTokenSet(name+"/test", toks[split:], o.Context, v.Size(), v)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (the test split is the last 10%% of the corpus; use a larger file or a smaller context)", err)
	}
	tr, te := tokenPair(train, test)
	return tr, te, nil
}

// gpt2Text is textFromBytes with GPT-2's tokenizer: the file is one
// document (no EOT), split 90/10 by tokens as the others are.
func gpt2Text(name string, raw []byte, o Options) (Dataset, Dataset, error) {
	tok, err := GPT2()
	if err != nil {
		return nil, nil, err
	}
	if len(raw) == 0 {
		return nil, nil, fmt.Errorf("%w: text corpus %s is empty", ErrFormat, name)
	}
	toks, err := encodeParallel(tok, raw)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	split := len(toks) * 9 / 10
	train, err := newTokenSet(name+"/train", toks[:split], o.Context, tok.VocabSize(), nil)
	if err != nil {
		return nil, nil, err
	}
	test, err := newTokenSet(name+"/test", toks[split:], o.Context, tok.VocabSize(), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (the test split is the last 10%% of the corpus; use a larger file or a smaller context)", err)
	}
	train.tok, test.tok = tok, tok
	return tokenizedSet{train}, tokenizedSet{test}, nil
}

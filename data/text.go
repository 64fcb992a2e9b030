package data

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
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

// goSpecPath finds doc/go_spec.html of the Go installation: under $GOROOT
// if set, else under `go env GOROOT`.
func goSpecPath() (string, error) {
	var roots []string
	if r := os.Getenv("GOROOT"); r != "" {
		roots = append(roots, r)
	}
	if r, err := goEnv("GOROOT"); err == nil && r != "" {
		roots = append(roots, r)
	}
	for _, r := range roots {
		p := filepath.Join(r, "doc", "go_spec.html")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if len(roots) == 0 {
		return "", fmt.Errorf("%w: gospec needs a Go installation ($GOROOT unset and `go env GOROOT` failed); pass --data FILE.txt instead", ErrNotFound)
	}
	return "", fmt.Errorf("%w: doc/go_spec.html is not under GOROOT (%s); pass --data FILE.txt instead",
		ErrNotFound, strings.Join(roots, ", "))
}

// goEnv runs `go env NAME`; it fails when no go command is on PATH.
func goEnv(name string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "env", name).Output()
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

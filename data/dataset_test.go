package data

import (
	"errors"
	"strings"
	"testing"
)

func TestOpenSpecErrors(t *testing.T) {
	cases := []struct {
		spec    string
		want    error
		mention string
	}{
		{"", ErrSpec, "empty"},
		{"imagenet", ErrSpec, "not one of gospec, mnist"},
		{"synthetic-mlp:features", ErrSpec, "key=value"},
		{"synthetic-mlp:colour=red", ErrSpec, "classes, features, n, test"},
		{"synthetic-mlp:n=0", ErrSpec, "positive integer"},
		{"synthetic-mlp:n=-3", ErrSpec, "positive integer"},
		{"synthetic-tokens:vocab=char", ErrSpec, "positive integer"},
		{"gospec:vocab=word", ErrSpec, "char, byte, gpt2"},
		{"gospec:n=3", ErrSpec, "context, vocab"},
		{"text:", ErrSpec, "no path"},
		{"safetensors:", ErrSpec, "no path"},
		{"mnist:", ErrSpec, "empty directory"},
		{"synthetic-mlp:n=1000000,features=1000", ErrOptions, "limit"},
	}
	for _, c := range cases {
		_, _, err := Open(c.spec, DefaultOptions())
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("Open(%q) error = %v, want %v mentioning %q", c.spec, err, c.want, c.mention)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	var o Options
	if err := o.Validate(); err != nil || o.Vocab != VocabChar || o.Context != 64 {
		t.Errorf("zero Options: %+v %v", o, err)
	}
	for _, bad := range []Options{{Vocab: "word"}, {Context: -1}, {Samples: -5}, {Classes: -1}} {
		if err := bad.Validate(); !errors.Is(err, ErrOptions) {
			t.Errorf("Validate(%+v) = %v, want ErrOptions", bad, err)
		}
	}
}

// Fill reuses a Batch's slices when they are large enough, so a training
// loop allocates nothing per step; it switches shapes between kinds.
func TestBatchReuse(t *testing.T) {
	dense, _, _ := Open("synthetic-mlp:features=8,classes=3,n=20", DefaultOptions())
	toks, _, _ := Open("synthetic-tokens:context=4,n=20", DefaultOptions())
	var b Batch
	dense.Fill([]int{0, 1, 2, 3}, &b)
	x0, y0 := &b.X[0], &b.Y[0]
	dense.Fill([]int{5, 6}, &b)
	if &b.X[0] != x0 || &b.Y[0] != y0 || b.Rows != 2 || len(b.X) != 16 || len(b.Y) != 2 || len(b.Tokens) != 0 {
		t.Errorf("second Fill reallocated or mis-sized: rows %d, %d/%d/%d", b.Rows, len(b.X), len(b.Tokens), len(b.Y))
	}
	idx := []int{1, 2, 3}
	if n := testing.AllocsPerRun(20, func() { dense.Fill(idx, &b) }); n != 0 {
		t.Errorf("Fill into a large enough Batch allocates %v times", n)
	}
	toks.Fill([]int{0, 1}, &b)
	if b.Rows != 2 || len(b.X) != 0 || len(b.Tokens) != 8 || len(b.Y) != 8 {
		t.Errorf("tokens after dense: rows %d, %d/%d/%d", b.Rows, len(b.X), len(b.Tokens), len(b.Y))
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "outside [0, 20)") {
			t.Errorf("Fill with index 20 of 20: recovered %v", r)
		}
	}()
	dense.Fill([]int{20}, &b)
}

func TestKindString(t *testing.T) {
	if Dense.String() != "dense" || Tokens.String() != "tokens" || Kind(7).String() != "Kind(7)" {
		t.Error("Kind.String")
	}
}

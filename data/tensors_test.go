package data

import (
	"bytes"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/safetensors"
)

func writeTensors(t *testing.T, ts []safetensors.Tensor, meta map[string]string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "set.safetensors")
	if err := safetensors.WriteFile(p, ts, meta); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTensorsDense(t *testing.T) {
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12} // [3, 2, 2]
	p := writeTensors(t, []safetensors.Tensor{
		safetensors.NewF32("x", []int{3, 2, 2}, x),
		safetensors.NewI64("y", []int{3}, []int64{2, 0, 1}),
		safetensors.NewBF16("x_test", []int{1, 4}, []float32{1, 2, 3, 4}),
		{Name: "y_test", DType: safetensors.U8, Shape: []int{1}, Data: []byte{4}},
	}, nil)
	train, test, err := Open(p, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 3 || train.Features() != 4 || train.Classes() != 5 || test.Len() != 1 || test.Classes() != 5 {
		t.Fatalf("%d × %d, %d classes (max label 4 + 1), test %d", train.Len(), train.Features(), train.Classes(), test.Len())
	}
	var b Batch
	train.Fill([]int{2, 0}, &b)
	if !slices.Equal(b.X, []float32{9, 10, 11, 12, 1, 2, 3, 4}) || !slices.Equal(b.Y, []int32{1, 2}) {
		t.Errorf("Fill = %v %v", b.X, b.Y)
	}
	// metadata classes overrides max+1; no test tensors: test is nil.
	p = writeTensors(t, []safetensors.Tensor{
		safetensors.NewF32("x", []int{2}, []float32{1, 2}),
		safetensors.NewI32("y", []int{2}, []int32{0, 1}),
	}, map[string]string{"classes": "10"})
	train, test, err = Open("safetensors:"+p, DefaultOptions())
	if err != nil || train.Classes() != 10 || train.Features() != 1 || test != nil {
		t.Errorf("classes from metadata: %v classes=%d test=%v", err, train.Classes(), test)
	}
}

func TestTensorsTokens(t *testing.T) {
	v, _ := NewCharVocab("abc")
	ids, _ := v.Encode("abcabcabcabc")
	toks := make([]int64, len(ids))
	for i, id := range ids {
		toks[i] = int64(id)
	}
	p := writeTensors(t, []safetensors.Tensor{
		safetensors.NewI64("tokens", []int{12}, toks),
		safetensors.NewI64("tokens_test", []int{5}, toks[:5]),
	}, map[string]string{"vocab": "abc"})
	train, test, err := Open(p, Options{Context: 3})
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 3 || test.Len() != 1 || train.Classes() != 3 {
		t.Fatalf("%d/%d windows, vocab %d", train.Len(), test.Len(), train.Classes())
	}
	var b Batch
	train.Fill([]int{1}, &b)
	if got := train.(TextDataset).Vocab().Decode(b.Tokens); got != "abc" {
		t.Errorf("window 1 = %q", got)
	}
	// No vocabulary metadata: size is max id + 1 and there is no text.
	p = writeTensors(t, []safetensors.Tensor{safetensors.NewI32("tokens", []int{4}, []int32{0, 7, 1, 2})}, nil)
	train, test, err = Open(p, Options{Context: 2})
	if err != nil || train.Classes() != 8 || test != nil {
		t.Fatalf("vocab from max id: %v", err)
	}
	if _, ok := train.(TextDataset); ok {
		t.Error("tokens without a vocab claim to be text")
	}
}

func TestTensorsErrors(t *testing.T) {
	x2 := safetensors.NewF32("x", []int{2, 1}, []float32{1, 2})
	y2 := safetensors.NewI64("y", []int{2}, []int64{0, 1})
	cases := []struct {
		name    string
		ts      []safetensors.Tensor
		meta    map[string]string
		mention string
	}{
		{"no known tensors", []safetensors.Tensor{safetensors.NewF32("w", []int{1}, []float32{1})}, nil, "neither"},
		{"x without y", []safetensors.Tensor{x2}, nil, "no y"},
		{"extra tensor", []safetensors.Tensor{x2, y2, safetensors.NewF32("X", []int{1}, []float32{1})}, nil, `"X"`},
		{"y length", []safetensors.Tensor{x2, safetensors.NewI64("y", []int{3}, []int64{0, 1, 1})}, nil, "want [2]"},
		{"y float", []safetensors.Tensor{x2, safetensors.NewF32("y", []int{2}, []float32{0, 1})}, nil, "integer"},
		{"x int", []safetensors.Tensor{safetensors.NewI64("x", []int{2}, []int64{1, 2}), y2}, nil, "F32"},
		{"negative label", []safetensors.Tensor{x2, safetensors.NewI64("y", []int{2}, []int64{0, -1})}, nil, "label 1 is -1"},
		{"label over classes", []safetensors.Tensor{x2, y2}, map[string]string{"classes": "1"}, "label 1 is 1"},
		{"bad classes", []safetensors.Tensor{x2, y2}, map[string]string{"classes": "two"}, "classes"},
		{"huge label", []safetensors.Tensor{x2, safetensors.NewI64("y", []int{2}, []int64{0, math.MaxInt32})}, nil, "limit"},
		{"label beyond int32", []safetensors.Tensor{x2, safetensors.NewI64("y", []int{2}, []int64{0, 1 << 40})}, nil, "int32"},
		{"NaN feature", []safetensors.Tensor{safetensors.NewF32("x", []int{2, 1}, []float32{1, float32(math.NaN())}), y2}, nil, "sample 1"},
		{"scalar x", []safetensors.Tensor{safetensors.NewF32("x", nil, []float32{1}), y2}, nil, "[N, features"},
		{"x_test alone", []safetensors.Tensor{x2, y2, safetensors.NewF32("x_test", []int{1}, []float32{1})}, nil, "together"},
		{"feature mismatch", []safetensors.Tensor{x2, y2, safetensors.NewF32("x_test", []int{1, 2}, []float32{1, 2}), safetensors.NewI64("y_test", []int{1}, []int64{0})}, nil, "2 features"},
		{"token out of vocab", []safetensors.Tensor{safetensors.NewI64("tokens", []int{4}, []int64{0, 1, 5, 1})}, map[string]string{"vocab_size": "3"}, "tokens[2] = 5"},
		{"vocab disagrees", []safetensors.Tensor{safetensors.NewI64("tokens", []int{4}, []int64{0, 1, 0, 1})}, map[string]string{"vocab": "ab", "vocab_size": "3"}, "vocab_size 3"},
		{"2-D tokens", []safetensors.Tensor{safetensors.NewI64("tokens", []int{2, 2}, []int64{0, 1, 0, 1})}, nil, "1-D"},
		{"too few tokens", []safetensors.Tensor{safetensors.NewI64("tokens", []int{2}, []int64{0, 1})}, nil, "fewer than"},
	}
	for _, c := range cases {
		_, _, err := Open(writeTensors(t, c.ts, c.meta), Options{Context: 2})
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%s: error %v, want ErrFormat mentioning %q", c.name, err, c.mention)
		}
	}
	if _, _, err := Open("safetensors:"+filepath.Join(t.TempDir(), "no.safetensors"), DefaultOptions()); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing file: %v", err)
	}
}

// FuzzTensorDataset: any file safetensors accepts either fails the dataset
// checks with ErrFormat or gives datasets whose every sample can be filled
// with targets in range.
func FuzzTensorDataset(f *testing.F) {
	add := func(ts []safetensors.Tensor, meta map[string]string) {
		var b bytes.Buffer
		safetensors.Write(&b, ts, meta)
		f.Add(b.Bytes())
	}
	add([]safetensors.Tensor{
		safetensors.NewF32("x", []int{2, 2}, []float32{1, 2, 3, 4}),
		safetensors.NewI64("y", []int{2}, []int64{0, 1}),
	}, nil)
	add([]safetensors.Tensor{
		safetensors.NewF16("x", []int{2, 1}, []float32{1, 2}),
		safetensors.NewI32("y", []int{2}, []int32{0, 1}),
		safetensors.NewF16("x_test", []int{1, 1}, []float32{3}),
		safetensors.NewI32("y_test", []int{1}, []int32{2}),
	}, map[string]string{"classes": "3"})
	add([]safetensors.Tensor{safetensors.NewI64("tokens", []int{6}, []int64{0, 1, 2, 0, 1, 2})}, map[string]string{"vocab": "xyz"})
	f.Fuzz(func(t *testing.T, raw []byte) {
		file, err := safetensors.Read(bytes.NewReader(raw), int64(len(raw)))
		if err != nil {
			return
		}
		train, test, err := tensorDataset(file, "fuzz", Options{Context: 2})
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		for _, ds := range []Dataset{train, test} {
			if ds == nil {
				continue
			}
			b := fillAll(ds)
			for _, y := range b.Y {
				if y < 0 || int(y) >= ds.Classes() {
					t.Fatalf("%s: target %d outside [0, %d)", ds.Name(), y, ds.Classes())
				}
			}
		}
	})
}

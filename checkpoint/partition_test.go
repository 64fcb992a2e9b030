package checkpoint

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/troupe-ml/troupe/safetensors"
)

// A hand-worked case: two F32 tensors, [4, 2] (32 bytes, rows of 8) and
// [3] (12 bytes, rows of 4); 44 bytes over 2 ranks cut at byte 22, which is
// in the first tensor, 2.75 rows in: it moves to row 3 (byte 24).
func TestPartitionHandWorked(t *testing.T) {
	specs := []TensorSpec{
		{Name: "a", DType: safetensors.F32, Shape: []int{4, 2}},
		{Name: "b", DType: safetensors.F32, Shape: []int{3}},
	}
	got, err := Partition(specs, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]Piece{{{0, 0, 3}}, {{0, 3, 4}, {1, 0, 3}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// Over 4 ranks: cuts at 11 (row 1.375 of a → 1, byte 8), 22 (→ 24),
	// 33 (in b, 0.25 rows in → 0, byte 32).
	got, _ = Partition(specs, 4)
	want = [][]Piece{{{0, 0, 1}}, {{0, 1, 3}}, {{0, 3, 4}}, {{1, 0, 3}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("4 ranks: got %v, want %v", got, want)
	}
	// More ranks than rows: some get nothing, nothing is lost.
	got, _ = Partition(specs[1:], 5)
	n := 0
	for _, ps := range got {
		for _, p := range ps {
			n += int(p.Hi - p.Lo)
		}
	}
	if n != 3 {
		t.Fatalf("5 ranks over 3 rows wrote %d rows: %v", n, got)
	}
}

// TestPartitionProperties checks random stages against the definition:
// every row of every tensor written exactly once, in order, whole rows
// only, and each rank within one row (of the tensors at its cuts) of an
// equal share of the bytes.
func TestPartitionProperties(t *testing.T) {
	for seed := uint64(0); seed < 500; seed++ {
		r := rand.New(rand.NewPCG(seed, 2))
		m := randomModel(r)
		specs := m.params
		dp := 1 + r.IntN(9)
		parts, err := Partition(specs, dp)
		if err != nil {
			t.Fatal(err)
		}
		var total, maxRow int64
		for _, s := range specs {
			b, _ := s.Bytes()
			total += b
			maxRow = max(maxRow, RowElems(s.Shape)*int64(s.DType.Size()))
		}
		next := make([]int64, len(specs)) // next row expected per tensor
		seen := make([]bool, len(specs))
		lastTensor := -1
		for k, ps := range parts {
			var bytes int64
			for _, p := range ps {
				if p.Tensor < lastTensor {
					t.Fatalf("seed %d: rank %d piece of tensor %d after tensor %d", seed, k, p.Tensor, lastTensor)
				}
				lastTensor = p.Tensor
				if p.Lo != next[p.Tensor] || p.Hi < p.Lo || p.Hi > Rows(specs[p.Tensor].Shape) {
					t.Fatalf("seed %d: rank %d piece %+v, next row of the tensor is %d", seed, k, p, next[p.Tensor])
				}
				next[p.Tensor] = p.Hi
				seen[p.Tensor] = true
				bytes += (p.Hi - p.Lo) * RowElems(specs[p.Tensor].Shape) * int64(specs[p.Tensor].DType.Size())
			}
			share := total / int64(dp)
			if d := bytes - share; d > maxRow+1 || d < -maxRow-1 {
				t.Fatalf("seed %d: rank %d of %d writes %d bytes, equal share %d, largest row %d", seed, k, dp, bytes, share, maxRow)
			}
		}
		for i, s := range specs {
			if !seen[i] || next[i] != Rows(s.Shape) {
				t.Fatalf("seed %d: tensor %v covered to row %d (seen %v)", seed, s.Shape, next[i], seen[i])
			}
		}
	}
}

func TestPartitionErrors(t *testing.T) {
	if _, err := Partition(nil, 0); err == nil {
		t.Fatal("0 ranks accepted")
	}
	huge := []TensorSpec{{Name: "h", DType: safetensors.F64, Shape: []int{1 << 62, 4}}}
	if _, err := Partition(huge, 2); err == nil {
		t.Fatal("overflowing shape accepted")
	}
	if got, err := Partition(nil, 3); err != nil || len(got) != 3 {
		t.Fatalf("no tensors: %v %v", got, err)
	}
}

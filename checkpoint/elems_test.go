package checkpoint

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/troupe-ml/troupe/nn"
)

// elementBlocks, checked by values: a whole tensor whose element i holds
// i+1 is cut into a shard (nn.Split.Extract, padding 0); for random
// element runs of the shard, every block's values read from the whole
// tensor (row-major in the block) are the run's values at the block's
// place, and the blocks hold every value of the run but the padding, once.
func TestElementBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 5))
	cases := []struct {
		full  []int
		split *nn.Split
	}{
		{[]int{7}, nil},
		{[]int{5, 6}, nil},
		{[]int{3, 4, 5}, nil},
		{[]int{12, 5}, &nn.Split{Full: []int{12, 5}, Dim: 0, Blocks: 3, Parts: 2, Index: 1}},
		{[]int{13, 4}, &nn.Split{Full: []int{13, 4}, Dim: 0, Blocks: 1, Parts: 4, Index: 3}}, // padded
		{[]int{6, 8}, &nn.Split{Full: []int{6, 8}, Dim: 1, Blocks: 1, Parts: 2, Index: 1}},
		{[]int{9}, &nn.Split{Full: []int{9}, Dim: 0, Blocks: 3, Parts: 3, Index: 2}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.full, c.split != nil), func(t *testing.T) {
			n := 1
			for _, d := range c.full {
				n *= d
			}
			whole := make([]float32, n)
			for i := range whole {
				whole[i] = float32(i + 1)
			}
			local, shape := whole, c.full
			if c.split != nil {
				shape = c.split.Shape()
				m := 1
				for _, d := range shape {
					m *= d
				}
				local = make([]float32, m)
				c.split.Extract(local, whole)
			}
			for range 50 {
				lo := r.IntN(len(local))
				hi := lo + 1 + r.IntN(len(local)-lo)
				seen := 0
				for _, b := range elementBlocks(shape, c.split, lo, hi) {
					k := 0
					forEachIndex(b.Off, b.Size, func(idx []int) {
						g := 0
						for d := range idx {
							g = g*c.full[d] + idx[d]
						}
						if want := local[lo+b.At+k]; whole[g] != want {
							t.Fatalf("[%d, %d): block %+v element %d is %v in the whole tensor, the run has %v", lo, hi, b, k, whole[g], want)
						}
						k++
					})
					seen += k
				}
				want := 0
				for _, v := range local[lo:hi] {
					if v != 0 {
						want++
					}
				}
				if seen != want {
					t.Fatalf("[%d, %d): blocks hold %d elements, the run %d real ones", lo, hi, seen, want)
				}
			}
		})
	}
}

// forEachIndex calls f with every index of the block, row-major.
func forEachIndex(off, size []int, f func([]int)) {
	idx := append([]int(nil), off...)
	for {
		f(idx)
		d := len(idx) - 1
		for ; d >= 0; d-- {
			idx[d]++
			if idx[d] < off[d]+size[d] {
				break
			}
			idx[d] = off[d]
		}
		if d < 0 {
			return
		}
	}
}

package kerneltest

import "fmt"

// testTranspose moves values without arithmetic: exact. Cases cover the
// identity, 2-D transposes, every permutation of 3 axes, attention's
// [B, T, H, D] → [B, H, T, D], size-1 axes, 6 axes, and a large 2-D one.
func testTranspose(s *suite) {
	type tc struct{ shape, perm []int }
	cases := []tc{
		{[]int{1}, []int{0}},
		{[]int{33}, []int{0}},
		{[]int{1, 1}, []int{1, 0}},
		{[]int{7, 33}, []int{1, 0}},
		{[]int{7, 33}, []int{0, 1}},
		{[]int{1, 33}, []int{1, 0}},
		{[]int{2, 7, 3, 5}, []int{0, 2, 1, 3}},
		{[]int{3, 1, 5, 1, 4}, []int{4, 2, 0, 3, 1}},
		{[]int{2, 3, 1, 4, 2, 3}, []int{5, 0, 3, 1, 4, 2}},
		{[]int{2, 2, 2, 2, 2, 2}, []int{1, 0, 3, 2, 5, 4}},
		{[]int{257, 1000}, []int{1, 0}},
		{[]int{4, 64, 8, 33}, []int{0, 2, 1, 3}},
	}
	for _, p := range permutations(3) {
		cases = append(cases, tc{[]int{3, 4, 5}, p})
	}
	for _, k := range cases {
		s.run(fmt.Sprintf("%v/perm=%v", k.shape, k.perm), func(c *tcase) {
			n := 1
			for _, d := range k.shape {
				n *= d
			}
			src := c.randn(n, 0, 1)
			want := refTranspose(src, k.shape, k.perm)
			dst := c.be.Alloc(n)
			c.be.Transpose(dst, c.up(src), k.shape, k.perm)
			c.check("dst", c.down(dst), want, exact(n))
		})
	}
}

// permutations returns every permutation of 0..n-1.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

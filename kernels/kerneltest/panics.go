package kerneltest

import (
	"fmt"

	"github.com/troupe-ml/troupe/kernels"
)

// testPanics checks the interface's contract that misuse a caller can
// prevent, mismatched lengths above all, panics instead of reading or
// writing out of bounds. Only checks a backend can make from lengths and
// host arguments are required (ids and targets live in device memory).
func testPanics(s *suite) {
	be := s.be
	b := func(n int) kernels.Buffer { return be.Alloc(n) }
	cases := []struct {
		name string
		call func()
	}{
		{"Upload", func() { be.Upload(b(3), make([]float32, 4)) }},
		{"Download", func() { be.Download(make([]float32, 2), b(3)) }},
		{"UploadIndex", func() { be.UploadIndex(be.AllocIndex(3), make([]int32, 1)) }},
		{"Copy", func() { be.Copy(b(3), b(4)) }},
		{"Axpy", func() { be.Axpy(1, b(3), b(4)) }},
		{"Add", func() { be.Add(b(4), b(4), b(3)) }},
		{"AddBias", func() { be.AddBias(b(10), b(3)) }},
		{"SumRows", func() { be.SumRows(b(3), b(10)) }},
		{"ReLU", func() { be.ReLU(b(3), b(4)) }},
		{"ReLUBackward", func() { be.ReLUBackward(b(4), b(4), b(5)) }},
		{"GELU", func() { be.GELU(b(3), b(4)) }},
		{"GELUBackward", func() { be.GELUBackward(b(4), b(3), b(4)) }},
		{"LayerNorm/mean", func() { be.LayerNorm(b(12), b(2), b(3), b(12), b(4), b(4), 1e-5) }},
		{"LayerNorm/beta", func() { be.LayerNorm(b(12), b(3), b(3), b(12), b(4), b(5), 1e-5) }},
		{"LayerNormBackward", func() { be.LayerNormBackward(b(12), b(4), b(4), b(11), b(12), b(3), b(3), b(4)) }},
		{"Embedding", func() { be.Embedding(b(7), b(12), be.AllocIndex(2)) }},
		{"EmbeddingBackward", func() { be.EmbeddingBackward(b(10), b(6), be.AllocIndex(4)) }},
		{"SoftmaxCrossEntropy/losses", func() { be.SoftmaxCrossEntropy(b(2), nil, b(12), be.AllocIndex(3), 1) }},
		{"SoftmaxCrossEntropy/dlogits", func() { be.SoftmaxCrossEntropy(b(3), b(11), b(12), be.AllocIndex(3), 1) }},
		{"ArgmaxCorrect", func() { be.ArgmaxCorrect(b(10), be.AllocIndex(3)) }},
		{"ShardEmbedding", func() { be.ShardEmbedding(b(7), b(12), be.AllocIndex(2), 0) }},
		{"ShardEmbeddingBackward", func() { be.ShardEmbeddingBackward(b(10), b(6), be.AllocIndex(4), 3) }},
		{"RowMax/valid", func() { be.RowMax(b(3), b(12), 5) }},
		{"RowMax/rows", func() { be.RowMax(b(5), b(12), 1) }},
		{"ShardLogitStats", func() { be.ShardLogitStats(b(3), b(2), b(12), b(3), be.AllocIndex(3), 0, 4) }},
		{"ShardCrossEntropy/valid", func() { be.ShardCrossEntropy(b(3), nil, b(12), b(3), b(3), b(3), be.AllocIndex(3), 0, 5, 1) }},
		{"ShardCrossEntropy/dlogits", func() { be.ShardCrossEntropy(b(3), b(11), b(12), b(3), b(3), b(3), be.AllocIndex(3), 0, 4, 1) }},
		{"CausalSoftmax/t", func() { be.CausalSoftmax(b(18), b(18), 4, 1) }},
		{"CausalSoftmax/y", func() { be.CausalSoftmax(b(9), b(18), 3, 1) }},
		{"SoftmaxBackward", func() { be.SoftmaxBackward(b(10), b(10), b(10), 3, 1) }},
		{"Transpose/size", func() { be.Transpose(b(6), b(6), []int{2, 4}, []int{1, 0}) }},
		{"Transpose/perm", func() { be.Transpose(b(6), b(6), []int{2, 3}, []int{0, 0}) }},
		{"Transpose/axes", func() { be.Transpose(b(1), b(1), []int{1, 1, 1, 1, 1, 1, 1}, []int{0, 1, 2, 3, 4, 5, 6}) }},
		{"SGDStep", func() { be.SGDStep(b(4), b(3), nil, kernels.SGDHyper{LR: 1}, false) }},
		{"AdamWStep", func() { be.AdamWStep(b(4), b(4), b(4), b(3), kernels.AdamWHyper{LR: 1}, 1) }},
	}
	for _, k := range cases {
		s.run(k.name, func(c *tcase) {
			msg := func() (msg string) {
				defer func() { msg = fmt.Sprint(recover()) }()
				k.call()
				return "<nil>"
			}()
			if msg == "<nil>" {
				c.Errorf("%s with mismatched lengths did not panic", k.name)
			} else {
				c.Logf("panic: %s", msg)
			}
		})
	}
}

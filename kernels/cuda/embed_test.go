//go:build cuda

package cuda

import (
	"strings"
	"testing"
)

// TestPTXCurrent fails when kernels.cu changed after kernels.ptx was
// generated: run `go generate ./kernels/cuda` (needs nvcc) and commit both.
func TestPTXCurrent(t *testing.T) {
	if !strings.HasPrefix(kernelsPTX, ptxStamp) {
		t.Fatalf("kernels.ptx does not start with the stamp %q", ptxStamp)
	}
	if got, want := ptxSourceHash(), sourceHash(); got != want {
		t.Fatalf("kernels.ptx was made from kernels.cu sha256 %s, the source is now %s: run go generate ./kernels/cuda", got, want)
	}
	for k := kernel(0); k < numKernels; k++ {
		if !strings.Contains(kernelsPTX, ".entry "+k.String()+"(") {
			t.Errorf("kernels.ptx has no entry %s", k)
		}
	}
}

package cpu

import (
	"testing"

	"github.com/troupe-ml/troupe/kernels/kerneltest"
)

// TestConformance runs the shared backend suite with one thread and with
// two, so that both the serial and the split path of every kernel are held
// to the float64 reference (the suite's largest shapes exceed the split
// thresholds).
func TestConformance(t *testing.T) {
	t.Run("threads=1", func(t *testing.T) { kerneltest.Run(t, New(1)) })
	t.Run("threads=2", func(t *testing.T) { kerneltest.Run(t, New(2)) })
}

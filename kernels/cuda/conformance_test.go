//go:build cuda

package cuda

import (
	"testing"

	"github.com/troupe-ml/troupe/kernels/kerneltest"
)

// open opens device 0 with cfg's TF32 setting and closes it when t ends.
func open(t testing.TB, tf32 bool) *Backend {
	t.Helper()
	cfg := DefaultConfig()
	cfg.TF32 = tf32
	be, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := be.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return be
}

// TestConformance runs the shared suite against the float64 reference: FP32
// GEMMs, and again with TF32 tensor cores allowed, where Caps().TensorCores
// widens the GEMM tolerance by the TF32 input rounding (2·2⁻¹¹ relative per
// product) and leaves every other kernel's as it is. Each run ends with a
// Sync that must report no failure.
func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		tf32 bool
	}{{"fp32", false}, {"tf32", true}} {
		t.Run(tc.name, func(t *testing.T) {
			be := open(t, tc.tf32)
			if tc.tf32 && !be.Caps().TensorCores {
				t.Skipf("%s has no tensor cores", be.info.name)
			}
			kerneltest.Run(t, be)
			if err := be.Sync(); err != nil {
				t.Fatalf("Sync after the suite: %v", err)
			}
		})
	}
}

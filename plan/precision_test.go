package plan

import (
	"errors"
	"testing"
)

// troupe's bytes per parameter, per precision and ZeRO stage, over 4
// replicas with AdamW (8 bytes of moments): fp32 16, 4+4+2, 4+3, 4; mixed
// 18, 10+2, 6+3, 4 (the compute copies add 2 below stage 3); the paper's
// mixed-precision figures 16, 7, 5.5, 4.
func TestPrecisionTable(t *testing.T) {
	rows, err := PrecisionTable([]string{"fp32", "bf16"}, []int{0, 1, 2, 3}, 4, 8, 1000)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ total, paper float64 }{{16, 0}, {10, 0}, {7, 0}, {4, 0}, {18, 16}, {12, 7}, {9, 5.5}, {4, 4}}
	for i, w := range want {
		if r := rows[i]; r.Total != w.total || r.Paper != w.paper || r.DeviceBytes != 1000*w.total {
			t.Errorf("%s stage %d: %+v, want total %g, paper %g", r.Precision, r.Stage, r, w.total, w.paper)
		}
	}
	for _, bad := range []func() error{
		func() error { _, err := PrecisionTable([]string{"fp8"}, []int{0}, 4, 8, 0); return err },
		func() error { _, err := PrecisionTable([]string{"fp32"}, []int{4}, 4, 8, 0); return err },
		func() error { _, err := PrecisionTable([]string{"fp32"}, []int{0}, 0, 8, 0); return err },
	} {
		if err := bad(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%v, want ErrInvalidConfig", err)
		}
	}
}

package train

import (
	"errors"
	"testing"
)

// A value outside an enum's set is an error of its field that names the
// values allowed; every named value, and the empty one where it has a
// meaning, validates.
func TestConfigEnumsValidate(t *testing.T) {
	for _, c := range []struct {
		set   func(*Config)
		field string
		msg   string
	}{
		{func(c *Config) { c.Precision = "fp8" }, "Precision", `"fp8": want fp32, bf16 or fp16`},
		{func(c *Config) { c.ReduceDType = "int8" }, "ReduceDType", `"int8": want fp32, bf16 or fp16`},
		{func(c *Config) { c.Sync, c.SyncEvery, c.SyncDType = SyncDiLoCo, 10, "fp64" }, "SyncDType", `"fp64": want fp32, bf16 or fp16`},
		{func(c *Config) { c.Sync = "gossip" }, "Sync", `"gossip": want step, local-sgd, diloco or async`},
		{func(c *Config) { c.AllReduceAlgo = "tree" }, "AllReduceAlgo", `"tree": want auto or ring`},
	} {
		cfg := DefaultConfig()
		c.set(&cfg)
		var fe *FieldError
		if err := cfg.Validate(); !errors.As(err, &fe) || fe.Field != c.field || fe.Msg != c.msg {
			t.Errorf("%s: got %v, want %s %s", c.field, err, c.field, c.msg)
		}
	}
	for _, d := range []DType{"", FP32, BF16, FP16, "bfloat16"} {
		if !d.Valid() {
			t.Errorf("DType %q is not valid", d)
		}
	}
	for _, s := range []SyncMethod{"", SyncStep, SyncLocalSGD, SyncDiLoCo, SyncAsync} {
		if !s.Valid() {
			t.Errorf("SyncMethod %q is not valid", s)
		}
	}
	for _, a := range []AllReduceAlgo{AllReduceAuto, AllReduceRing} {
		if !a.Valid() {
			t.Errorf("AllReduceAlgo %q is not valid", a)
		}
	}
}

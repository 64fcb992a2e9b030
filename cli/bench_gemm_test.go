package cli

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestBenchGemmJSON runs a tiny product and checks the JSON report.
func TestBenchGemmJSON(t *testing.T) {
	out, err := execute(newBenchGemmCmd(), "--m", "7", "--n", "9", "--k", "5", "--trans-b", "--threads", "2", "--iters", "3", "--samples", "5", "--json")
	if err != nil {
		t.Fatalf("bench gemm: %v\n%s", err, out)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	for _, f := range []string{"m", "n", "k", "threads", "simd", "gflops", "gflops_min", "gflops_max", "samples"} {
		if _, ok := res[f]; !ok {
			t.Errorf("JSON lacks field %q: %s", f, out)
		}
	}
	if res["m"] != 7.0 || res["n"] != 9.0 || res["k"] != 5.0 || res["threads"] != 2.0 || res["samples"] != 5.0 || res["trans_b"] != true {
		t.Errorf("JSON echoes the wrong sizes: %s", out)
	}
	if res["calls_per_sample"] != 3.0 {
		t.Errorf("calls_per_sample = %v, want 3 (--iters)", res["calls_per_sample"])
	}
	lo, med, hi := res["gflops_min"].(float64), res["gflops"].(float64), res["gflops_max"].(float64)
	if !(0 < lo && lo <= med && med <= hi) {
		t.Errorf("want 0 < gflops_min ≤ gflops ≤ gflops_max, got %v %v %v", lo, med, hi)
	}
	if s, _ := res["simd"].(string); s == "" {
		t.Errorf("simd is empty")
	}
}

// TestBenchGemmText checks the human-readable line.
func TestBenchGemmText(t *testing.T) {
	out, err := execute(newBenchGemmCmd(), "--m", "3", "--n", "4", "--k", "2", "--threads", "1", "--iters", "2", "--samples", "1")
	if err != nil {
		t.Fatalf("bench gemm: %v", err)
	}
	if !strings.HasPrefix(out, "gemm 3×4×2 NN fp32 (C fp32) threads=1 ") || !strings.Contains(out, "GFLOP/s median") {
		t.Fatalf("unexpected output %q", out)
	}
}

// TestBenchGemmLowPrecision: --dtype bf16 and fp16 time 16-bit products
// and say which path ran; --c-dtype fp32 keeps C in fp32.
func TestBenchGemmLowPrecision(t *testing.T) {
	for _, c := range []struct {
		args          []string
		dtype, cdtype string
	}{
		{[]string{"--dtype", "bf16"}, "bf16", "bf16"},
		{[]string{"--dtype", "fp16", "--c-dtype", "fp32"}, "fp16", "fp32"},
	} {
		out, err := execute(newBenchGemmCmd(), append(c.args, "--m", "33", "--n", "40", "--k", "17", "--threads", "1", "--iters", "2", "--samples", "1", "--json")...)
		if err != nil {
			t.Fatalf("bench gemm %v: %v", c.args, err)
		}
		var res map[string]any
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if res["dtype"] != c.dtype || res["c_dtype"] != c.cdtype || !(res["gflops"].(float64) > 0) {
			t.Errorf("%v: %s", c.args, out)
		}
		if s, _ := res["simd"].(string); s != "avx512bf16" && !strings.HasPrefix(s, "widen+") {
			t.Errorf("%v: path %q", c.args, s)
		}
	}
	if _, err := execute(newBenchGemmCmd(), "--dtype", "bf16", "--c-dtype", "fp16"); err == nil {
		t.Error("--c-dtype fp16 with --dtype bf16 accepted")
	}
}

// TestBenchGemmBadFlags: invalid values are usage errors naming the flag.
func TestBenchGemmBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--m", "0"}, "--m"},
		{[]string{"--n", "-3"}, "--n"},
		{[]string{"--k", "0"}, "--k"},
		{[]string{"--threads", "-1"}, "--threads"},
		{[]string{"--iters", "-2"}, "--iters"},
		{[]string{"--samples", "0"}, "--samples"},
		{[]string{"--m", "many"}, "--m"},
		{[]string{"extra"}, "unknown command"},
	} {
		_, err := execute(newBenchGemmCmd(), tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one mentioning %q", tc.args, err, tc.want)
		}
		if err != nil && tc.want != "unknown command" && !errors.Is(err, errUsage) {
			t.Errorf("%v: error %v is not a usage error", tc.args, err)
		}
	}
}

package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/plan"
)

// runPlan executes a fresh `troupe plan` tree (cobra keeps flag values
// between executions of one tree) and returns what it printed on stdout.
func runPlan(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newPlanCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// planJSON runs a sub-command with --json and decodes its one object.
func planJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	out, err := runPlan(t, append(args, "--json")...)
	if err != nil {
		t.Fatalf("plan %v: %v", args, err)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("plan %v: output is not JSON: %v\n%s", args, err, out)
	}
	if dec.More() {
		t.Fatalf("plan %v: more than one JSON value:\n%s", args, out)
	}
	return m
}

// wantPlanFields compares JSON numbers (and booleans, strings) with hand-worked
// values. The figures are whole bytes or short binary fractions, exact in
// float64 and printed exactly by encoding/json, so equality is the test; the
// few that pass through a ms conversion get 1e-9 relative.
func wantPlanFields(t *testing.T, m map[string]any, want map[string]any) {
	t.Helper()
	for k, w := range want {
		got, ok := m[k]
		if !ok {
			t.Errorf("field %q missing in %v", k, m)
			continue
		}
		if wf, isNum := w.(float64); isNum {
			gf, _ := got.(float64)
			if math.Abs(gf-wf) > 1e-9*math.Max(1, math.Abs(wf)) {
				t.Errorf("%s = %v, want %v", k, got, w)
			}
			continue
		}
		if got != w {
			t.Errorf("%s = %v, want %v", k, got, w)
		}
	}
}

func wantPlanAbsent(t *testing.T, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; ok {
			t.Errorf("field %q present (%v), want it left out", k, m[k])
		}
	}
}

func TestPlanMemory(t *testing.T) {
	// 1.5B parameters at 16 bytes is 24 GB: 1 device of 80 GB, 2 of 16 GB.
	m := planJSON(t, "memory", "--params", "1.5B", "--device-mem", "80GB")
	wantPlanFields(t, m, map[string]any{"params": 1.5e9, "bytes_per_param": 16.0, "total_bytes": 24e9, "device_mem_bytes": 80e9, "min_devices": 1.0})
	m = planJSON(t, "memory", "--params", "1.5B", "--device-mem", "16GB")
	wantPlanFields(t, m, map[string]any{"total_bytes": 24e9, "min_devices": 2.0})
	// Binary device size: 24e9 / 16 GiB (17179869184) = 1.397 → 2.
	m = planJSON(t, "memory", "--params", "1500M", "--device-mem", "16GiB")
	wantPlanFields(t, m, map[string]any{"device_mem_bytes": 17179869184.0, "min_devices": 2.0})
	// No device size: the total only.
	m = planJSON(t, "memory", "--params", "7e9", "--bytes-per-param", "2")
	wantPlanFields(t, m, map[string]any{"total_bytes": 14e9, "bytes_per_param": 2.0})
	wantPlanAbsent(t, m, "min_devices", "device_mem_bytes", "fits")

	out, err := runPlan(t, "memory", "--params", "1.5B", "--device-mem", "16GB")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"24.0 GB (24000000000 B)", "min devices", "2 (ceil"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
}

func TestPlanMemoryZeRO(t *testing.T) {
	// ZeRO stage 3 over 8 devices divides the 16 bytes per parameter by 8.
	m := planJSON(t, "memory", "--params", "1.5B", "--zero", "3", "--dp", "8", "--device-mem", "80GB")
	wantPlanFields(t, m, map[string]any{"zero_stage": 3.0, "dp": 8.0, "k": 12.0, "per_device_bytes": 3e9,
		"weight_bytes": 375e6, "gradient_bytes": 375e6, "optimizer_bytes": 2.25e9, "total_bytes": 24e9, "fits": true})
	// Stage 1 over 8 with 16 GB devices: (2 + 2 + 12/8)·1.5e9 = 8.25 GB, fits.
	m = planJSON(t, "memory", "--params", "1.5B", "--zero", "1", "--dp", "8", "--device-mem", "16GB")
	wantPlanFields(t, m, map[string]any{"per_device_bytes": 8.25e9, "fits": true})
	// Stage 0 keeps all 24 GB on each: does not fit 16 GB.
	m = planJSON(t, "memory", "--params", "1.5B", "--zero", "0", "--dp", "8", "--device-mem", "16GB")
	wantPlanFields(t, m, map[string]any{"per_device_bytes": 24e9, "fits": false})
	// Stage 2 with K = 6: (2 + (2 + 6)/4)·1000 = 4000 bytes.
	m = planJSON(t, "memory", "--params", "1K", "--zero", "2", "--dp", "4", "--k", "6")
	wantPlanFields(t, m, map[string]any{"per_device_bytes": 4000.0, "bytes_per_param": 10.0})
	wantPlanAbsent(t, m, "fits", "device_mem_bytes")

	out, err := runPlan(t, "memory", "--params", "1.5B", "--zero", "3", "--dp", "8", "--device-mem", "80GB")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"3.00 GB (3000000000 B)", "fits", "yes: 3.8% of device memory"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
}

func TestPlanAllReduce(t *testing.T) {
	// An 8 GB gradient over 4 ranks sends 12 GB per rank by ring; 480 ms at
	// 25 GB/s, the same at 200 Gbps.
	for _, bw := range []string{"25GB/s", "200Gbps"} {
		m := planJSON(t, "allreduce", "--bytes", "8GB", "--ranks", "4", "--bandwidth", bw)
		wantPlanFields(t, m, map[string]any{"algorithm": "ring", "bytes": 8e9, "ranks": 4.0, "bytes_per_rank": 12e9,
			"bandwidth_bytes_per_s": 25e9, "seconds": 0.48})
		wantPlanAbsent(t, m, "root_bytes_sent", "root_bytes_received")
	}
	// Naive: the root receives and sends 3·8 GB, one phase after the other.
	m := planJSON(t, "allreduce", "--bytes", "8GB", "--ranks", "4", "--bandwidth", "25GB/s", "--algorithm", "naive")
	wantPlanFields(t, m, map[string]any{"algorithm": "naive", "bytes_per_rank": 24e9, "root_bytes_sent": 24e9,
		"root_bytes_received": 24e9, "seconds": 1.92})
	// Without a bandwidth: volumes only.
	m = planJSON(t, "allreduce", "--bytes", "512MiB", "--ranks", "2")
	wantPlanFields(t, m, map[string]any{"bytes": 536870912.0, "bytes_per_rank": 536870912.0})
	wantPlanAbsent(t, m, "seconds", "bandwidth_bytes_per_s")

	out, err := runPlan(t, "allreduce", "--bytes", "8GB", "--ranks", "4", "--bandwidth", "25GB/s")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"12.0 GB (12000000000 B)", "480.0 ms"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
}

func TestPlanSpeedup(t *testing.T) {
	// 8 ranks × 100 ms compute against 25 ms unhidden communication:
	// 800 / 125 = 6.4, efficiency 0.8.
	m := planJSON(t, "speedup", "--ranks", "8", "--compute-ms", "100", "--comm-ms", "25")
	wantPlanFields(t, m, map[string]any{"step_ms": 125.0, "serial_ms": 800.0, "speedup": 6.4, "efficiency": 0.8, "comm_ms": 25.0, "exposed_comm_ms": 25.0})
	wantPlanAbsent(t, m, "grad_bytes", "bandwidth_bytes_per_s")
	// From bytes: 8 GB over 4 ranks at 25 GB/s is 480 ms; 60% hidden
	// leaves 192 ms: step 1000 + 192 = 1192, speedup 4000/1192.
	m = planJSON(t, "speedup", "--ranks", "4", "--compute-ms", "1000", "--grad-bytes", "8GB", "--bandwidth", "200Gbps", "--overlap", "0.6")
	wantPlanFields(t, m, map[string]any{"comm_ms": 480.0, "exposed_comm_ms": 192.0, "step_ms": 1192.0, "serial_ms": 4000.0,
		"speedup": 4000.0 / 1192, "efficiency": 1000.0 / 1192, "grad_bytes": 8e9, "bandwidth_bytes_per_s": 25e9, "overlap": 0.6})

	out, err := runPlan(t, "speedup", "--ranks", "8", "--compute-ms", "100", "--comm-ms", "25")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"6.40×", "80.0%", "125.0 ms"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
}

func TestPlanPipeline(t *testing.T) {
	// 3 stages with 6 micro-batches idle 2/8 = 25%.
	m := planJSON(t, "pipeline", "--stages", "3", "--micro-batches", "6")
	wantPlanFields(t, m, map[string]any{"stages": 3.0, "micro_batches": 6.0, "slots": 8.0, "bubble_fraction": 0.25, "busy_fraction": 0.75})
	out, err := runPlan(t, "pipeline", "--stages", "3", "--micro-batches", "6")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "25.0% (2 of 8 slots idle") {
		t.Errorf("table:\n%s", out)
	}
}

func TestPlanCheck(t *testing.T) {
	// The hand-worked figures of plan/check_test.go, through the command.
	m := planJSON(t, "check", "--metrics", "../plan/testdata/dp4.jsonl")
	wantPlanFields(t, m, map[string]any{"file": "../plan/testdata/dp4.jsonl", "steps": 4.0, "warmup_skipped": 1.0, "dp": 4.0, "overlap_fraction": 0.5, "comm_modelled": false})
	measured, _ := m["measured"].(map[string]any)
	predicted, _ := m["predicted"].(map[string]any)
	relErr, _ := m["relative_error"].(map[string]any)
	wantPlanFields(t, measured, map[string]any{"step_ms": 129.0, "compute_ms": 100.5, "comm_ms": 59.5})
	wantPlanFields(t, predicted, map[string]any{"step_ms": 130.25, "compute_ms": 100.5, "comm_ms": 59.5})
	wantPlanFields(t, relErr, map[string]any{"step_ms": 1.25 / 129})

	m = planJSON(t, "check", "--metrics", "../plan/testdata/dp4.jsonl", "--bandwidth", "2.5GB/s")
	predicted, _ = m["predicted"].(map[string]any)
	wantPlanFields(t, predicted, map[string]any{"comm_ms": 60.0, "step_ms": 130.5})
	wantPlanFields(t, m, map[string]any{"comm_modelled": true, "bandwidth_bytes_per_s": 2.5e9})

	m = planJSON(t, "check", "--metrics", "../plan/testdata/elastic.jsonl", "--generation", "1")
	wantPlanFields(t, m, map[string]any{"generation": 1.0, "world": 4.0, "steps": 3.0})

	out, err := runPlan(t, "check", "--metrics", "../plan/testdata/pp3.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"measured", "predicted", "bubble fraction  25.0%", "400.0 ms", "+0.0%"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
}

func TestPlanBadInput(t *testing.T) {
	cases := []struct {
		args  []string
		usage bool   // exit status 2 (errUsage), else 1
		msg   string // the message must name what was wrong
	}{
		{[]string{"memory", "--params", "-1"}, true, `"--params"`},
		{[]string{"memory", "--params", "1.5B", "--device-mem", "-80GB"}, true, `"-80GB"`},
		{[]string{"memory", "--params", "1.5B", "--device-mem", "80XB"}, true, `unknown unit "XB"`},
		{[]string{"memory", "--params", "1.5B", "--device-mem", "0"}, true, "--device-mem 0"},
		{[]string{"memory", "--params", "NaN"}, true, `"NaN"`},
		{[]string{"memory", "--params", "1.5B", "--zero", "4", "--dp", "8"}, true, "--zero 4"},
		{[]string{"memory", "--params", "1.5B", "--zero", "-1", "--dp", "8"}, true, "--zero -1"},
		{[]string{"memory", "--params", "1.5B", "--zero", "2"}, true, "--dp"},
		{[]string{"memory", "--params", "1.5B", "--zero", "2", "--dp", "0"}, true, "--dp 0"},
		{[]string{"memory", "--params", "1.5B", "--dp", "4"}, true, "--dp applies only with --zero"},
		{[]string{"memory", "--params", "1.5B", "--k", "4"}, true, "--k applies only with --zero"},
		{[]string{"memory", "--params", "1.5B", "--zero", "1", "--dp", "2", "--bytes-per-param", "8"}, true, "--bytes-per-param"},
		{[]string{"memory", "--params", "1.5B", "--bytes-per-param", "0"}, true, "--bytes-per-param 0"},
		{[]string{"memory", "--params", "1.5B", "--bytes-per-param", "Inf"}, true, "--bytes-per-param"},
		{[]string{"memory"}, true, "--params"},
		{[]string{"allreduce", "--bytes", "8GB", "--ranks", "0"}, true, "--ranks 0"},
		{[]string{"allreduce", "--bytes", "8GB", "--ranks", "-2"}, true, "--ranks -2"},
		{[]string{"allreduce", "--bytes", "-8GB", "--ranks", "4"}, true, `"-8GB"`},
		{[]string{"allreduce", "--bytes", "8 gigs", "--ranks", "4"}, true, `unknown unit "gigs"`},
		{[]string{"allreduce", "--bytes", "8GB", "--ranks", "4", "--bandwidth", "25GB"}, true, `"25GB"`},
		{[]string{"allreduce", "--bytes", "8GB", "--ranks", "4", "--bandwidth", "0"}, true, "--bandwidth"},
		{[]string{"allreduce", "--bytes", "8GB", "--ranks", "4", "--algorithm", "tree"}, true, `"tree"`},
		{[]string{"allreduce", "--ranks", "4"}, true, "--bytes"},
		{[]string{"speedup", "--ranks", "4", "--compute-ms", "100"}, true, "--comm-ms"},
		{[]string{"speedup", "--ranks", "0", "--compute-ms", "100", "--comm-ms", "1"}, true, "--ranks 0"},
		{[]string{"speedup", "--ranks", "4", "--compute-ms", "0", "--comm-ms", "1"}, true, "--compute-ms 0"},
		{[]string{"speedup", "--ranks", "4", "--compute-ms", "100", "--comm-ms", "-1"}, true, "--comm-ms -1"},
		{[]string{"speedup", "--ranks", "4", "--compute-ms", "100", "--comm-ms", "1", "--overlap", "1.5"}, true, "--overlap 1.5"},
		{[]string{"speedup", "--ranks", "4", "--compute-ms", "100", "--comm-ms", "1", "--grad-bytes", "1GB"}, true, "not both"},
		{[]string{"speedup", "--ranks", "4", "--compute-ms", "100", "--grad-bytes", "1GB"}, true, "--bandwidth"},
		{[]string{"pipeline", "--stages", "0", "--micro-batches", "4"}, true, "--stages 0"},
		{[]string{"pipeline", "--stages", "4", "--micro-batches", "-1"}, true, "--micro-batches -1"},
		{[]string{"pipeline", "--stages", "4"}, true, "--micro-batches"},
		{[]string{"pipeline", "--stages", "4", "--micro-batches", "4", "extra"}, true, `"extra"`},
		{[]string{"frobnicate"}, true, `"frobnicate"`},
		{[]string{"check"}, true, "--metrics"},
		{[]string{"check", "--metrics", "../plan/testdata/dp4.jsonl", "--generation", "-3"}, true, "--generation -3"},
		{[]string{"check", "--metrics", "testdata/does-not-exist.jsonl"}, false, "does-not-exist.jsonl"},
		{[]string{"check", "--metrics", "../plan/testdata/malformed.jsonl"}, false, "line 3"},
		{[]string{"check", "--metrics", "../plan/testdata/missing_comm.jsonl"}, false, `missing field "comm_ms"`},
		{[]string{"check", "--metrics", "../plan/testdata/empty.jsonl"}, false, "no records"},
		{[]string{"check", "--metrics", "../plan/testdata/elastic.jsonl", "--generation", "9"}, false, "generation 9"},
		{[]string{"check", "--metrics", "../plan/testdata/two_steps.jsonl", "--bandwidth", "1GB/s"}, false, "grad_bytes"},
	}
	for _, c := range cases {
		out, err := runPlan(t, c.args...)
		if err == nil {
			t.Errorf("plan %v succeeded, want an error; printed:\n%s", c.args, out)
			continue
		}
		if errors.Is(err, errUsage) != c.usage {
			t.Errorf("plan %v: usage error = %v, want %v (%v)", c.args, errors.Is(err, errUsage), c.usage, err)
		}
		if !strings.Contains(err.Error(), c.msg) {
			t.Errorf("plan %v: error %q does not mention %q", c.args, err, c.msg)
		}
		if out != "" {
			t.Errorf("plan %v: printed %q on stdout beside the error", c.args, out)
		}
	}
}

func TestPlanRegistered(t *testing.T) {
	cmd, _, err := rootCmd.Find([]string{"plan", "check"})
	if err != nil || cmd.Name() != "check" || cmd.Parent().Name() != "plan" {
		t.Fatalf("troupe plan check not found under the root: %v, %v", cmd, err)
	}
}

// troupe plan tp: the default GPT over two shards sends 8·(1/2)·s·b·h·4
// bytes per layer and holds the parameters troupe's layout gives a shard
// (plan's own test checks them against nn); a missing shape flag or heads
// the shard count does not divide is a usage error.
func TestPlanTP(t *testing.T) {
	doc := planJSON(t, "tp", "--seq", "64", "--hidden", "128", "--heads", "4", "--layers", "4", "--vocab", "126", "--tp", "2", "--micro-batch", "32")
	if got, want := doc["comm_bytes_per_layer"].(float64), 8*0.5*64*32*128*4.0; got != want {
		t.Errorf("comm per layer %v, want %v", got, want)
	}
	if doc["params"].(float64) != 817664 || doc["devices"].(float64) != 2 {
		t.Errorf("params %v devices %v", doc["params"], doc["devices"])
	}
	for _, args := range [][]string{
		{"tp", "--seq", "64", "--hidden", "128", "--heads", "4", "--layers", "4", "--vocab", "126"},
		{"tp", "--seq", "64", "--hidden", "128", "--heads", "4", "--layers", "4", "--vocab", "126", "--tp", "3"},
	} {
		if _, err := runPlan(t, args...); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// plan memory --precision prints troupe's bytes per parameter per
// precision and stage, and refuses the flags its layout fixes.
func TestPlanMemoryPrecision(t *testing.T) {
	out, err := runPlan(t, "memory", "--params", "1B", "--dp", "4", "--precision", "bf16", "--zero", "2", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []plan.PrecisionRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("%v: %s", err, out)
	}
	// 4 (fp32 weights) + 2 (bf16 copy) + 4/4 (gradients) + 8/4 (AdamW).
	if r := rows[0]; r.Total != 9 || r.DeviceBytes != 9e9 || r.Paper != 5.5 {
		t.Errorf("row %+v, want 9 bytes per parameter, 9 GB, the paper's 5.5", r)
	}
	out, err = runPlan(t, "memory", "--params", "1B", "--dp", "4", "--precision", "all")
	if err != nil || strings.Count(out, "\n") != 14 {
		t.Errorf("all precisions: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"memory", "--params", "1B", "--precision", "bf16"},
		{"memory", "--params", "1B", "--dp", "4", "--precision", "fp8"},
		{"memory", "--params", "1B", "--dp", "4", "--precision", "bf16", "--k", "12"},
		{"memory", "--params", "1B", "--dp", "4", "--precision", "bf16", "--optimizer", "lion"},
	} {
		if _, err := runPlan(t, args...); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

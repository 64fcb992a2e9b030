package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/e2e/e2etest"
	"github.com/troupe-ml/troupe/internal/wait"
)

// troupe train --metrics-addr serves Prometheus metrics while it trains:
// /readyz answers, the step and checkpoint counters move between scrapes
// (and the collective latency histogram, by kind and rank), the
// exposition passes promtool's lint, and an interrupt stops the run and
// the server. The flight recorders of both ranks are dumped on SIGUSR1
// into --dump-dir, and troupe debug dump fetches them from
// /debug/flight.
func TestTrainServesPrometheusMetrics(t *testing.T) {
	addr := e2etest.FreePort(t)
	dumps := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e2etest.Bin, "train", "--model", "mlp", "--layers", "784,64,10", "--data", "synthetic-mlp",
		"--steps", "1000000", "--threads", "1", "--dp", "2", "--metrics-addr", addr, "--ckpt-dir", filepath.Join(t.TempDir(), "ckpt"),
		"--ckpt-every", "50", "--dump-dir", dumps, "--log-format", "json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	url := "http://" + addr
	first := e2etest.WaitMetrics(t, url+"/metrics", func(b string) bool { return e2etest.Sample(b, "troupe_steps_total") >= 10 })
	later := e2etest.WaitMetrics(t, url+"/metrics", func(b string) bool {
		return e2etest.Sample(b, "troupe_steps_total") > e2etest.Sample(first, "troupe_steps_total") && e2etest.Sample(b, "troupe_checkpoints_total") >= 1
	})
	for _, name := range []string{"troupe_samples_total", "troupe_step_duration_seconds_count", `troupe_collective_sent_bytes_total{kind="all_reduce"}`,
		`troupe_collective_duration_seconds_count{kind="all_reduce",rank="0"}`, `troupe_collective_duration_seconds_count{kind="all_reduce",rank="1"}`} {
		if !(e2etest.Sample(later, name) > e2etest.Sample(first, name)) {
			t.Errorf("%s did not grow between scrapes: %v then %v", name, e2etest.Sample(first, name), e2etest.Sample(later, name))
		}
	}
	if v := e2etest.Sample(later, "troupe_world_size"); v != 2 {
		t.Errorf("troupe_world_size %v, want 2", v)
	}
	if code, _ := e2etest.Scrape(url + "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz while training: %d", code)
	}
	if v := e2etest.Sample(later, `troupe_rank_compute_seconds{rank="1"}`); !(v > 0) {
		t.Errorf("troupe_rank_compute_seconds of rank 1: %v", v)
	}
	e2etest.PromtoolCheck(t, later)

	// SIGUSR1: both ranks' recorders in a new directory under --dump-dir.
	cmd.Process.Signal(syscall.SIGUSR1)
	var files []string
	wait.Until(30*time.Second, func() bool {
		files, _ = filepath.Glob(filepath.Join(dumps, "*", "rank-*.json"))
		return len(files) >= 2
	})
	if len(files) != 2 {
		t.Fatalf("dumps after SIGUSR1: %v, want rank-0.json and rank-1.json", files)
	}
	out, err := exec.Command(e2etest.Bin, "explain", "hang", filepath.Dir(files[0])).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "dumps from ranks [0 1]") || !strings.Contains(string(out), "AllReduce") {
		t.Errorf("troupe explain hang of the SIGUSR1 dumps: %v\n%s", err, out)
	}
	// troupe debug dump: the same from /debug/flight, aligned as JSON.
	fetched := t.TempDir()
	dbg := exec.Command(e2etest.Bin, "debug", "dump", addr, "-o", fetched, "--json")
	dbg.Stderr = io.Discard
	b, err := dbg.Output()
	if err != nil {
		t.Fatalf("troupe debug dump: %v", err)
	}
	var a struct {
		Dumped []int `json:"dumped"`
		Groups []struct {
			Ops []struct {
				Kind string `json:"kind"`
			} `json:"ops"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(b, &a); err != nil || len(a.Dumped) != 2 || len(a.Groups) == 0 {
		t.Errorf("troupe debug dump --json: %v\n%s", err, b)
	}
	if got, _ := filepath.Glob(filepath.Join(fetched, "*", "rank-*.json")); len(got) != 2 {
		t.Errorf("troupe debug dump wrote %v, want two ranks' dumps", got)
	}
	cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err == nil {
		t.Log("interrupted run exited 0")
	}
	if code, _ := e2etest.Scrape(url + "/healthz"); code != 0 {
		t.Errorf("the metrics server still answers after the run ended (%d)", code)
	}
}

// A slow worker process (TROUPE_TEST_STRAGGLER: rank 1 computes 150 ms
// longer every step) is named as the straggler of a --procs 2 run, in
// its warnings and its metrics lines: in 4 of the 6 steps at least, since
// the other rank's own time varies with the machine's load.
func TestProcsStragglerIsNamed(t *testing.T) {
	metrics := filepath.Join(t.TempDir(), "m.jsonl")
	cmd := exec.Command(e2etest.Bin, "train", "--model", "mlp", "--layers", "784,64,10", "--data", "synthetic-mlp", "--steps", "6",
		"--threads", "1", "--procs", "2", "--straggler-threshold", "75ms", "--metrics-out", metrics, "--log-format", "json")
	cmd.Env = append(os.Environ(), "TROUPE_TEST_STRAGGLER=1:150ms")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if n := len(regexp.MustCompile(`"msg":"straggler".*"rank":"rank 1"`).FindAll(out, -1)); n < 4 {
		t.Errorf("%d straggler warnings naming rank 1 in 6 steps:\n%s", n, out)
	}
	named := 0
	for _, r := range e2etest.Field(t, e2etest.ReadFile(t, metrics), "straggler_rank") {
		if r == 1 {
			named++
		}
	}
	if named < 4 {
		t.Errorf("straggler_rank is 1 in %d of 6 metrics lines", named)
	}
}

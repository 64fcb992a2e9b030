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
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// scrape reads url's body (an empty string while nothing answers).
func scrape(url string) (int, string) {
	res, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// sample is the value of the first sample of name (with its labels, if
// any) in a Prometheus text exposition, or -1.
func sample(body, name string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[2], 64)
	if err != nil {
		return -1
	}
	return v
}

// waitMetrics scrapes url until ok accepts the body, for up to a minute.
func waitMetrics(t *testing.T, url string, ok func(string) bool) string {
	t.Helper()
	var body string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if code, b := scrape(url); code == http.StatusOK {
			if body = b; ok(b) {
				return b
			}
		}
	}
	t.Fatalf("%s never showed what was waited for; last scrape:\n%s", url, body)
	return ""
}

// promtoolCheck runs promtool check metrics on a scrape when the machine
// has it (.ci/run installs Debian's prometheus package).
func promtoolCheck(t *testing.T, body string) {
	t.Helper()
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Log("promtool not installed: the exposition's lint is skipped (apt-get install prometheus)")
		return
	}
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// troupe train --metrics-addr serves Prometheus metrics while it trains:
// /readyz answers, the step and checkpoint counters move between scrapes
// (and the collective latency histogram, by kind and rank), the
// exposition passes promtool's lint, and an interrupt stops the run and
// the server. The flight recorders of both ranks are dumped on SIGUSR1
// into --dump-dir, and troupe debug dump fetches them from
// /debug/flight.
func TestTrainServesPrometheusMetrics(t *testing.T) {
	addr := freePort(t)
	dumps := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, troupeBin, "train", "--model", "mlp", "--layers", "784,64,10", "--data", "synthetic-mlp",
		"--steps", "1000000", "--threads", "1", "--dp", "2", "--metrics-addr", addr, "--ckpt-dir", filepath.Join(t.TempDir(), "ckpt"),
		"--ckpt-every", "50", "--dump-dir", dumps, "--log-format", "json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	url := "http://" + addr
	first := waitMetrics(t, url+"/metrics", func(b string) bool { return sample(b, "troupe_steps_total") >= 10 })
	later := waitMetrics(t, url+"/metrics", func(b string) bool {
		return sample(b, "troupe_steps_total") > sample(first, "troupe_steps_total") && sample(b, "troupe_checkpoints_total") >= 1
	})
	for _, name := range []string{"troupe_samples_total", "troupe_step_duration_seconds_count", `troupe_collective_sent_bytes_total{kind="all_reduce"}`,
		`troupe_collective_duration_seconds_count{kind="all_reduce",rank="0"}`, `troupe_collective_duration_seconds_count{kind="all_reduce",rank="1"}`} {
		if !(sample(later, name) > sample(first, name)) {
			t.Errorf("%s did not grow between scrapes: %v then %v", name, sample(first, name), sample(later, name))
		}
	}
	if v := sample(later, "troupe_world_size"); v != 2 {
		t.Errorf("troupe_world_size %v, want 2", v)
	}
	if code, _ := scrape(url + "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz while training: %d", code)
	}
	if v := sample(later, `troupe_rank_compute_seconds{rank="1"}`); !(v > 0) {
		t.Errorf("troupe_rank_compute_seconds of rank 1: %v", v)
	}
	promtoolCheck(t, later)

	// SIGUSR1: both ranks' recorders in a new directory under --dump-dir.
	cmd.Process.Signal(syscall.SIGUSR1)
	var files []string
	for deadline := time.Now().Add(30 * time.Second); len(files) < 2 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		files, _ = filepath.Glob(filepath.Join(dumps, "*", "rank-*.json"))
	}
	if len(files) != 2 {
		t.Fatalf("dumps after SIGUSR1: %v, want rank-0.json and rank-1.json", files)
	}
	out, err := exec.Command(troupeBin, "explain", "hang", filepath.Dir(files[0])).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "dumps from ranks [0 1]") || !strings.Contains(string(out), "AllReduce") {
		t.Errorf("troupe explain hang of the SIGUSR1 dumps: %v\n%s", err, out)
	}
	// troupe debug dump: the same from /debug/flight, aligned as JSON.
	fetched := t.TempDir()
	dbg := exec.Command(troupeBin, "debug", "dump", addr, "-o", fetched, "--json")
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
	if code, _ := scrape(url + "/healthz"); code != 0 {
		t.Errorf("the metrics server still answers after the run ended (%d)", code)
	}
}

// Every agent serves the job's metrics under its node label: its world
// (the generation, two members), the steps, the collective latencies of
// both ranks, /readyz once it holds a place, and its own rank's flight
// recorder on /debug/flight; troupe debug dump aligns the two agents'.
func TestAgentServesPrometheusMetrics(t *testing.T) {
	c := newCluster(t, 2, 2)
	c.extra = []string{"--steps", "1000000"}
	addrs := []string{freePort(t), freePort(t)}
	for i, a := range addrs {
		c.startWith(i, "--metrics-addr", a)
	}
	c.waitWorld(2, 0)
	for i, a := range addrs {
		body := waitMetrics(t, "http://"+a+"/metrics", func(b string) bool { return sample(b, "troupe_steps_total") >= 5 })
		if !strings.Contains(body, `troupe_world_size{node="n`+strconv.Itoa(i+1)+`"} 2`) || sample(body, "troupe_generation") < 1 {
			t.Errorf("agent n%d's metrics lack its world:\n%s", i+1, body)
		}
		if code, _ := scrape("http://" + a + "/readyz"); code != http.StatusOK {
			t.Errorf("agent n%d /readyz: %d", i+1, code)
		}
		for r := range 2 {
			name := `troupe_collective_duration_seconds_count{kind="all_reduce",node="n` + strconv.Itoa(i+1) + `",rank="` + strconv.Itoa(r) + `"}`
			if !(sample(body, name) > 0) {
				t.Errorf("agent n%d: no %s", i+1, name)
			}
		}
		promtoolCheck(t, body)
		var fr struct {
			Dumps []struct {
				Rank int               `json:"rank"`
				Ops  []json.RawMessage `json:"ops"`
			} `json:"dumps"`
		}
		if _, b := scrape("http://" + a + "/debug/flight"); json.Unmarshal([]byte(b), &fr) != nil || len(fr.Dumps) != 1 || len(fr.Dumps[0].Ops) == 0 {
			t.Errorf("agent n%d /debug/flight: %s", i+1, b)
		}
	}
	out, err := exec.Command(troupeBin, "debug", "dump", addrs[0], addrs[1], "-o", t.TempDir()).Output()
	if err != nil || !strings.Contains(string(out), "dumps from ranks [0 1]") {
		t.Errorf("troupe debug dump of both agents: %v\n%s", err, out)
	}
	for _, a := range c.agents {
		a.cmd.Process.Signal(syscall.SIGTERM)
	}
}

// A slow worker process (TROUPE_TEST_STRAGGLER: rank 1 computes 150 ms
// longer every step) is named as the straggler of a --procs 2 run, in
// its warnings and its metrics lines: in 4 of the 6 steps at least, since
// the other rank's own time varies with the machine's load.
func TestProcsStragglerIsNamed(t *testing.T) {
	metrics := filepath.Join(t.TempDir(), "m.jsonl")
	cmd := exec.Command(troupeBin, "train", "--model", "mlp", "--layers", "784,64,10", "--data", "synthetic-mlp", "--steps", "6",
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
	for _, r := range losses(t, readFile(t, metrics), "straggler_rank") {
		if r == 1 {
			named++
		}
	}
	if named < 4 {
		t.Errorf("straggler_rank is 1 in %d of 6 metrics lines", named)
	}
}

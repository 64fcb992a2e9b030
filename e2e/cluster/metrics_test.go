//go:build long

package cluster

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// Every agent serves the job's metrics under its node label: its world
// (the generation, two members), the steps, the collective latencies of
// both ranks, /readyz once it holds a place, and its own rank's flight
// recorder on /debug/flight; troupe debug dump aligns the two agents'.
func TestAgentServesPrometheusMetrics(t *testing.T) {
	c := newCluster(t, 2, 2)
	c.extra = []string{"--steps", "1000000"}
	addrs := []string{e2etest.FreePort(t), e2etest.FreePort(t)}
	for i, a := range addrs {
		c.startWith(i, "--metrics-addr", a)
	}
	c.waitWorld(2, 0)
	for i, a := range addrs {
		body := e2etest.WaitMetrics(t, "http://"+a+"/metrics", func(b string) bool { return e2etest.Sample(b, "troupe_steps_total") >= 5 })
		if !strings.Contains(body, `troupe_world_size{node="n`+strconv.Itoa(i+1)+`"} 2`) || e2etest.Sample(body, "troupe_generation") < 1 {
			t.Errorf("agent n%d's metrics lack its world:\n%s", i+1, body)
		}
		if code, _ := e2etest.Scrape("http://" + a + "/readyz"); code != http.StatusOK {
			t.Errorf("agent n%d /readyz: %d", i+1, code)
		}
		for r := range 2 {
			name := `troupe_collective_duration_seconds_count{kind="all_reduce",node="n` + strconv.Itoa(i+1) + `",rank="` + strconv.Itoa(r) + `"}`
			if !(e2etest.Sample(body, name) > 0) {
				t.Errorf("agent n%d: no %s", i+1, name)
			}
		}
		e2etest.PromtoolCheck(t, body)
		var fr struct {
			Dumps []struct {
				Rank int               `json:"rank"`
				Ops  []json.RawMessage `json:"ops"`
			} `json:"dumps"`
		}
		if _, b := e2etest.Scrape("http://" + a + "/debug/flight"); json.Unmarshal([]byte(b), &fr) != nil || len(fr.Dumps) != 1 || len(fr.Dumps[0].Ops) == 0 {
			t.Errorf("agent n%d /debug/flight: %s", i+1, b)
		}
	}
	out, err := exec.Command(e2etest.Bin, "debug", "dump", addrs[0], addrs[1], "-o", t.TempDir()).Output()
	if err != nil || !strings.Contains(string(out), "dumps from ranks [0 1]") {
		t.Errorf("troupe debug dump of both agents: %v\n%s", err, out)
	}
	for _, a := range c.agents {
		a.cmd.Process.Signal(syscall.SIGTERM)
	}
}

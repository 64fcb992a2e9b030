package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/e2e/e2etest"
	"github.com/troupe-ml/troupe/internal/wait"
)

// buildExample builds one of examples/ into the test's temporary directory.
func buildExample(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	out, err := exec.Command("go", "build", "-o", bin, "../examples/"+name).CombinedOutput()
	if err != nil {
		t.Fatalf("building examples/%s: %v\n%s", name, err, out)
	}
	return bin
}

type serviceStatus struct {
	State string `json:"state"`
	World *struct {
		Generation uint64   `json:"generation"`
		Members    []string `json:"members"`
	} `json:"world"`
	Step    int `json:"step"`
	Summary *struct {
		Step     int    `json:"step"`
		Checksum string `json:"checksum"`
		Left     bool   `json:"left"`
	} `json:"summary"`
}

func getStatus(addr string) (serviceStatus, error) {
	var st serviceStatus
	resp, err := http.Get("http://" + addr + "/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// A Go HTTP service embeds an elastic agent (examples/elastic-service):
// three services form a job, report its membership and progress over
// HTTP, one leaves gracefully on SIGTERM, and the two others finish the
// job with bit-identical replicas.
func TestElasticAgentEmbeddedInAService(t *testing.T) {
	bin := buildExample(t, "elastic-service")
	const steps = 1500
	gossip := []string{e2etest.FreePort(t), e2etest.FreePort(t), e2etest.FreePort(t)}
	type node struct {
		cmd    *exec.Cmd
		http   string
		stdout bytes.Buffer
		stderr bytes.Buffer
		done   chan error
	}
	nodes := make([]*node, 3)
	for i := range nodes {
		n := &node{http: e2etest.FreePort(t), done: make(chan error, 1)}
		n.cmd = exec.Command(bin, "--name", fmt.Sprintf("n%d", i+1), "--listen", gossip[i], "--http", n.http,
			"--join", strings.Join(gossip, ","), "--min-nodes", "2", "--steps", fmt.Sprint(steps))
		n.cmd.Stdout, n.cmd.Stderr = &n.stdout, &n.stderr
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { n.done <- n.cmd.Wait() }()
		nodes[i] = n
		t.Cleanup(func() { n.cmd.Process.Kill() })
	}
	// Every service reports the world of three and steps going by.
	if !wait.Until(90*time.Second, func() bool {
		ready := 0
		for _, n := range nodes {
			if st, err := getStatus(n.http); err == nil && st.World != nil && len(st.World.Members) == 3 && st.Step > 50 {
				ready++
			}
		}
		return ready == 3
	}) {
		t.Fatalf("the services did not report a world of three training\n%s", nodes[0].stderr.String())
	}
	nodes[2].cmd.Process.Signal(syscall.SIGTERM)
	var sums []serviceStatus
	for i, n := range nodes {
		select {
		case err := <-n.done:
			if err != nil {
				t.Fatalf("n%d: %v\n%s", i+1, err, n.stderr.String())
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("n%d still runs", i+1)
		}
		var st serviceStatus
		if err := json.Unmarshal(n.stdout.Bytes(), &st); err != nil || st.Summary == nil {
			t.Fatalf("n%d printed %q: %v", i+1, n.stdout.String(), err)
		}
		sums = append(sums, st)
	}
	if sums[2].State != "left" || !sums[2].Summary.Left {
		t.Errorf("n3 after SIGTERM: %+v", sums[2])
	}
	for i, st := range sums[:2] {
		if st.State != "finished" || st.Summary.Step != steps || st.Step != steps {
			t.Errorf("n%d: state %s, step %d (summary %d); want finished at %d", i+1, st.State, st.Step, st.Summary.Step, steps)
		}
		if len(st.World.Members) != 2 {
			t.Errorf("n%d's last world: %v; want the two that stayed", i+1, st.World.Members)
		}
	}
	if sums[0].Summary.Checksum != sums[1].Summary.Checksum {
		t.Errorf("the replicas differ: %s, %s", sums[0].Summary.Checksum, sums[1].Summary.Checksum)
	}
}

// A Go HTTP service embedding Run (examples/service) keeps the weights it
// trained when stopped: POST /stop ends training at a step boundary, and
// /progress says where the weights of which step are.
func TestServiceKeepsItsWeightsWhenStopped(t *testing.T) {
	bin := buildExample(t, "service")
	addr := e2etest.FreePort(t)
	save := filepath.Join(t.TempDir(), "w.safetensors")
	cmd := exec.Command(bin, "--addr", addr, "--dp", "2", "--steps", "300", "--save", save)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	type progress struct {
		State     string `json:"state"`
		Step      int    `json:"step"`
		Saved     string `json:"saved"`
		SavedStep int    `json:"saved_step"`
	}
	get := func() (progress, error) {
		var p progress
		resp, err := http.Get("http://" + addr + "/progress")
		if err != nil {
			return p, err
		}
		defer resp.Body.Close()
		return p, json.NewDecoder(resp.Body).Decode(&p)
	}
	if !wait.Until(2*time.Minute, func() bool {
		p, err := get()
		return err == nil && p.Step >= 3
	}) {
		t.Fatalf("no step reported\n%s", stderr.String())
	}
	resp, err := http.Post("http://"+addr+"/stop", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var p progress
	if !wait.Until(time.Minute, func() bool {
		p, err = get()
		return err == nil && p.State != "training"
	}) {
		t.Fatalf("still training after /stop\n%s", stderr.String())
	}
	// The step in flight when the stop came may have completed on every
	// worker without being reported: the weights are then of that step.
	if p.State != "stopped" || p.Saved != save || p.SavedStep < p.Step || p.SavedStep > p.Step+1 {
		t.Fatalf("after /stop: %+v; want stopped with the weights of the last step trained in %s", p, save)
	}
	f := e2etest.ReadFile(t, save)
	if !strings.Contains(f, fmt.Sprintf(`"step":"%d"`, p.SavedStep)) {
		t.Errorf("%s does not say it holds step %d", save, p.SavedStep)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := <-done; err != nil {
		t.Fatalf("the service after SIGTERM: %v\n%s", err, stderr.String())
	}
	t.Logf("stopped at step %d; weights of step %d in %s", p.Step, p.SavedStep, p.Saved)
}

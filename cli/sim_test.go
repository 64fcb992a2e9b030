package cli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimJSON runs a few seeds and reads the summary: every seed counted,
// faults injected, none broken.
func TestSimJSON(t *testing.T) {
	out, err := runRoot(t, "sim", "--seeds", "20", "--from", "7", "--seed", "0", "--trace", "", "--json")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var s simSummary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if s.Seeds != 20 || s.From != 7 || s.Faults == 0 || s.Violations != 0 || s.VirtualS <= 0 || len(s.Failures) != 0 {
		t.Fatalf("summary %+v", s)
	}
}

// TestSimTraceReplays: --seed S --trace FILE writes the same trace twice.
func TestSimTraceReplays(t *testing.T) {
	dir := t.TempDir()
	var traces []string
	for i := range 2 {
		p := filepath.Join(dir, "t"+string(rune('a'+i)))
		if out, err := runRoot(t, "sim", "--seed", "90", "--trace", p); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		traces = append(traces, string(b))
	}
	if traces[0] != traces[1] || !strings.Contains(traces[0], "FAULT") || !strings.Contains(traces[0], "finishes") {
		t.Fatalf("traces differ or hold no faults (%d and %d bytes)", len(traces[0]), len(traces[1]))
	}
}

// TestSimUsage: bad flags are usage errors naming what was wrong.
func TestSimUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--seed", "0", "--trace", "x"}, "--trace needs --seed"},
		{[]string{"--seed", "0", "--trace", "", "--nodes", "0"}, "nodes 0"},
		{[]string{"--seed", "0", "--trace", "", "--nodes", "3", "--faults", "-2"}, "fault rate"},
		{[]string{"--seed", "0", "--trace", "", "--faults", "0.5", "--seeds", "0"}, "--seeds 0"},
	} {
		_, err := runRoot(t, append([]string{"sim"}, c.args...)...)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want a usage error naming %q", c.args, err, c.want)
		}
	}
	// leave the flags as the other tests expect them
	if _, err := runRoot(t, "sim", "--seeds", "1", "--nodes", "3", "--faults", "0.5", "--seed", "0", "--trace", ""); err != nil {
		t.Fatal(err)
	}
}

// TestSimParts runs seeds of a two-stage pipeline and of two
// tensor-parallel shards, each with two replicas: faults injected, every
// seed counted, none broken; a layout the model cannot take is a usage
// error.
func TestSimParts(t *testing.T) {
	t.Cleanup(func() { simFlags.pp, simFlags.tp, simFlags.nodes = 1, 1, 3 })
	for _, layout := range [][]string{{"--pp", "2", "--tp", "1"}, {"--pp", "1", "--tp", "2"}} {
		args := append([]string{"sim", "--seeds", "20", "--from", "1", "--seed", "0", "--trace", "", "--nodes", "4", "--json"}, layout...)
		out, err := runRoot(t, args...)
		if err != nil {
			t.Fatalf("%v: %v: %s", layout, err, out)
		}
		var s simSummary
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("%v in %s", err, out)
		}
		if s.Seeds != 20 || s.Faults == 0 || s.Violations != 0 || s.Finished == 0 {
			t.Fatalf("%v: summary %+v", layout, s)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--pp", "3", "--tp", "1"}, "pp 3"},
		{[]string{"--pp", "1", "--tp", "3"}, "tp 3"},
		{[]string{"--pp", "2", "--tp", "2", "--nodes", "3"}, "nodes 3"},
	} {
		_, err := runRoot(t, append([]string{"sim", "--seed", "0", "--trace", "", "--seeds", "1"}, c.args...)...)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a usage error naming %q", c.args, err, c.want)
		}
	}
}

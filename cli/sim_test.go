package cli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/troupe-ml/troupe/internal/simbug"
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

// TestSimReplayNamesTheJob: the replay command printed with a violation
// names every job flag the sweep set to another value than its default
// (not the sweep's own flags), so that it replays the same job; and the
// list of job flags covers every flag of troupe sim that is not about
// which seeds run or how they are reported.
func TestSimReplayNamesTheJob(t *testing.T) {
	fresh := func() *pflag.FlagSet {
		fs := pflag.NewFlagSet("sim", pflag.ContinueOnError)
		simCmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
			fs.String(f.Name, f.DefValue, f.Usage)
			fs.Lookup(f.Name).NoOptDefVal = f.NoOptDefVal // --json takes no value
		})
		return fs
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "troupe sim --seed 1342 --trace seed1342.txt"},
		{[]string{"--zero", "1", "--seeds", "2000"}, "troupe sim --zero 1 --seed 1342 --trace seed1342.txt"},
		{[]string{"--seeds", "2000", "--from", "9", "--json", "--zero", "2", "--nodes", "4", "--faults", "0.5"},
			"troupe sim --nodes 4 --zero 2 --seed 1342 --trace seed1342.txt"},
		{[]string{"--nodes", "5", "--faults", "1", "--pp", "2", "--tp", "2", "--zero-group", "3", "--steps", "40", "--ckpt-every", "0"},
			"troupe sim --nodes 5 --pp 2 --tp 2 --zero-group 3 --faults 1 --steps 40 --ckpt-every 0 --seed 1342 --trace seed1342.txt"},
	} {
		fs := fresh()
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if got := simReplay(fs, 1342); got != c.want {
			t.Errorf("%v: replay %q, want %q", c.args, got, c.want)
		}
	}
	notJob := map[string]bool{"seeds": true, "from": true, "seed": true, "trace": true, "json": true, "help": true}
	// (The root command's persistent flags, logging and profiling, shape
	// no job.)
	simCmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if !notJob[f.Name] && !slices.Contains(simJobFlags, f.Name) {
			t.Errorf("flag --%s is not in simJobFlags: a replay would run another job", f.Name)
		}
	})
}

// TestSimViolationPrintsItsJob: a sweep of the ZeRO-1 job over four nodes
// with a planted bug (a slot formed from a holder of another slot; seed 1
// breaks an invariant with it, later seeds may crash the simulated worker)
// prints a replay command with the sweep's job flags, which replays the
// violation.
func TestSimViolationPrintsItsJob(t *testing.T) {
	simbug.AnyRoot = true
	t.Cleanup(func() {
		simbug.AnyRoot = false
		simFlags.zero, simFlags.nodes, simFlags.seed, simFlags.trace = 0, 3, 0, ""
	})
	out, err := runRoot(t, "sim", "--zero", "1", "--nodes", "4", "--seeds", "1", "--from", "1", "--seed", "0", "--trace", "", "--json=false")
	if !errors.Is(err, errViolations) {
		t.Fatalf("error %v, want violations: %s", err, out)
	}
	i := strings.Index(out, "(replay: troupe sim --nodes 4 --zero 1 --seed ")
	if i < 0 {
		t.Fatalf("no replay command with the job's flags in %s", out)
	}
	replay := strings.Fields(strings.TrimSuffix(strings.SplitN(out[i+len("(replay: "):], "\n", 2)[0], ")"))
	dir := t.TempDir()
	replay[len(replay)-1] = filepath.Join(dir, replay[len(replay)-1])
	if out, err := runRoot(t, replay[1:]...); !errors.Is(err, errViolations) {
		t.Fatalf("%v: error %v, want the violation again: %s", replay, err, out)
	}
}

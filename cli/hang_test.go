package cli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/collective"
)

// writeDumps writes a two-rank hang by hand: rank 0 entered op 1 of the
// world group and failed blaming rank 1, whose record ends at op 0.
func writeDumps(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	g := []collective.FlightGroup{{ID: 0, Members: []int{0, 1}}}
	done := collective.FlightOp{Seq: 0, Kind: "AllReduce", Bytes: 64, State: collective.FlightDone, Culprit: -1}
	failed := collective.FlightOp{Seq: 1, Op: 1, Kind: "AllReduce", Bytes: 64, State: collective.FlightFailed, Err: "timeout", Culprit: 1}
	for _, d := range []collective.FlightDump{
		{Rank: 0, Size: 2, Groups: g, Ops: []collective.FlightOp{done, failed}},
		{Rank: 1, Size: 2, Groups: g, Ops: []collective.FlightOp{done}},
	} {
		b, _ := json.Marshal(d)
		if err := os.WriteFile(filepath.Join(dir, "rank-"+string(rune('0'+d.Rank))+".json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestExplainHang(t *testing.T) {
	dir := writeDumps(t)
	out, err := runExplainCmd(t, "hang", dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "verdict: rank 1 did not enter AllReduce") || !strings.Contains(out, "not entered") {
		t.Errorf("explain hang:\n%s", out)
	}
	out, err = runExplainCmd(t, "hang", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var a collective.Alignment
	if err := json.Unmarshal([]byte(out), &a); err != nil || a.Verdict == nil || a.Verdict.Rank != 1 || a.Verdict.Op != 1 {
		t.Errorf("explain hang --json: %v\n%s", err, out)
	}
}

// A directory without dumps, or with a file that is not one, is an error
// naming it.
func TestExplainHangRejects(t *testing.T) {
	if _, err := runExplainCmd(t, "hang", filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("a missing directory explained")
	}
	if _, err := runExplainCmd(t, "hang", t.TempDir()); !errors.Is(err, collective.ErrBadDump) {
		t.Errorf("an empty directory: %v, want ErrBadDump", err)
	}
	dir := writeDumps(t)
	bad := filepath.Join(dir, "rank-1.json")
	os.WriteFile(bad, []byte(`{"rank": 1, "size": 2, "ops": [{"kind": "Gossip"}]}`), 0o644)
	if _, err := runExplainCmd(t, "hang", dir); !errors.Is(err, collective.ErrBadDump) || !strings.Contains(err.Error(), bad) {
		t.Errorf("a bad dump: %v, want ErrBadDump naming %s", err, bad)
	}
}

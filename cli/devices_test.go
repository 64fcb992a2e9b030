package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestDevicesTable: the CPU is always listed, as cpu:0 with host memory.
func TestDevicesTable(t *testing.T) {
	out, err := execute(newDevicesCmd())
	if err != nil {
		t.Fatalf("devices: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "DEVICE") {
		t.Fatalf("want a header and a row per device:\n%s", out)
	}
	if !strings.HasPrefix(lines[1], "cpu:0 ") || !strings.Contains(lines[1], " host ") {
		t.Errorf("first row is not the CPU with host memory: %q", lines[1])
	}
}

// TestDevicesJSON: one JSON object naming the registered backends and the
// devices.
func TestDevicesJSON(t *testing.T) {
	out, err := execute(newDevicesCmd(), "--json")
	if err != nil {
		t.Fatalf("devices --json: %v\n%s", err, out)
	}
	var rep struct {
		Backends []string `json:"backends"`
		Devices  []struct {
			Backend string `json:"backend"`
			Index   int    `json:"index"`
			Name    string `json:"name"`
		} `json:"devices"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	if len(rep.Backends) == 0 || rep.Backends[0] != "cpu" && !strings.Contains(strings.Join(rep.Backends, ","), "cpu") {
		t.Errorf("backends %v lack cpu", rep.Backends)
	}
	if len(rep.Devices) == 0 || rep.Devices[0].Backend != "cpu" || rep.Devices[0].Name == "" {
		t.Errorf("devices %+v: want the CPU first, named", rep.Devices)
	}
	if _, err := execute(newDevicesCmd(), "extra"); err == nil {
		t.Error("devices with an argument did not fail")
	}
}

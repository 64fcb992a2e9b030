package cli

import (
	"errors"
	"testing"
)

func TestParseBenchWorld(t *testing.T) {
	for in, want := range map[string]benchWorld{
		"dp1": {1, 1, 0, -1}, "dp2": {2, 1, 0, -1}, "tp2": {1, 2, 0, -1}, "procs2": {1, 1, 2, -1},
		"dp2xtp2": {2, 2, 0, -1}, "procs4xtp2": {1, 2, 4, -1}, "tp2xdp3": {3, 2, 0, -1},
		"dp4xzero3": {4, 1, 0, 3}, "procs2xzero0": {1, 1, 2, 0},
	} {
		got, err := parseWorld(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "dp0", "tp", "dp2xdp2", "xp2", "dp2x", "procs-1", "dp2xzero4", "zero-1", "dp2xzero1xzero2"} {
		if _, err := parseWorld(in); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", in, err)
		}
	}
}

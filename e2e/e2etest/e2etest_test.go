package e2etest

import "testing"

// FreePort never hands out an address twice, however the kernel reuses
// closed ports.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[string]bool{}
	for range 300 {
		a := FreePort(t)
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
	}
}

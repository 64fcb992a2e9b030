package cpu

import (
	"bufio"
	"os"
	"strings"
)

// cpuName reads the processor model from /proc/cpuinfo, or "cpu".
func cpuName() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "cpu"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "cpu"
}

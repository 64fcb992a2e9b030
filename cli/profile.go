package cli

import (
	"fmt"
	"os"
	"runtime/pprof"
)

var (
	cpuProfile  string
	profileFile *os.File
)

// startProfile starts the --cpuprofile CPU profile.
func startProfile() error {
	if cpuProfile == "" {
		return nil
	}
	f, err := os.Create(cpuProfile)
	if err != nil {
		return fmt.Errorf("%w: --cpuprofile: %v", errUsage, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	profileFile = f
	return nil
}

func stopProfile() {
	if profileFile != nil {
		pprof.StopCPUProfile()
		profileFile.Close()
	}
}

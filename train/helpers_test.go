package train

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/kernels"
)

func openForTest(t *testing.T, cfg *Config) (kernels.Backend, data.Dataset, data.Dataset) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tr, te, err := OpenData(cfg)
	if err != nil {
		t.Fatal(err)
	}
	be, err := kernels.Open("cpu", kernels.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	return be, tr, te
}

// readTrace returns the thread names of a Chrome trace-event file.
func readTrace(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		TraceEvents []struct {
			Ph   string         `json:"ph"`
			Name string         `json:"name"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	names := map[string]bool{}
	for _, e := range f.TraceEvents {
		if e.Ph == "M" && e.Name == "thread_name" {
			if n, ok := e.Args["name"].(string); ok {
				names[n] = true
			}
		}
	}
	return names
}

// mlpDefaults is DefaultConfigFor("mlp").
func mlpDefaults() Config {
	c, err := DefaultConfigFor("mlp")
	if err != nil {
		panic(err)
	}
	return c
}

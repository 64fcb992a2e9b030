package train

import (
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

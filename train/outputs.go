package train

import "github.com/troupe-ml/troupe/internal/probe"

// probeOutputs refuses, before the first step, an output of the run that
// cannot be written: the weights, the metrics file, the trace, the
// checkpoint and dump directories (made when missing, as the run would).
// The error names the field; nothing is written but a probe file that is
// removed at once.
func (c *Config) probeOutputs() error {
	for _, o := range []struct {
		field, path string
		dir         bool
	}{
		{"Save", c.Save, false},
		{"MetricsOut", c.MetricsOut, false},
		{"Trace", c.Trace, false},
		{"CkptDir", c.CkptDir, true},
		{"DumpDir", c.DumpDir, true},
	} {
		if o.path == "" {
			continue
		}
		check := probe.File
		if o.dir {
			check = probe.Dir
		}
		if err := check(o.path); err != nil {
			return outputErr(o.field, o.path, err)
		}
	}
	return nil
}

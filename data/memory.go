package data

import (
	"fmt"
	"math"
)

// Rows are samples a program holds in memory: N feature rows and, for
// each, a class id (Labels, with Classes) or a vector of real-valued
// targets (Targets, with Outputs per row).
type Rows struct {
	// Name names the set in logs and summaries ("memory" when empty).
	Name string
	// Features is the width of a row; X holds N × Features values.
	Features int
	X        []float32
	// Labels are N class ids in [0, Classes) (negative: ignored).
	Labels  []int32
	Classes int
	// Targets are N × Outputs real values (regression), instead of
	// Labels.
	Targets []float32
	Outputs int
}

// InMemory makes a Dense dataset of rows. The dataset reads rows' slices
// as they are (it does not copy them): the caller must not change them
// while it is in use. Every value is checked: the shapes must agree and
// agree with one kind of targets, the values must be finite, the labels
// in range.
func InMemory(rows Rows) (Dataset, error) {
	name := rows.Name
	if name == "" {
		name = "memory"
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrFormat, name, fmt.Sprintf(format, args...))
	}
	if rows.Features <= 0 || len(rows.X) == 0 || len(rows.X)%rows.Features != 0 {
		return nil, bad("%d values of X are not rows of %d features", len(rows.X), rows.Features)
	}
	n := len(rows.X) / rows.Features
	for i, x := range rows.X {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil, bad("X[%d] (row %d) is %v", i, i/rows.Features, x)
		}
	}
	s := &denseSet{name: name, n: n, features: rows.Features, x: rows.X}
	switch {
	case rows.Labels != nil && rows.Targets != nil:
		return nil, bad("both Labels and Targets are set: give one kind of targets")
	case rows.Labels != nil:
		if len(rows.Labels) != n || rows.Classes <= 0 {
			return nil, bad("%d labels for %d rows, %d classes", len(rows.Labels), n, rows.Classes)
		}
		for i, y := range rows.Labels {
			if y >= int32(rows.Classes) {
				return nil, bad("label %d of row %d is not in [0, %d)", y, i, rows.Classes)
			}
		}
		s.y, s.classes = rows.Labels, rows.Classes
	case rows.Targets != nil:
		if rows.Outputs <= 0 || len(rows.Targets) != n*rows.Outputs {
			return nil, bad("%d targets for %d rows of %d outputs", len(rows.Targets), n, rows.Outputs)
		}
		for i, v := range rows.Targets {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, bad("target %d (row %d) is %v", i, i/rows.Outputs, v)
			}
		}
		s.v, s.outputs = rows.Targets, rows.Outputs
	default:
		return nil, bad("no targets: set Labels (classification) or Targets (regression)")
	}
	return s, nil
}

// Outputs is the number of real-valued targets per row (0: class ids).
func (s *denseSet) Outputs() int { return s.outputs }

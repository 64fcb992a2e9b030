package pipeline

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseStageLayers reads an explicit --stage-layers spec: the number of
// layers of each stage in order, comma-separated, as torchgpipe's and
// fairscale's balance=[…] lists. "3,3,2" puts layers 0-2 on stage 0, 3-5 on
// stage 1 and 6-7 on stage 2. Counts must be whole numbers ≥ 1 adding up to
// layers; when stages > 0 the spec must name exactly that many stages.
// Spaces around items are ignored.
func ParseStageLayers(spec string, layers, stages int) ([]Range, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("%w: empty spec: want layer counts per stage, e.g. 3,3,2", ErrStageLayers)
	}
	items := strings.Split(spec, ",")
	if len(items) > MaxStages {
		return nil, fmt.Errorf("%w: %d stages: at most %d", ErrStageLayers, len(items), MaxStages)
	}
	out := make([]Range, 0, len(items))
	next := 0
	for i, it := range items {
		t := strings.TrimSpace(it)
		n, err := strconv.Atoi(t)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: %q: stage %d's count %q is not a whole number ≥ 1", ErrStageLayers, spec, i, t)
		}
		if n > layers-next {
			return nil, fmt.Errorf("%w: %q: stage %d's %d layers from layer %d go past the model's %d layers",
				ErrStageLayers, spec, i, n, next, layers)
		}
		out = append(out, Range{Lo: next, Hi: next + n})
		next += n
	}
	if next != layers {
		return nil, fmt.Errorf("%w: %q covers %d layers, the model has %d", ErrStageLayers, spec, next, layers)
	}
	if stages > 0 && len(out) != stages {
		return nil, fmt.Errorf("%w: %q names %d stages, the pipeline has %d", ErrStageLayers, spec, len(out), stages)
	}
	return out, nil
}

// FormatStageLayers writes ranges as a --stage-layers spec ("3,3,2"), so
// that a computed cut can be pinned on the next run's command line.
func FormatStageLayers(ranges []Range) string {
	parts := make([]string, len(ranges))
	for i, r := range ranges {
		parts[i] = strconv.Itoa(r.Len())
	}
	return strings.Join(parts, ",")
}

package pipeline

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseStageLayers(t *testing.T) {
	got, err := ParseStageLayers(" 3, 3 ,2", 8, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []Range{{0, 3}, {3, 6}, {6, 8}}) {
		t.Fatal(got)
	}
	if FormatStageLayers(got) != "3,3,2" {
		t.Fatal(FormatStageLayers(got))
	}
	if _, err := ParseStageLayers("8", 8, 0); err != nil {
		t.Fatalf("stages 0 accepts any count: %v", err)
	}
	bad := []struct {
		spec           string
		layers, stages int
		text           string
	}{
		{"", 8, 3, "empty spec"},
		{"  ", 8, 3, "empty spec"},
		{"3,3", 8, 2, `"3,3" covers 6 layers, the model has 8`},
		{"3,3,3", 8, 3, "stage 2's 3 layers from layer 6 go past the model's 8 layers"},
		{"3,0,5", 8, 3, `stage 1's count "0" is not a whole number ≥ 1`},
		{"3,-1,6", 8, 3, `stage 1's count "-1"`},
		{"3,x,2", 8, 3, `stage 1's count "x"`},
		{"3,,5", 8, 3, `stage 1's count ""`},
		{"0-2,3-5,6-7", 8, 3, `stage 0's count "0-2"`},
		{"4,4", 8, 3, `"4,4" names 2 stages, the pipeline has 3`},
		{"9223372036854775807,1", 8, 2, "go past"},
		{"99999999999999999999", 8, 1, "not a whole number"},
	}
	for _, b := range bad {
		_, err := ParseStageLayers(b.spec, b.layers, b.stages)
		if !errors.Is(err, ErrStageLayers) || !strings.Contains(err.Error(), b.text) {
			t.Errorf("%q: %v, want mention of %q", b.spec, err, b.text)
		}
	}
}

// FuzzParseStageLayers: any text either parses into a cut that CheckRanges
// accepts and FormatStageLayers writes back equivalently, or fails with
// ErrStageLayers; it never panics.
func FuzzParseStageLayers(f *testing.F) {
	for _, s := range []string{"3,3,2", "1", "", ",", "0", "-1", "2,x", " 4 , 4 ", "9223372036854775807,9223372036854775807", "1,1,1,1,1,1,1,1"} {
		f.Add(s, 8, 0)
	}
	f.Fuzz(func(t *testing.T, spec string, layers, stages int) {
		r, err := ParseStageLayers(spec, layers, stages)
		if err != nil {
			if !errors.Is(err, ErrStageLayers) {
				t.Fatalf("%q: error without ErrStageLayers: %v", spec, err)
			}
			return
		}
		if err := CheckRanges(r, layers); err != nil {
			t.Fatalf("%q → %v: %v", spec, r, err)
		}
		if stages > 0 && len(r) != stages {
			t.Fatalf("%q: %d stages, asked for %d", spec, len(r), stages)
		}
		again, err := ParseStageLayers(FormatStageLayers(r), layers, stages)
		if err != nil || !slices.Equal(again, r) {
			t.Fatalf("%q → %v → %q → %v, %v", spec, r, FormatStageLayers(r), again, err)
		}
	})
}

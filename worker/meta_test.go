package worker

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/troupe-ml/troupe/checkpoint"
	"github.com/troupe-ml/troupe/failure"
)

// A checkpoint request whose meta does not decode is a bad wire message
// (class internal), not a bad config.
func TestShardMetaRejects(t *testing.T) {
	for _, b := range [][]byte{nil, []byte("{"), []byte(`{"step":"x"}`), []byte(`[]`)} {
		if _, err := shardMeta(b); !errors.Is(err, ErrWire) || failure.CodeOf(err) != failure.Internal {
			t.Errorf("%q: %v, want an ErrWire", b, err)
		}
	}
	want := checkpoint.Meta{Step: 4, Generation: 2, World: checkpoint.World{Size: 2, DP: 2, PP: 1}}
	b, _ := json.Marshal(want)
	if got, err := shardMeta(b); err != nil || got.Step != want.Step || got.World != want.World {
		t.Errorf("shardMeta(%s) = %+v, %v", b, got, err)
	}
}

// shardMeta takes bytes from a peer: it never panics and fails only with
// ErrWire.
func FuzzShardMeta(f *testing.F) {
	b, _ := json.Marshal(checkpoint.Meta{Step: 4, Generation: 2, World: checkpoint.World{Size: 4, DP: 2, PP: 2},
		RNG: map[string][]byte{"data": {1, 2}}, LossScaler: &checkpoint.ScalerState{Scale: 1024}, Config: json.RawMessage(`{"lr":0.1}`)})
	f.Add(b)
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := shardMeta(b); err != nil && !errors.Is(err, ErrWire) {
			t.Fatalf("%v is not an ErrWire", err)
		}
	})
}

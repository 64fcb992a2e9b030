package worker

import (
	"context"
	"errors"
	"testing"

	"github.com/troupe-ml/troupe/pipeline"
)

// Malformed asynchronous requests (a weight or gradient vector of the
// wrong length, an unknown kind, an update out of order, an asynchronous
// request to a worker that synchronises by step) are refused with the
// error naming them, and change nothing.
func TestAsyncRequestsAreChecked(t *testing.T) {
	s := mlpSetup(t)
	spec := s.spec(t, 1, 1, pipeline.Kind1F1B, false, 0)
	async := *spec
	async.Sync = Sync{Mode: SyncAsync}
	w := newWorld(t, &async, 1).workers[0]
	n := w.model.Set.Len()
	before := w.Checksum()
	for _, tc := range []struct {
		name string
		req  StepRequest
		want error
	}{
		{"short weights", StepRequest{Generation: 1, Batch: 4, Async: &AsyncStep{Kind: AsyncCompute, Weights: make([]float32, n-1)}}, ErrConfig},
		{"long gradient", StepRequest{Generation: 1, Batch: 4, Async: &AsyncStep{Kind: AsyncApply, Grads: make([]float32, n+1)}}, ErrConfig},
		{"unknown kind", StepRequest{Generation: 1, Batch: 4, Async: &AsyncStep{Kind: 9}}, ErrConfig},
		{"update out of order", StepRequest{Generation: 1, Step: 2, Batch: 4, Async: &AsyncStep{Kind: AsyncApply, Grads: make([]float32, n)}}, ErrStale},
		{"old generation", StepRequest{Generation: 7, Batch: 4, Async: &AsyncStep{Kind: AsyncApply, Grads: make([]float32, n)}}, ErrStale},
	} {
		if _, err := w.Step(context.Background(), tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if w.Checksum() != before || w.Holding().Applied != 0 {
		t.Fatalf("a refused request changed the worker (applied %d)", w.Holding().Applied)
	}
	sync := newWorld(t, spec, 1).workers[0]
	req := StepRequest{Generation: 1, Batch: 4, Async: &AsyncStep{Kind: AsyncApply, Grads: make([]float32, n)}}
	if _, err := sync.Step(context.Background(), req); !errors.Is(err, ErrConfig) {
		t.Errorf("an asynchronous update to a worker that synchronises by step: %v, want ErrConfig", err)
	}
}

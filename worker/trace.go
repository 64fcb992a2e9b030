package worker

import (
	"fmt"
	"math"

	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

func shipSpans(spans []pipeline.Span) []*workerpb.StageSpan {
	out := make([]*workerpb.StageSpan, len(spans))
	for i, sp := range spans {
		out[i] = &workerpb.StageSpan{Kind: uint32(sp.Kind), Micro: int32(sp.Micro), Peer: int32(sp.Peer), Start: sp.Start, End: sp.End}
	}
	return out
}

func shipMem(mem []pipeline.MemEvent) []*workerpb.StageMem {
	out := make([]*workerpb.StageMem, len(mem))
	for i, ev := range mem {
		out[i] = &workerpb.StageMem{T: ev.T, Micro: int32(ev.Micro), Bytes: ev.Bytes, Released: ev.Released}
	}
	return out
}

// StageTrace is what a pipeline stage shipped in its StepDone: its spans
// and memory events, checked, since they come from another process: op
// kinds must be known, times finite and ordered.
func StageTrace(d *workerpb.StepDone) ([]pipeline.Span, []pipeline.MemEvent, error) {
	spans := make([]pipeline.Span, 0, len(d.Spans))
	for _, s := range d.Spans {
		k := pipeline.OpKind(s.Kind)
		if uint32(k) != s.Kind || !k.Valid() || !(s.Start <= s.End) || math.IsInf(s.Start, 0) || math.IsInf(s.End, 0) {
			return nil, nil, fmt.Errorf("%w: rank %d shipped a bad pipeline span (op %d, %v to %v)", ErrWire, d.Rank, s.Kind, s.Start, s.End)
		}
		spans = append(spans, pipeline.Span{Op: pipeline.Op{Kind: k, Micro: int(s.Micro), Peer: int(s.Peer)}, Start: s.Start, End: s.End})
	}
	mem := make([]pipeline.MemEvent, 0, len(d.Mem))
	for _, e := range d.Mem {
		if math.IsNaN(e.T) || math.IsInf(e.T, 0) || e.Bytes < 0 {
			return nil, nil, fmt.Errorf("%w: rank %d shipped a bad memory event (t %v, %d bytes)", ErrWire, d.Rank, e.T, e.Bytes)
		}
		mem = append(mem, pipeline.MemEvent{T: e.T, Micro: int(e.Micro), Bytes: e.Bytes, Released: e.Released})
	}
	return spans, mem, nil
}

package actors

import (
	"errors"
	"math"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-ml/troupe/actors/actorspb"
	"github.com/troupe-ml/troupe/pipeline"
)

// A stage's spans and memory events cross processes in StepDone and come
// back as they were; bad ones are refused naming the rank.
func TestStageTrace(t *testing.T) {
	d := &actorspb.StepDone{Rank: 3,
		Spans: []*actorspb.StageSpan{{Kind: uint32(pipeline.Forward), Micro: 1, Peer: -1, Start: 0.5, End: 0.75},
			{Kind: uint32(pipeline.SendAct), Micro: 1, Peer: 2, Start: 0.75, End: 0.75}},
		Mem: []*actorspb.StageMem{{T: 0.5, Micro: 1, Bytes: 4096}, {T: 0.9, Micro: 1, Released: true}}}
	spans, mem, err := StageTrace(d)
	if err != nil {
		t.Fatal(err)
	}
	want := pipeline.Span{Op: pipeline.Op{Kind: pipeline.SendAct, Micro: 1, Peer: 2}, Start: 0.75, End: 0.75}
	if len(spans) != 2 || spans[1] != want || spans[0].Kind != pipeline.Forward {
		t.Fatalf("spans %+v", spans)
	}
	if len(mem) != 2 || mem[0].Bytes != 4096 || !mem[1].Released {
		t.Fatalf("memory events %+v", mem)
	}
	for name, bad := range map[string]*actorspb.StepDone{
		"unknown op":        {Spans: []*actorspb.StageSpan{{Kind: 200}}},
		"op beyond a byte":  {Spans: []*actorspb.StageSpan{{Kind: 256}}},
		"ends before start": {Spans: []*actorspb.StageSpan{{Start: 2, End: 1}}},
		"NaN time":          {Spans: []*actorspb.StageSpan{{Start: math.NaN(), End: 1}}},
		"infinite time":     {Spans: []*actorspb.StageSpan{{Start: 0, End: math.Inf(1)}}},
		"negative bytes":    {Mem: []*actorspb.StageMem{{Bytes: -1}}},
		"NaN memory time":   {Mem: []*actorspb.StageMem{{T: math.NaN()}}},
	} {
		if _, _, err := StageTrace(bad); !errors.Is(err, ErrWire) {
			t.Errorf("%s: %v, want ErrWire", name, err)
		}
	}
}

// FuzzStageTrace: StepDone bytes come from a worker process; whatever
// decodes, StageTrace never panics, and what it accepts has known op kinds
// and finite, ordered times.
func FuzzStageTrace(f *testing.F) {
	b, _ := proto.Marshal(&actorspb.StepDone{Spans: []*actorspb.StageSpan{{Kind: 1, Start: 1, End: 2}},
		Mem: []*actorspb.StageMem{{T: 1, Bytes: 3}}})
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var d actorspb.StepDone
		if proto.Unmarshal(b, &d) != nil {
			return
		}
		spans, mem, err := StageTrace(&d)
		if err != nil {
			return
		}
		for _, s := range spans {
			if !s.Kind.Valid() || !(s.Start <= s.End) || math.IsInf(s.Start, 0) || math.IsInf(s.End, 0) {
				t.Fatalf("accepted span %+v", s)
			}
		}
		for _, e := range mem {
			if math.IsNaN(e.T) || math.IsInf(e.T, 0) || e.Bytes < 0 {
				t.Fatalf("accepted memory event %+v", e)
			}
		}
	})
}

package worker

import (
	"errors"
	"math"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-ml/troupe/pipeline"
	"github.com/troupe-ml/troupe/worker/workerpb"
)

// A stage's spans and memory events cross processes in StepDone and come
// back as they were; bad ones are refused naming the rank.
func TestStageTrace(t *testing.T) {
	d := &workerpb.StepDone{Rank: 3,
		Spans: []*workerpb.StageSpan{{Kind: uint32(pipeline.Forward), Micro: 1, Peer: -1, Start: 0.5, End: 0.75},
			{Kind: uint32(pipeline.SendAct), Micro: 1, Peer: 2, Start: 0.75, End: 0.75}},
		Mem: []*workerpb.StageMem{{T: 0.5, Micro: 1, Bytes: 4096}, {T: 0.9, Micro: 1, Released: true}}}
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
	for name, bad := range map[string]*workerpb.StepDone{
		"unknown op":        {Spans: []*workerpb.StageSpan{{Kind: 200}}},
		"op beyond a byte":  {Spans: []*workerpb.StageSpan{{Kind: 256}}},
		"ends before start": {Spans: []*workerpb.StageSpan{{Start: 2, End: 1}}},
		"NaN time":          {Spans: []*workerpb.StageSpan{{Start: math.NaN(), End: 1}}},
		"infinite time":     {Spans: []*workerpb.StageSpan{{Start: 0, End: math.Inf(1)}}},
		"negative bytes":    {Mem: []*workerpb.StageMem{{Bytes: -1}}},
		"NaN memory time":   {Mem: []*workerpb.StageMem{{T: math.NaN()}}},
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
	b, _ := proto.Marshal(&workerpb.StepDone{Spans: []*workerpb.StageSpan{{Kind: 1, Start: 1, End: 2}},
		Mem: []*workerpb.StageMem{{T: 1, Bytes: 3}}})
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var d workerpb.StepDone
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

// FuzzFormOf: a Form comes from the leader of an elastic job; whatever
// decodes, FormOf never panics, and what it accepts places the worker on
// its mesh with roots on the right slots (Source.Roots is by slot: by
// part, stage·TP + shard, and with ZeRO by the part's shard).
func FuzzFormOf(f *testing.F) {
	for _, m := range []*workerpb.Form{
		{Dp: 2, Pp: 2, Tp: 1, Rank: 3, Source: 1, Roots: []int32{0, 3}, Step: 5},
		{Rank: -1},
		{Dp: 1, Pp: 1, Tp: 1, Source: 2, CheckpointStep: 100, Addrs: []string{"127.0.0.1:1"}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m workerpb.Form
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		form, err := FormOf(&m)
		if err != nil || form.Standby() {
			return
		}
		if form.Mesh.Validate() != nil || form.Rank >= form.Mesh.Size() || form.Source.Kind > FromCheckpoint {
			t.Fatalf("accepted %+v", form)
		}
		for slot, r := range form.Source.Roots {
			if form.Mesh.Slot(r, form.ZeroGroup) != slot {
				t.Fatalf("accepted root %d for slot %d in %v (ZeRO groups of %d)", r, slot, form.Mesh, form.ZeroGroup)
			}
		}
	})
}

package elastic

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/troupe-ml/troupe/elastic/elasticpb"
)

func TestCoreConfigValidate(t *testing.T) {
	self := Member{ID: "n1", Name: "n1"}
	for name, cfg := range map[string]CoreConfig{
		"no self":        {},
		"min above max":  {Self: self, MinNodes: 3, MaxNodes: 2},
		"negative max":   {Self: self, MaxNodes: -1},
		"unknown quorum": {Self: self, Quorum: 7},
		"negative ticks": {Self: self, SettleTicks: -1},
	} {
		if _, err := NewCore(cfg); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: got %v, want ErrBadConfig", name, err)
		}
	}
	c := CoreConfig{Self: self}
	if err := c.Validate(); err != nil || c.MinNodes != 1 || c.RetryTicks != 10 || c.MaxNodes != 0 {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
}

func TestParseQuorum(t *testing.T) {
	for in, want := range map[string]Quorum{"": QuorumMajority, "majority": QuorumMajority, "any": QuorumAny} {
		if q, err := ParseQuorum(in); err != nil || q != want || (in != "" && q.String() != in) {
			t.Errorf("%q: %v, %v", in, q, err)
		}
	}
	if _, err := ParseQuorum("most"); !errors.Is(err, ErrBadConfig) {
		t.Errorf("got %v", err)
	}
}

// Before Start a core only listens: a node whose join has not completed
// must not form a world of its own (its cluster may already have one).
func TestCoreWaitsForStart(t *testing.T) {
	c, err := NewCore(CoreConfig{Self: Member{ID: "n1", Name: "n1"}, SettleTicks: 0})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		c.Tick()
	}
	if rd := c.Ready(); len(rd.Messages) != 0 || len(rd.Events) != 0 || c.Committed().Gen != 0 {
		t.Fatalf("before Start: %+v, %s", rd, c.Committed())
	}
	c.Start()
	if w := c.Committed(); w.Gen != 1 || w.Size() != 1 {
		t.Fatalf("after Start alone with MinNodes 1: %s", w)
	}
}

// FuzzCoreStep hands a formed 3-node cluster one arbitrary message (as
// the wire decoder lets it through) and runs it to quiescence: the cores
// must not panic or loop. Safety against forged messages is the MAC's
// job (TestWireRefuses), so only the generations' monotony is checked.
func FuzzCoreStep(f *testing.F) {
	for _, m := range wireCases() {
		b, _ := proto.Marshal(toPB(m))
		f.Add(b, uint8(1))
	}
	f.Fuzz(func(t *testing.T, b []byte, to uint8) {
		var pb elasticpb.Rendezvous
		if proto.Unmarshal(b, &pb) != nil {
			return
		}
		m, err := fromPB(&pb)
		if err != nil {
			return
		}
		s := newSim()
		s.quiet = true
		s.anyQuorum = true // forged worlds may disagree; only monotony is checked
		s.cfg.SettleTicks = 0
		for _, name := range []string{"n1", "n2", "n3"} {
			if err := s.start(name, 1); err != nil {
				t.Fatal(err)
			}
		}
		s.deliverAll(-1)
		m.To = s.order[int(to)%len(s.order)]
		s.net = append(s.net, m)
		for range 30 {
			s.deliverAll(10000)
			s.tick()
		}
		if s.violation != nil {
			t.Fatal(s.violation)
		}
	})
}

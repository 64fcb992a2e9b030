package pipeline

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParseKind(t *testing.T) {
	for in, want := range map[string]Kind{"gpipe": KindGPipe, "GPipe": KindGPipe, " 1f1b ": Kind1F1B, "1F1B": Kind1F1B} {
		got, err := ParseKind(in)
		if err != nil || got != want {
			t.Errorf("ParseKind(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "pipedream", "1f1b-interleaved"} {
		if _, err := ParseKind(in); !errors.Is(err, ErrUnknownSchedule) || !strings.Contains(err.Error(), "gpipe or 1f1b") {
			t.Errorf("ParseKind(%q): %v", in, err)
		}
	}
	if b, err := Kind1F1B.MarshalText(); err != nil || string(b) != "1f1b" {
		t.Fatal(string(b), err)
	}
	if _, err := Kind(7).MarshalText(); !errors.Is(err, ErrUnknownSchedule) {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		c    Config
		want error
		text string
	}{
		{Config{Kind: 9, Stages: 1, MicroBatches: 1}, ErrUnknownSchedule, "kind 9"},
		{Config{Stages: 0, MicroBatches: 1}, ErrBadArgument, "0 stages"},
		{Config{Stages: MaxStages + 1, MicroBatches: 1}, ErrBadArgument, "1025 stages"},
		{Config{Stages: 1, MicroBatches: 0}, ErrBadArgument, "0 micro-batches"},
		{Config{Stages: 1, MicroBatches: -3}, ErrBadArgument, "-3 micro-batches"},
		{Config{Stages: 1024, MicroBatches: 2048}, ErrBadArgument, "over the limit"},
	}
	for _, b := range bad {
		err := b.c.Validate()
		if !errors.Is(err, b.want) || !strings.Contains(err.Error(), b.text) {
			t.Errorf("%+v: %v, want %v mentioning %q", b.c, err, b.want, b.text)
		}
		if _, err := Build(b.c); !errors.Is(err, b.want) {
			t.Errorf("Build(%+v): %v", b.c, err)
		}
	}
}

// TestScheduleHandWorked checks the lists against schedules written out by
// hand from the papers' figures (GPipe Fig. 2, PipeDream-Flush / Megatron
// Fig. 4 top), messages included.
func TestScheduleHandWorked(t *testing.T) {
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{Kind: KindGPipe, Stages: 2, MicroBatches: 2}, `gpipe, 2 stages, 2 micro-batches
stage 0: F0 >a0 F1 >a1 <g0 B0 <g1 B1
stage 1: <a0 F0 <a1 F1 B0 >g0 B1 >g1`},
		{Config{Kind: Kind1F1B, Stages: 3, MicroBatches: 4}, `1f1b, 3 stages, 4 micro-batches
stage 0: F0 >a0 F1 >a1 F2 >a2 <g0 B0 F3 >a3 <g1 B1 <g2 B2 <g3 B3
stage 1: <a0 F0 >a0 <a1 F1 >a1 <g0 B0 >g0 <a2 F2 >a2 <g1 B1 >g1 <a3 F3 >a3 <g2 B2 >g2 <g3 B3 >g3
stage 2: <a0 F0 B0 >g0 <a1 F1 B1 >g1 <a2 F2 B2 >g2 <a3 F3 B3 >g3`},
		// M < P−1: stages 0 and 1 warm up with only M forwards and have no
		// steady state; stage 2 warms up with P−2−1 = 1.
		{Config{Kind: Kind1F1B, Stages: 4, MicroBatches: 2}, `1f1b, 4 stages, 2 micro-batches
stage 0: F0 >a0 F1 >a1 <g0 B0 <g1 B1
stage 1: <a0 F0 >a0 <a1 F1 >a1 <g0 B0 >g0 <g1 B1 >g1
stage 2: <a0 F0 >a0 <a1 F1 >a1 <g0 B0 >g0 <g1 B1 >g1
stage 3: <a0 F0 B0 >g0 <a1 F1 B1 >g1`},
		{Config{Kind: Kind1F1B, Stages: 2, MicroBatches: 2, Recompute: true}, `1f1b, 2 stages, 2 micro-batches, recompute
stage 0: F0 >a0 F1 >a1 <g0 R0 B0 <g1 R1 B1
stage 1: <a0 F0 R0 B0 >g0 <a1 F1 R1 B1 >g1`},
		{Config{Kind: KindGPipe, Stages: 1, MicroBatches: 3}, `gpipe, 1 stages, 3 micro-batches
stage 0: F0 F1 F2 B0 B1 B2`},
		{Config{Kind: Kind1F1B, Stages: 1, MicroBatches: 3}, `1f1b, 1 stages, 3 micro-batches
stage 0: F0 B0 F1 B1 F2 B2`},
	}
	for _, c := range cases {
		s, err := Build(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if s.String() != c.want {
			t.Errorf("%+v:\n%s\nwant\n%s", c.cfg, s, c.want)
		}
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: %v", c.cfg, err)
		}
		if s.Config() != c.cfg {
			t.Errorf("Config() = %+v", s.Config())
		}
	}
}

// TestScheduleProperty: for P = 1…8, M = 1…32, both kinds, with and without
// recompute, the schedule validates and has the predicted length: per
// micro-batch a forward, a backward, maybe a recompute, and one op per
// message.
func TestScheduleProperty(t *testing.T) {
	for _, k := range []Kind{KindGPipe, Kind1F1B} {
		for _, rc := range []bool{false, true} {
			for P := 1; P <= 8; P++ {
				for M := 1; M <= 32; M++ {
					s, err := Build(Config{Kind: k, Stages: P, MicroBatches: M, Recompute: rc})
					if err != nil {
						t.Fatal(err)
					}
					if err := s.Validate(); err != nil {
						t.Fatalf("%s P=%d M=%d recompute=%v: %v", k, P, M, rc, err)
					}
					for st, ops := range s.Ops {
						if len(ops) != s.opsPerStage(st) {
							t.Fatalf("%s P=%d M=%d stage %d: %d ops, want %d", k, P, M, st, len(ops), s.opsPerStage(st))
						}
					}
				}
			}
		}
	}
}

func TestScheduleJSON(t *testing.T) {
	s, err := GPipe(2, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"schedule":"gpipe","stages":2,"micro_batches":1,"recompute":false,"ops":[` +
		`[{"op":"forward","micro":0},{"op":"send_act","micro":0,"peer":1},{"op":"recv_grad","micro":0,"peer":1},{"op":"backward","micro":0}],` +
		`[{"op":"recv_act","micro":0,"peer":0},{"op":"forward","micro":0},{"op":"backward","micro":0},{"op":"send_grad","micro":0,"peer":0}]]}`
	if string(b) != want {
		t.Fatalf("%s\nwant\n%s", b, want)
	}
}

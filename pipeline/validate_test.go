package pipeline

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func mustBuild(t *testing.T, c Config) *Schedule {
	t.Helper()
	s, err := Build(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// find returns the index of op in stage st's list.
func find(t *testing.T, s *Schedule, st int, op Op) int {
	t.Helper()
	i := slices.Index(s.Ops[st], op)
	if i < 0 {
		t.Fatalf("stage %d has no %v", st, op)
	}
	return i
}

// TestValidateRejects breaks valid schedules in the ways an executor or a
// new schedule could, one at a time, and checks the error names the fault.
func TestValidateRejects(t *testing.T) {
	cases := []struct {
		name   string
		cfg    Config
		mutate func(t *testing.T, s *Schedule)
		want   error
		text   string
	}{
		{"missing backward", Config{Kind: KindGPipe, Stages: 2, MicroBatches: 2}, func(t *testing.T, s *Schedule) {
			i := find(t, s, 0, computeOp(Backward, 1))
			s.Ops[0] = slices.Delete(s.Ops[0], i, i+1)
		}, ErrInvalidSchedule, "stage 0 never runs backward of micro-batch 1"},
		{"repeated forward", Config{Kind: KindGPipe, Stages: 2, MicroBatches: 2}, func(t *testing.T, s *Schedule) {
			s.Ops[1] = append(s.Ops[1], computeOp(Forward, 0))
		}, ErrInvalidSchedule, "repeats op 1"},
		{"micro out of range", Config{Kind: Kind1F1B, Stages: 2, MicroBatches: 2}, func(t *testing.T, s *Schedule) {
			s.Ops[0][0].Micro = 2
		}, ErrInvalidSchedule, "out of range"},
		{"unknown kind", Config{Kind: Kind1F1B, Stages: 2, MicroBatches: 2}, func(t *testing.T, s *Schedule) {
			s.Ops[0][0].Kind = numOpKinds
		}, ErrInvalidSchedule, "unknown kind"},
		{"wrong peer", Config{Kind: Kind1F1B, Stages: 3, MicroBatches: 2}, func(t *testing.T, s *Schedule) {
			s.Ops[1][find(t, s, 1, Op{SendAct, 0, 2})].Peer = 0
		}, ErrInvalidSchedule, "peer must be stage 2"},
		{"last stage sends an activation", Config{Kind: KindGPipe, Stages: 2, MicroBatches: 1}, func(t *testing.T, s *Schedule) {
			s.Ops[1] = append(s.Ops[1], Op{SendAct, 0, 2})
		}, ErrInvalidSchedule, "stage 1 of 2 has no such op"},
		{"recompute without the flag", Config{Kind: KindGPipe, Stages: 1, MicroBatches: 1}, func(t *testing.T, s *Schedule) {
			s.Ops[0] = slices.Insert(s.Ops[0], 1, computeOp(Recompute, 0))
		}, ErrInvalidSchedule, "not expected without recompute"},
		{"backward before forward", Config{Kind: Kind1F1B, Stages: 1, MicroBatches: 2}, func(t *testing.T, s *Schedule) {
			s.Ops[0][0], s.Ops[0][1] = s.Ops[0][1], s.Ops[0][0]
		}, ErrInvalidSchedule, "runs backward 0 (op 0) before forward 0 (op 1)"},
		{"send before forward", Config{Kind: KindGPipe, Stages: 2, MicroBatches: 1}, func(t *testing.T, s *Schedule) {
			s.Ops[0][0], s.Ops[0][1] = s.Ops[0][1], s.Ops[0][0]
		}, ErrInvalidSchedule, "runs send_act 0 → stage 1 (op 0) before forward 0 (op 1)"},
		{"recompute after backward", Config{Kind: KindGPipe, Stages: 1, MicroBatches: 1, Recompute: true}, func(t *testing.T, s *Schedule) {
			s.Ops[0][1], s.Ops[0][2] = s.Ops[0][2], s.Ops[0][1]
		}, ErrInvalidSchedule, "runs backward 0 (op 1) before recompute 0 (op 2)"},
		{"link out of order", Config{Kind: KindGPipe, Stages: 2, MicroBatches: 2}, func(t *testing.T, s *Schedule) {
			// Stage 1 takes activation 1 before activation 0 (each still
			// before its forward).
			s.Ops[1] = slices.Concat([]Op{{RecvAct, 1, 0}, {RecvAct, 0, 0}, computeOp(Forward, 0), computeOp(Forward, 1)}, s.Ops[1][4:])
		}, ErrInvalidSchedule, "deliver out of order"},
		{"deadlock", Config{Kind: Kind1F1B, Stages: 2, MicroBatches: 1}, func(t *testing.T, s *Schedule) {
			// Stage 0 waits for gradient 0 before sending activation 0.
			s.Ops[0] = []Op{computeOp(Forward, 0), {RecvGrad, 0, 1}, {SendAct, 0, 1}, computeOp(Backward, 0)}
		}, ErrDeadlock, "stage 0 waits for recv_grad 0 ← stage 1 (op 1 of 4); stage 1 waits for recv_act 0 ← stage 0 (op 0 of 4)"},
		{"missing stage list", Config{Kind: KindGPipe, Stages: 2, MicroBatches: 1}, func(t *testing.T, s *Schedule) {
			s.Ops = s.Ops[:1]
		}, ErrInvalidSchedule, "1 op lists for 2 stages"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := mustBuild(t, c.cfg)
			c.mutate(t, s)
			err := s.Validate()
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("%v\nwant %v mentioning %q", err, c.want, c.text)
			}
		})
	}
}

// TestValidateRandomSwaps: swapping two ops of one stage either breaks a
// rule Validate names, or leaves a schedule that still plays to the end
// with every stage doing all its work. Seeded; the seed is in the name.
func TestValidateRandomSwaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	accepted := 0
	for trial := range 2000 {
		cfg := Config{Kind: Kind(rng.IntN(2)), Stages: 1 + rng.IntN(4), MicroBatches: 1 + rng.IntN(5), Recompute: rng.IntN(2) == 0}
		s := mustBuild(t, cfg)
		st := rng.IntN(cfg.Stages)
		ops := s.Ops[st]
		i, j := rng.IntN(len(ops)), rng.IntN(len(ops))
		ops[i], ops[j] = ops[j], ops[i]
		err := s.Validate()
		if err != nil {
			if !errors.Is(err, ErrInvalidSchedule) && !errors.Is(err, ErrDeadlock) {
				t.Fatalf("trial %d (seed 7): %+v swap %d,%d on stage %d: unexpected error %v", trial, cfg, i, j, st, err)
			}
			continue
		}
		accepted++
		tl, err := Simulate(s, UniformCosts(cfg.Stages, DefaultStageCost()))
		if err != nil {
			t.Fatalf("trial %d: validated but does not simulate: %v", trial, err)
		}
		for p, spans := range tl.Spans {
			if len(spans) != len(s.Ops[p]) {
				t.Fatalf("trial %d: stage %d ran %d of %d ops", trial, p, len(spans), len(s.Ops[p]))
			}
		}
	}
	if accepted == 0 {
		t.Fatal("no swap kept a valid schedule: the test checks nothing")
	}
}

// TestScheduleJSONRoundTrip: a schedule written as JSON (as `troupe explain
// pipeline --json` prints its ops) reads back equal and valid.
func TestScheduleJSONRoundTrip(t *testing.T) {
	s := mustBuild(t, Config{Kind: Kind1F1B, Stages: 3, MicroBatches: 4, Recompute: true})
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Schedule
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Config() != s.Config() || !slices.EqualFunc(back.Ops, s.Ops, slices.Equal) {
		t.Fatalf("round trip changed the schedule:\n%s\n%s", s, &back)
	}
	if err := back.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`{"schedule":"zb"}`, `{"ops":[[{"op":"jump","micro":0}]]}`} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Fatalf("%s decoded", bad)
		}
	}
}

// FuzzScheduleJSON: any JSON either fails to decode, fails Validate with
// ErrInvalidSchedule, ErrDeadlock, ErrBadArgument or ErrUnknownSchedule,
// or is a schedule that simulates to the end with every op run once.
func FuzzScheduleJSON(f *testing.F) {
	for _, c := range []Config{{Kind: KindGPipe, Stages: 2, MicroBatches: 2}, {Kind: Kind1F1B, Stages: 3, MicroBatches: 2, Recompute: true}} {
		s, _ := Build(c)
		b, _ := json.Marshal(s)
		f.Add(b)
	}
	f.Add([]byte(`{"schedule":"1f1b","stages":1,"micro_batches":1,"ops":[[{"op":"backward","micro":0},{"op":"forward","micro":0}]]}`))
	f.Add([]byte(`{"schedule":"gpipe","stages":2,"micro_batches":1,"ops":[[{"op":"forward","micro":0},{"op":"recv_grad","micro":0,"peer":1},{"op":"send_act","micro":0,"peer":1},{"op":"backward","micro":0}],[{"op":"recv_act","micro":0,"peer":0},{"op":"forward","micro":0},{"op":"backward","micro":0},{"op":"send_grad","micro":0,"peer":0}]]}`))
	f.Add([]byte(`{"stages":99999999,"micro_batches":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Schedule
		if json.Unmarshal(b, &s) != nil {
			return
		}
		err := s.Validate()
		if err != nil {
			for _, e := range []error{ErrInvalidSchedule, ErrDeadlock, ErrBadArgument, ErrUnknownSchedule} {
				if errors.Is(err, e) {
					return
				}
			}
			t.Fatalf("unexpected error kind: %v", err)
		}
		tl, err := Simulate(&s, UniformCosts(s.Stages, DefaultStageCost()))
		if err != nil {
			t.Fatalf("valid schedule does not simulate: %v", err)
		}
		for st := range s.Ops {
			if len(tl.Spans[st]) != len(s.Ops[st]) {
				t.Fatalf("stage %d ran %d of %d ops", st, len(tl.Spans[st]), len(s.Ops[st]))
			}
		}
	})
}

package pipeline

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestOpNotation(t *testing.T) {
	cases := []struct {
		op           Op
		short, long  string
		json         string
		compute      bool
		send, recv   bool
		kindTextName string
	}{
		{computeOp(Forward, 3), "F3", "forward 3", `{"op":"forward","micro":3}`, true, false, false, "forward"},
		{computeOp(Backward, 0), "B0", "backward 0", `{"op":"backward","micro":0}`, true, false, false, "backward"},
		{computeOp(Recompute, 12), "R12", "recompute 12", `{"op":"recompute","micro":12}`, true, false, false, "recompute"},
		{Op{SendAct, 1, 2}, ">a1", "send_act 1 → stage 2", `{"op":"send_act","micro":1,"peer":2}`, false, true, false, "send_act"},
		{Op{RecvAct, 1, 0}, "<a1", "recv_act 1 ← stage 0", `{"op":"recv_act","micro":1,"peer":0}`, false, false, true, "recv_act"},
		{Op{SendGrad, 4, 0}, ">g4", "send_grad 4 → stage 0", `{"op":"send_grad","micro":4,"peer":0}`, false, true, false, "send_grad"},
		{Op{RecvGrad, 4, 1}, "<g4", "recv_grad 4 ← stage 1", `{"op":"recv_grad","micro":4,"peer":1}`, false, false, true, "recv_grad"},
	}
	for _, c := range cases {
		if got := c.op.Short(); got != c.short {
			t.Errorf("Short %q, want %q", got, c.short)
		}
		if got := c.op.String(); got != c.long {
			t.Errorf("String %q, want %q", got, c.long)
		}
		b, err := json.Marshal(c.op)
		if err != nil || string(b) != c.json {
			t.Errorf("JSON %s (%v), want %s", b, err, c.json)
		}
		k := c.op.Kind
		if k.Compute() != c.compute || k.IsSend() != c.send || k.IsRecv() != c.recv || k.String() != c.kindTextName {
			t.Errorf("%v: compute %v send %v recv %v name %q", k, k.Compute(), k.IsSend(), k.IsRecv(), k.String())
		}
	}
	if _, err := OpKind(99).MarshalText(); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("unknown kind marshals: %v", err)
	}
	if OpKind(99).String() != "OpKind(99)" {
		t.Fatal(OpKind(99).String())
	}
}

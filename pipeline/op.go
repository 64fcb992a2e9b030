package pipeline

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// OpKind is what one step of a stage's schedule does.
type OpKind uint8

const (
	// Forward runs the stage's layers on micro-batch Micro and keeps what the
	// backward pass needs. On the last stage it also computes the loss (and
	// the gradient of the loss), so that stage's Backward needs no message.
	Forward OpKind = iota
	// Backward runs the stage's backward pass for Micro, adds the parameter
	// gradients into the stage's accumulators and frees Micro's activations.
	Backward
	// Recompute reruns Micro's forward pass from the stage input kept by an
	// activation-checkpointed Forward, just before its Backward.
	Recompute
	// SendAct sends Micro's output activation to stage Peer (= stage + 1).
	SendAct
	// RecvAct takes Micro's input activation from stage Peer (= stage − 1).
	RecvAct
	// SendGrad sends the gradient of Micro's stage input to stage Peer
	// (= stage − 1).
	SendGrad
	// RecvGrad takes the gradient of Micro's output from stage Peer
	// (= stage + 1).
	RecvGrad

	numOpKinds
)

var opKindNames = [numOpKinds]string{"forward", "backward", "recompute", "send_act", "recv_act", "send_grad", "recv_grad"}

// Valid reports whether k is one of the kinds above.
func (k OpKind) Valid() bool { return k < numOpKinds }

// String is the kind's name in JSON: "forward", "send_act", …
func (k OpKind) String() string {
	if k < numOpKinds {
		return opKindNames[k]
	}
	return "OpKind(" + strconv.Itoa(int(k)) + ")"
}

// MarshalText writes the kind's name.
func (k OpKind) MarshalText() ([]byte, error) {
	if k >= numOpKinds {
		return nil, fmt.Errorf("%w: op kind %d", ErrBadArgument, k)
	}
	return []byte(k.String()), nil
}

// UnmarshalText reads a kind's name, as MarshalText writes it.
func (k *OpKind) UnmarshalText(b []byte) error {
	for i, name := range opKindNames {
		if string(b) == name {
			*k = OpKind(i)
			return nil
		}
	}
	return fmt.Errorf("%w: unknown op %q: want one of %v", ErrInvalidSchedule, b, opKindNames)
}

// Compute reports whether the kind runs layers (Forward, Backward,
// Recompute), as opposed to moving a message.
func (k OpKind) Compute() bool { return k <= Recompute }

// IsSend reports whether the kind sends a message.
func (k OpKind) IsSend() bool { return k == SendAct || k == SendGrad }

// IsRecv reports whether the kind receives a message.
func (k OpKind) IsRecv() bool { return k == RecvAct || k == RecvGrad }

// Op is one step of a stage's schedule.
type Op struct {
	Kind OpKind `json:"op"`
	// Micro is the micro-batch, 0 ≤ Micro < M.
	Micro int `json:"micro"`
	// Peer is the stage a message goes to or comes from; -1 for compute ops
	// (and left out of the JSON).
	Peer int `json:"-"`
}

// opJSON spells Peer only where it means something.
type opJSON struct {
	Kind  OpKind `json:"op"`
	Micro int    `json:"micro"`
	Peer  *int   `json:"peer,omitempty"`
}

// MarshalJSON writes {"op":"send_act","micro":3,"peer":2}; compute ops have
// no "peer".
func (o Op) MarshalJSON() ([]byte, error) {
	j := opJSON{Kind: o.Kind, Micro: o.Micro}
	if !o.Kind.Compute() {
		j.Peer = &o.Peer
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes; a compute op, or a message
// op without "peer", gets Peer −1. Whether the op makes sense is Schedule.Validate's business.
func (o *Op) UnmarshalJSON(b []byte) error {
	var j opJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	o.Kind, o.Micro, o.Peer = j.Kind, j.Micro, -1
	if j.Peer != nil && !j.Kind.Compute() {
		o.Peer = *j.Peer
	}
	return nil
}

// String is a readable form for errors and logs: "forward 3",
// "send_act 3 → stage 2", "recv_grad 3 ← stage 2".
func (o Op) String() string {
	switch {
	case o.Kind.IsSend():
		return fmt.Sprintf("%s %d → stage %d", o.Kind, o.Micro, o.Peer)
	case o.Kind.IsRecv():
		return fmt.Sprintf("%s %d ← stage %d", o.Kind, o.Micro, o.Peer)
	}
	return fmt.Sprintf("%s %d", o.Kind, o.Micro)
}

// Short is the op in the compact notation of `troupe explain pipeline`:
// F3, B3, R3 for forward, backward and recompute of micro-batch 3; >a3 and
// <a3 for sending and receiving its activation (always to the next stage,
// from the previous one); >g3 and <g3 for its gradient (to the previous
// stage, from the next one).
func (o Op) Short() string {
	m := strconv.Itoa(o.Micro)
	switch o.Kind {
	case Forward:
		return "F" + m
	case Backward:
		return "B" + m
	case Recompute:
		return "R" + m
	case SendAct:
		return ">a" + m
	case RecvAct:
		return "<a" + m
	case SendGrad:
		return ">g" + m
	case RecvGrad:
		return "<g" + m
	}
	return o.String()
}

func computeOp(k OpKind, micro int) Op { return Op{Kind: k, Micro: micro, Peer: -1} }

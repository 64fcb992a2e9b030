package failure

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

var (
	errLost   = New(PeerLost, "test: peer lost")
	errConfig = New(Config, "test: bad config")
)

func TestCodesClassify(t *testing.T) {
	for c := Code(0); c < numCodes; c++ {
		want := c >= PeerLost && c <= Crashed
		if c.Transient() != want {
			t.Errorf("%s: transient %v", c, c.Transient())
		}
		if c.String() == "" || !c.Valid() {
			t.Errorf("code %d has no name", c)
		}
	}
	if Code(99).Valid() || Code(99).String() != "code(99)" {
		t.Error("an unknown code is valid")
	}
}

func TestCodeOfFindsTheOutermostClassifiedError(t *testing.T) {
	inner := fmt.Errorf("rank 2: %w", errLost)
	outer := Wrapf(Aborted, "step 4: %w", inner)
	cases := []struct {
		err  error
		want Code
	}{
		{nil, Unknown},
		{errors.New("plain"), Unknown},
		{inner, PeerLost},
		{outer, Aborted},
		{fmt.Errorf("x: %w", context.Canceled), Canceled},
		{context.DeadlineExceeded, Canceled},
		{Wrap(Output, errors.New("open w.safetensors: permission denied")), Output},
	}
	for _, tc := range cases {
		if got := CodeOf(tc.err); got != tc.want {
			t.Errorf("CodeOf(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
	if !errors.Is(outer, errLost) {
		t.Error("a wrapped chain lost its sentinel")
	}
	if Transient(errConfig) || !Transient(inner) || Transient(nil) || Transient(errors.New("plain")) {
		t.Error("Transient misclassifies")
	}
}

// A failure crosses the wire as a code and a message; at the other end
// errors.Is matches the sentinels of that code, and only those.
func TestWireRoundTrip(t *testing.T) {
	sent := fmt.Errorf("stage 1: %w", errLost)
	c, msg := Encode(sent)
	got := Decode(c, msg)
	if got.Error() != sent.Error() || CodeOf(got) != PeerLost {
		t.Fatalf("decoded %q (%s)", got, CodeOf(got))
	}
	if !errors.Is(got, errLost) || errors.Is(got, errConfig) {
		t.Error("the decoded error does not match its code's sentinel alone")
	}
	// Sentinels stay distinct locally: two sentinels of one code are not
	// each other.
	other := New(PeerLost, "other: peer lost")
	if errors.Is(errLost, other) || errors.Is(sent, other) {
		t.Error("a local sentinel matches another of its code")
	}
	if Decode(Unknown, "") != nil {
		t.Error("an empty failure decodes to an error")
	}
	if CodeOf(Decode(Code(200), "from the future")) != Unknown {
		t.Error("an unknown code is not Unknown")
	}
}

// A recovered panic is a Crashed failure (transient: the job goes on
// without what panicked) naming where it happened and the panic's value.
func TestPanicked(t *testing.T) {
	err := Panicked("group g", "index out of range")
	if CodeOf(err) != Crashed || !Transient(err) || err.Error() != "group g panicked: index out of range" {
		t.Fatalf("%v: code %v", err, CodeOf(err))
	}
	wrapped := fmt.Errorf("%w (%w)", err, New(Canceled, "closed"))
	if CodeOf(wrapped) != Crashed {
		t.Fatalf("a panic wrapped before another code is %v, want crashed", CodeOf(wrapped))
	}
}

package train

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/troupe-ml/troupe/worker/workerpb"
)

// fillAll sets every field reachable from v to a value of its own, none
// zero: a field added to the Go struct and forgotten by a converter fails
// the round trip. Integers are positive (counts on the wire may not be
// negative).
func fillAll(t testing.TB, v reflect.Value, n *int) {
	t.Helper()
	*n++
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) + 0.125)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillAll(t, v.Elem(), n)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range v.Len() {
			fillAll(t, v.Index(i), n)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			fillAll(t, v.Field(i), n)
		}
	default:
		t.Fatalf("fillAll: a field of kind %v: teach the test (and the converter) about it", v.Kind())
	}
}

// checkAllSet fails for every field of m (and of the messages in it) that
// is unset: a field added to the message and left out by the converter.
func checkAllSet(t *testing.T, m protoreflect.Message, path string) {
	t.Helper()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		name := path + string(f.Name())
		if !m.Has(f) {
			t.Errorf("%s is not set", name)
			continue
		}
		switch {
		case f.IsList() && f.Message() != nil:
			l := m.Get(f).List()
			for j := range l.Len() {
				checkAllSet(t, l.Get(j).Message(), fmt.Sprintf("%s[%d].", name, j))
			}
		case f.Message() != nil:
			checkAllSet(t, m.Get(f).Message(), name+".")
		}
	}
}

// wireTrip sends msg through proto's encoding, as between processes.
func wireTrip[M proto.Message](t *testing.T, msg M) M {
	t.Helper()
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	back := msg.ProtoReflect().New().Interface().(M)
	if err := proto.Unmarshal(b, back); err != nil {
		t.Fatal(err)
	}
	return back
}

// Every field of StepMetrics (and of what it points to) crosses the wire
// and comes back as it was; every field of the message is used.
func TestStepMetricsWireRoundTrip(t *testing.T) {
	var want StepMetrics
	n := 0
	fillAll(t, reflect.ValueOf(&want).Elem(), &n)
	msg := stepMetricsMsg(want)
	checkAllSet(t, msg.ProtoReflect(), "")
	got, err := stepMetricsOf(wireTrip(t, msg))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
	// What the metrics of a world of one hold: nothing optional.
	bare := StepMetrics{Step: 3, Loss: 1.5, StragglerRank: -1}
	if got, err := stepMetricsOf(wireTrip(t, stepMetricsMsg(bare))); err != nil || !reflect.DeepEqual(got, bare) {
		t.Errorf("round trip of %+v: %+v, %v", bare, got, err)
	}
}

// Every field of WorldInfo crosses the wire and comes back as it was.
func TestWorldInfoWireRoundTrip(t *testing.T) {
	var want WorldInfo
	n := 0
	fillAll(t, reflect.ValueOf(&want).Elem(), &n)
	msg := worldInfoMsg(want)
	checkAllSet(t, msg.ProtoReflect(), "")
	got, err := worldInfoOf(wireTrip(t, msg))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
	// The receiver's copy does not alias the message (in one process
	// every member gets the same one).
	got, _ = worldInfoOf(msg)
	got.Members[0] = "changed"
	if msg.Members[0] == "changed" {
		t.Error("the decoded world shares its members with the message")
	}
}

// A report that cannot be what the leader sends is an ErrWire that says
// what is wrong.
func TestProgressOfRejects(t *testing.T) {
	metrics := func(m *workerpb.StepMetrics) *workerpb.Progress {
		return &workerpb.Progress{Step: uint64(max(0, m.Step)), Report: &workerpb.Progress_Metrics{Metrics: m}}
	}
	world := func(w *workerpb.WorldInfo) *workerpb.Progress {
		return &workerpb.Progress{Report: &workerpb.Progress_World{World: w}}
	}
	for name, tc := range map[string]struct {
		p    *workerpb.Progress
		want string
	}{
		"empty":            {&workerpb.Progress{Step: 4}, "neither a world nor"},
		"nil metrics":      {&workerpb.Progress{Report: &workerpb.Progress_Metrics{}}, "no step metrics"},
		"nil world":        {&workerpb.Progress{Report: &workerpb.Progress_World{}}, "no world"},
		"step mismatch":    {&workerpb.Progress{Step: 5, Report: &workerpb.Progress_Metrics{Metrics: &workerpb.StepMetrics{Step: 4}}}, "report of step 5 carries the metrics of step 4"},
		"negative step":    {metrics(&workerpb.StepMetrics{Step: -1}), "step -1 is negative"},
		"negative dp":      {metrics(&workerpb.StepMetrics{Step: 2, Dp: -2}), "dp -2 is negative"},
		"negative rank":    {metrics(&workerpb.StepMetrics{Step: 2, Collectives: []*workerpb.CollectiveTime{{Rank: -3}}}), "collectives.rank -3"},
		"negative replica": {metrics(&workerpb.StepMetrics{Step: 2, Async: &workerpb.AsyncMetrics{Replica: -1}}), "async.replica -1"},
		"world's pp":       {world(&workerpb.WorldInfo{Generation: 3, Pp: -1}), "world of generation 3: pp -1 is negative"},
	} {
		w, m, err := progressOf(tc.p)
		if !errors.Is(err, ErrWire) || !strings.Contains(err.Error(), tc.want) || w != nil || m != nil {
			t.Errorf("%s: %v, %v, %v; want an ErrWire saying %q", name, w, m, err, tc.want)
		}
	}
	// A negative straggler rank is a real one (−1: none to compare).
	if _, m, err := progressOf(metrics(&workerpb.StepMetrics{Step: 2, StragglerRank: -1})); err != nil || m.StragglerRank != -1 {
		t.Errorf("straggler rank −1: %v, %v", m, err)
	}
}

// A member that gets a report that does not decode logs it with the
// sender, counts it, and goes on.
func TestProgressDropsWhatDoesNotDecode(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	reg := prometheus.NewRegistry()
	pm, err := newPromMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	stepped := false
	a := &agent{log: zap.New(core), prom: &promRun{metrics: pm}, o: Options{OnStep: func(StepMetrics) { stepped = true }}}
	if stop := a.progress(&workerpb.Progress{Step: 7, From: "n1"}); stop || stepped {
		t.Errorf("a report with nothing in it: stop %v, OnStep called %v", stop, stepped)
	}
	entries := logs.FilterMessage("the leader's report does not decode: dropped").All()
	if len(entries) != 1 {
		t.Fatalf("logged %v", logs.All())
	}
	if f := entries[0].ContextMap(); f["from"] != "n1" || f["step"] != uint64(7) || !strings.Contains(fmt.Sprint(f["error"]), "neither") {
		t.Errorf("the log says %v", f)
	}
	if v := value(gathered(t, reg)["troupe_dropped_messages_total"]); v != 1 {
		t.Errorf("troupe_dropped_messages_total %v, want 1", v)
	}
}

// The decoders of a report from a peer never panic and fail only with
// ErrWire; what they accept converts back to the same message (fields
// this build does not know are left aside, as the receiver's proto
// decoder keeps them aside).
func FuzzStepMetricsWire(f *testing.F) {
	var full StepMetrics
	n := 0
	fillAll(f, reflect.ValueOf(&full).Elem(), &n)
	for _, m := range []StepMetrics{{}, {Step: 1, StragglerRank: -1}, full} {
		b, _ := proto.Marshal(stepMetricsMsg(m))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p workerpb.StepMetrics
		if (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, &p) != nil {
			return
		}
		m, err := stepMetricsOf(&p)
		if err != nil {
			if !errors.Is(err, ErrWire) {
				t.Fatalf("%v is not an ErrWire", err)
			}
			return
		}
		sameWire(t, stepMetricsMsg(m), &p)
	})
}

func FuzzWorldInfoWire(f *testing.F) {
	for _, w := range []WorldInfo{{}, {Generation: 2, Mesh: "dp2×pp2", DP: 2, PP: 2, Members: []string{"a", "b", "c", "d"}, Standby: []string{"e"}, Step: 9, StateFrom: "surviving replicas"}} {
		b, _ := proto.Marshal(worldInfoMsg(w))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p workerpb.WorldInfo
		if (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, &p) != nil {
			return
		}
		w, err := worldInfoOf(&p)
		if err != nil {
			if !errors.Is(err, ErrWire) {
				t.Fatalf("%v is not an ErrWire", err)
			}
			return
		}
		sameWire(t, worldInfoMsg(w), &p)
	})
}

func FuzzProgressWire(f *testing.F) {
	f.Add([]byte{})
	for _, p := range []*workerpb.Progress{
		{Step: 3, From: "n1", Report: &workerpb.Progress_Metrics{Metrics: stepMetricsMsg(StepMetrics{Step: 3, Loss: 2})}},
		{From: "n1", Report: &workerpb.Progress_World{World: worldInfoMsg(WorldInfo{Generation: 1, DP: 2, Members: []string{"a", "b"}})}},
	} {
		b, _ := proto.Marshal(p)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p workerpb.Progress
		if (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, &p) != nil {
			return
		}
		w, m, err := progressOf(&p)
		switch {
		case err != nil:
			if !errors.Is(err, ErrWire) || w != nil || m != nil {
				t.Fatalf("%v, %v, %v", w, m, err)
			}
		case (w == nil) == (m == nil):
			t.Fatalf("a report decoded to world %v and metrics %v", w, m)
		case m != nil && uint64(m.Step) != p.Step:
			t.Fatalf("the metrics of step %d in a report of step %d", m.Step, p.Step)
		}
	})
}

// sameWire fails unless got and want encode alike (deterministically: a
// NaN compares by its bits).
func sameWire(t *testing.T, got, want proto.Message) {
	t.Helper()
	o := proto.MarshalOptions{Deterministic: true}
	g, err1 := o.Marshal(got)
	w, err2 := o.Marshal(want)
	if err1 != nil || err2 != nil || string(g) != string(w) {
		t.Fatalf("converted back: %v (%v), want %v (%v)", got, err1, want, err2)
	}
}

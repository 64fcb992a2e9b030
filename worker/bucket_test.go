package worker

import (
	"slices"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/models"
	"github.com/troupe-ml/troupe/nn"
)

func mlp(t *testing.T) *nn.Model {
	t.Helper()
	m, err := models.NewMLP(cpu.New(1), models.MLP{Sizes: []int{8, 6, 4, 2}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestPlanCoversTheFlatBufferInReverse(t *testing.T) {
	m := mlp(t)
	// params: fc1.w 48, fc1.b 6, fc2.w 24, fc2.b 4, fc3.w 8, fc3.b 2 (×4 bytes)
	p, err := NewPlan(m.Set, 120)
	if err != nil {
		t.Fatal(err)
	}
	// Reverse order under a 120-byte cap: fc3.b+fc3.w+fc2.b = 56 bytes (fc2.w
	// would make 152), then fc2.w+fc1.b = 120, then fc1.w alone.
	want := []Bucket{
		{FirstParam: 3, EndParam: 6, Lo: 78, Hi: 92},
		{FirstParam: 1, EndParam: 3, Lo: 48, Hi: 78},
		{FirstParam: 0, EndParam: 1, Lo: 0, Hi: 48},
	}
	if !slices.Equal(p.Buckets, want) {
		t.Fatalf("buckets %+v, want %+v", p.Buckets, want)
	}
	end := m.Set.Len()
	for k, b := range p.Buckets {
		if b.Hi != end {
			t.Fatalf("bucket %d ends at %d, want %d (buckets must tile the buffer from the end)", k, b.Hi, end)
		}
		if b.Len()*4 > 120 && b.EndParam-b.FirstParam > 1 {
			t.Errorf("bucket %d holds %d bytes over the cap with %d parameters", k, b.Len()*4, b.EndParam-b.FirstParam)
		}
		end = b.Lo
	}
	if end != 0 {
		t.Fatalf("buckets stop at %d, want 0", end)
	}
}

func TestTrackerStartsBucketsInOrder(t *testing.T) {
	m := mlp(t)
	p, err := NewPlan(m.Set, 4*10)
	if err != nil {
		t.Fatal(err)
	}
	ps := m.Set.Params()
	tr := NewTracker(p)
	var started []int
	// Report in forward order (the worst order): nothing may start before the
	// last parameter (bucket 0) is ready, then everything at once, in order.
	for i, q := range ps {
		got, err := tr.Ready(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		if i < len(ps)-1 && len(got) != 0 {
			t.Fatalf("bucket(s) %v started before bucket 0 was ready", got)
		}
		started = append(started, got...)
	}
	want := make([]int, len(p.Buckets))
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(started, want) || !tr.Done() {
		t.Fatalf("started %v, want %v", started, want)
	}
	if _, err := tr.Ready(ps[0], nil); err == nil {
		t.Fatal("a parameter reported twice in one pass was accepted")
	}
	// In reverse order (as backward does) each bucket starts as soon as its
	// first parameter (the last one reported) is ready.
	tr.Reset()
	started = started[:0]
	for i := len(ps) - 1; i >= 0; i-- {
		got, _ := tr.Ready(ps[i], nil)
		for _, k := range got {
			if p.Buckets[k].FirstParam != i {
				t.Errorf("bucket %d started at parameter %d, its first is %d", k, i, p.Buckets[k].FirstParam)
			}
		}
		started = append(started, got...)
	}
	if !slices.Equal(started, want) {
		t.Fatalf("reverse order started %v, want %v", started, want)
	}
}

func TestMeasureOverlap(t *testing.T) {
	t0 := time.Unix(100, 0)
	o := MeasureOverlap(t0, t0.Add(30*time.Millisecond), t0.Add(40*time.Millisecond))
	if o.CommMs != 40 || o.ExposedMs != 10 || o.Hidden != 0.75 {
		t.Fatalf("got %+v, want comm 40, exposed 10, hidden 0.75", o)
	}
	if o := MeasureOverlap(t0, t0.Add(50*time.Millisecond), t0.Add(40*time.Millisecond)); o.Hidden != 1 || o.ExposedMs != 0 {
		t.Fatalf("comm ending before backward: %+v, want all hidden", o)
	}
	if o := (MeasureOverlap(time.Time{}, t0, t0)); o != (Overlap{}) {
		t.Fatalf("no communication: %+v", o)
	}
}

func TestChecksumSeesOneBit(t *testing.T) {
	w := make([]float32, 5000)
	for i := range w {
		w[i] = float32(i) * 0.25
	}
	a := Checksum(w)
	w[4321] = float32frombits(bits(w[4321]) ^ 1)
	if Checksum(w) == a {
		t.Fatal("flipping the lowest mantissa bit did not change the checksum")
	}
}

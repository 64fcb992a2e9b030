package collective

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestAssignBucketsHandWorked(t *testing.T) {
	got, err := AssignBuckets([]int64{4, 4, 10, 3, 3, 3}, 8)
	if err != nil {
		t.Fatal(err)
	}
	want := []Bucket{{Lo: 4, Hi: 6, Bytes: 6}, {Lo: 3, Hi: 4, Bytes: 3}, {Lo: 2, Hi: 3, Bytes: 10}, {Lo: 0, Hi: 2, Bytes: 8}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if DefaultBucketCapBytes != 25*1024*1024 {
		t.Fatal("PyTorch's bucket_cap_mb=25 is 25 MiB")
	}
	if _, err := AssignBuckets([]int64{1, -1}, 8); !errors.Is(err, ErrBadArgument) {
		t.Fatal(err)
	}
	if b, _ := AssignBuckets(nil, 0); len(b) != 0 {
		t.Fatal(b)
	}
}

// TestAssignBucketsProperties: buckets tile the parameters in reverse order,
// respect the cap (unless one oversized parameter), and are maximal: the
// next parameter would not have fitted.
func TestAssignBucketsProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for it := 0; it < 500; it++ {
		sizes := make([]int64, rng.IntN(40))
		for i := range sizes {
			sizes[i] = rng.Int64N(100)
		}
		capB := 1 + rng.Int64N(150)
		bs, err := AssignBuckets(sizes, capB)
		if err != nil {
			t.Fatal(err)
		}
		hi := len(sizes)
		for _, b := range bs {
			if b.Hi != hi || b.Lo >= b.Hi {
				t.Fatalf("sizes %v cap %d: buckets %+v do not tile in reverse", sizes, capB, bs)
			}
			var sum int64
			for _, s := range sizes[b.Lo:b.Hi] {
				sum += s
			}
			if sum != b.Bytes || (sum > capB && b.Hi-b.Lo > 1) {
				t.Fatalf("sizes %v cap %d: bucket %+v", sizes, capB, b)
			}
			if b.Lo > 0 && sum > 0 && sum+sizes[b.Lo-1] <= capB {
				t.Fatalf("sizes %v cap %d: bucket %+v could hold parameter %d", sizes, capB, b, b.Lo-1)
			}
			hi = b.Lo
		}
		if hi != 0 {
			t.Fatalf("sizes %v: buckets end at %d", sizes, hi)
		}
	}
}

package leader

import (
	"errors"
	"testing"

	"github.com/troupe-ml/troupe/mesh"
)

// The replicas of each stage are compared; the odd one out is named (with
// two replicas, the second).
func TestCheckReplicasNamesTheOddOneOut(t *testing.T) {
	m, _ := mesh.Of(3, 2) // stage 0: ranks 0 1 2, stage 1: ranks 3 4 5
	sums := []uint64{7, 7, 7, 9, 8, 9}
	var d *DivergedError
	if err := CheckReplicas(m, 0, 12, func(r int) uint64 { return sums[r] }); !errors.As(err, &d) || d.Rank != 4 || d.Like != 3 || d.Step != 12 {
		t.Fatalf("%v, want rank 4 named, like rank 3, after step 12", err)
	}
	two, _ := mesh.Of(2, 1)
	if err := CheckReplicas(two, 0, 1, func(r int) uint64 { return uint64(r) }); !errors.As(err, &d) || d.Rank != 1 || !errors.Is(err, ErrDiverged) {
		t.Fatalf("%v, want rank 1 named", err)
	}
	if err := CheckReplicas(m, 0, 1, func(r int) uint64 { return uint64(r / 3) }); err != nil {
		t.Fatalf("equal replicas: %v", err)
	}
	// ZeRO-3 shard groups of 2 over 4 replicas: replicas 0 and 2 hold one
	// shard, 1 and 3 the other; only those pairs must agree.
	four, _ := mesh.Of(4, 1)
	if err := CheckReplicas(four, 2, 1, func(r int) uint64 { return uint64(r % 2) }); err != nil {
		t.Fatalf("equal shards: %v", err)
	}
	if err := CheckReplicas(four, 2, 1, func(r int) uint64 { return uint64(r) }); !errors.As(err, &d) || d.Rank != 2 || d.Like != 0 {
		t.Fatalf("%v, want rank 2 named, like rank 0", err)
	}
}

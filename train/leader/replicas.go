package leader

import (
	"fmt"

	"github.com/troupe-ml/troupe/mesh"
)

// DivergedError names a rank whose parameters differ from the other
// replicas of its model part (errors.Is(err, ErrDiverged) holds).
type DivergedError struct {
	// Step is the number of steps applied when they were compared.
	Step int
	// Rank is the odd one out (with two replicas, the second); Like holds
	// what the majority (or the first) holds.
	Rank, Like int
}

func (e *DivergedError) Error() string {
	return fmt.Sprintf("%v: after step %d rank %d's parameters differ from rank %d's, the same model part", ErrDiverged, e.Step, e.Rank, e.Like)
}

func (e *DivergedError) Unwrap() error { return ErrDiverged }

// CheckReplicas compares the checksum of every model part's replicas (a
// stage's, or a stage's shard's; with ZeRO-3 shard groups of zeroShards
// replicas, those holding the same shard) and names the first rank that
// differs from the most common value (a *DivergedError). Executors check
// their replicas with it, and the leader core the members' checksums.
func CheckReplicas(m mesh.Mesh, zeroShards, step int, sum func(rank int) uint64) error {
	S := max(1, zeroShards)
	for g := range m.Parts() * S {
		part, z := g/S, g%S
		var ranks []int
		for d := z; d < m.DP; d += S {
			ranks = append(ranks, m.PartRank(part, d))
		}
		count := map[uint64]int{}
		for _, r := range ranks {
			count[sum(r)]++
		}
		if len(count) == 1 {
			continue
		}
		like := ranks[0]
		for _, r := range ranks {
			if count[sum(r)] > count[sum(like)] {
				like = r
			}
		}
		for _, r := range ranks {
			if sum(r) != sum(like) {
				return &DivergedError{Step: step, Rank: r, Like: like}
			}
		}
	}
	return nil
}

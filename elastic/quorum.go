package elastic

import "fmt"

// Quorum says whose agreement a new generation needs.
type Quorum uint8

const (
	// QuorumMajority: a new world needs the acknowledgement of a strict
	// majority of the previous generation's members. A partitioned minority
	// never commits a world of its own (no split brain); it waits.
	QuorumMajority Quorum = iota
	// QuorumAny: every live node the proposer sees must agree, and nothing
	// more. Both sides of a partition go on with their own worlds (split
	// brain by design): for experiments and two-node clusters.
	QuorumAny
)

func (q Quorum) String() string {
	switch q {
	case QuorumMajority:
		return "majority"
	case QuorumAny:
		return "any"
	}
	return fmt.Sprintf("Quorum(%d)", uint8(q))
}

// ParseQuorum reads "majority" or "any" (the --quorum flag).
func ParseQuorum(s string) (Quorum, error) {
	switch s {
	case "majority", "":
		return QuorumMajority, nil
	case "any":
		return QuorumAny, nil
	}
	return 0, fmt.Errorf("%w: quorum %q: want majority or any", ErrBadConfig, s)
}

package collective

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// States the alignment gives a member that has no record of an operation.
const (
	// FlightNotEntered: the member's record ends before the operation (it
	// never got that far).
	FlightNotEntered = "not entered"
	// FlightSkipped: the member recorded operations on both sides of it
	// but not it (it left the generation before).
	FlightSkipped = "skipped"
	// FlightNoDump: the member's dump is missing (stopped, hung, gone).
	FlightNoDump = "no dump"
	// FlightForgotten: the operation is older than what the member's
	// recorder still keeps.
	FlightForgotten = "forgotten"
)

// Alignment is the ranks' flight-recorder dumps put side by side: for
// every group, each operation any member recorded, with every member's
// state, and the verdict naming the rank a hang waits on.
type Alignment struct {
	// Size is the world's size; Dumped the ranks whose dump is here and
	// Missing those expected whose dump is not.
	Size    int            `json:"size"`
	Dumped  []int          `json:"dumped"`
	Missing []int          `json:"missing"`
	Groups  []AlignedGroup `json:"groups"`
	// Verdict is nil when no operation is pending on any rank that
	// dumped.
	Verdict *Verdict `json:"verdict"`
}

// AlignedGroup is one group's operations, in the order its members issue
// them (generation, then op id).
type AlignedGroup struct {
	ID      uint32      `json:"id"`
	Members []int       `json:"members"`
	Ops     []AlignedOp `json:"ops"`
}

// AlignedOp is one operation of a group on every member.
type AlignedOp struct {
	Gen   uint64 `json:"gen"`
	Op    uint64 `json:"op"`
	Kind  string `json:"kind"`
	Bytes int64  `json:"bytes"`
	// States holds each member's state (by group rank): a FlightOp state,
	// or one of the alignment's (FlightNotEntered…). Errs holds the error
	// of a member on which it failed.
	States []string `json:"states"`
	Errs   []string `json:"errors"`
	// First is the earliest time a member entered it.
	First time.Time `json:"first"`
	// blame counts the failures blaming each member.
	blame []int
}

// pending reports whether a member that dumped has not finished it.
func (o *AlignedOp) pending() bool {
	for _, s := range o.States {
		switch s {
		case FlightDone, FlightForgotten, FlightNoDump:
		default:
			return true
		}
	}
	return false
}

// Verdict names the first operation that did not finish everywhere and
// the rank it waits on.
type Verdict struct {
	Group   uint32 `json:"group"`
	Members []int  `json:"members"`
	Gen     uint64 `json:"gen"`
	Op      uint64 `json:"op"`
	Kind    string `json:"kind"`
	Bytes   int64  `json:"bytes"`
	// Rank is the world rank named; What what it did: "did not enter",
	// "sent no dump" or "did not finish".
	Rank int    `json:"rank"`
	What string `json:"what"`
	// Waiting are the members that entered the operation; Detail is the
	// error one of them failed with, if any.
	Waiting []int  `json:"waiting"`
	Detail  string `json:"detail,omitempty"`
}

func (v *Verdict) String() string {
	s := fmt.Sprintf("rank %d %s %s (group %d of ranks %v, gen %d op %d, %s)", v.Rank, v.What, v.Kind, v.Group, v.Members, v.Gen, v.Op, fmtBytes(v.Bytes))
	if len(v.Waiting) > 0 {
		s += fmt.Sprintf("; ranks %v entered it", v.Waiting)
	}
	if v.Detail != "" {
		s += ": " + v.Detail
	}
	return s
}

// Align puts dumps side by side. expected lists the world ranks that
// should have dumped (nil: every rank of the largest world a dump
// names); a rank without a dump is Missing.
func Align(dumps []FlightDump, expected []int) *Alignment {
	byRank := map[int]*FlightDump{}
	size := 0
	for i := range dumps {
		d := &dumps[i]
		if _, dup := byRank[d.Rank]; !dup {
			byRank[d.Rank] = d
		}
		size = max(size, d.Size)
	}
	if expected == nil {
		for r := range size {
			expected = append(expected, r)
		}
	}
	a := &Alignment{Size: size, Dumped: []int{}, Missing: []int{}, Groups: []AlignedGroup{}}
	for r := range byRank {
		a.Dumped = append(a.Dumped, r)
	}
	slices.Sort(a.Dumped)
	for _, r := range expected {
		if byRank[r] == nil {
			a.Missing = append(a.Missing, r)
		}
	}
	members := map[uint32][]int{}
	for _, r := range a.Dumped {
		for _, g := range byRank[r].Groups {
			if _, ok := members[g.ID]; !ok {
				members[g.ID] = g.Members
			}
		}
	}
	ids := make([]uint32, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		a.Groups = append(a.Groups, alignGroup(id, members[id], byRank))
	}
	a.Verdict = verdict(a)
	return a
}

type opKey struct{ gen, op uint64 }

func cmpKey(a, b opKey) int {
	if c := cmp.Compare(a.gen, b.gen); c != 0 {
		return c
	}
	return cmp.Compare(a.op, b.op)
}

func alignGroup(id uint32, members []int, byRank map[int]*FlightDump) AlignedGroup {
	g := AlignedGroup{ID: id, Members: members, Ops: []AlignedOp{}}
	recs := make([]map[opKey]*FlightOp, len(members))
	var keys []opKey
	seen := map[opKey]bool{}
	for i, m := range members {
		d := byRank[m]
		if d == nil {
			continue
		}
		recs[i] = map[opKey]*FlightOp{}
		for j := range d.Ops {
			op := &d.Ops[j]
			if op.Group != id {
				continue
			}
			k := opKey{op.Gen, op.Op}
			recs[i][k] = op
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	slices.SortFunc(keys, cmpKey)
	// span is each member's first and last recorded operation of the group.
	span := make([][2]opKey, len(members))
	for i, r := range recs {
		first := true
		for k := range r {
			if first || cmpKey(k, span[i][0]) < 0 {
				span[i][0] = k
			}
			if first || cmpKey(k, span[i][1]) > 0 {
				span[i][1] = k
			}
			first = false
		}
	}
	for _, k := range keys {
		row := AlignedOp{Gen: k.gen, Op: k.op, States: make([]string, len(members)), Errs: make([]string, len(members)), blame: make([]int, len(members))}
		for i, m := range members {
			d := byRank[m]
			if d == nil {
				row.States[i] = FlightNoDump
				continue
			}
			if op := recs[i][k]; op != nil {
				row.States[i], row.Errs[i] = op.State, op.Err
				if row.Kind == "" {
					row.Kind, row.Bytes = op.Kind, op.Bytes
				}
				if row.First.IsZero() || op.Start.Before(row.First) {
					row.First = op.Start
				}
				if op.State == FlightFailed {
					if c := slices.Index(members, op.Culprit); c >= 0 {
						row.blame[c]++
					}
				}
				continue
			}
			row.States[i] = absentState(k, span[i], len(recs[i]) > 0, d.Dropped > 0)
		}
		g.Ops = append(g.Ops, row)
	}
	return g
}

// absentState says why a member has no record of operation k: its record
// of the group (span: its first and last operation; has: it has one) ends
// before k, starts after it, or jumps over it.
func absentState(k opKey, span [2]opKey, has, dropped bool) string {
	before := has && cmpKey(span[0], k) < 0
	after := has && cmpKey(span[1], k) > 0
	switch {
	case !after:
		return FlightNotEntered
	case !before && dropped:
		return FlightForgotten
	case !before:
		return FlightNotEntered
	}
	return FlightSkipped
}

// verdict finds, over every group, the pending operation entered first,
// and names the member it waits on: one that did not enter it (alive, but
// elsewhere), else one whose dump is missing, else the one the failures
// blame, else the first that did not finish.
func verdict(a *Alignment) *Verdict {
	var best *AlignedOp
	var bestG *AlignedGroup
	for gi := range a.Groups {
		g := &a.Groups[gi]
		for oi := range g.Ops {
			op := &g.Ops[oi]
			if !op.pending() {
				continue
			}
			if best == nil || op.First.Before(best.First) {
				best, bestG = op, g
			}
			break
		}
	}
	if best == nil {
		return nil
	}
	v := &Verdict{Group: bestG.ID, Members: bestG.Members, Gen: best.Gen, Op: best.Op, Kind: best.Kind, Bytes: best.Bytes, Rank: -1, Waiting: []int{}}
	blamed := func(states ...string) int {
		pick := -1
		for i, s := range best.States {
			if slices.Contains(states, s) && (pick < 0 || best.blame[i] > best.blame[pick]) {
				pick = i
			}
		}
		return pick
	}
	for i, s := range best.States {
		switch s {
		case FlightRunning, FlightDone, FlightFailed:
			v.Waiting = append(v.Waiting, bestG.Members[i])
		}
	}
	switch {
	case blamed(FlightNotEntered, FlightSkipped) >= 0:
		v.Rank, v.What = bestG.Members[blamed(FlightNotEntered, FlightSkipped)], "did not enter"
	case blamed(FlightNoDump) >= 0:
		v.Rank, v.What = bestG.Members[blamed(FlightNoDump)], "sent no dump (stopped, hung or gone) and did not finish"
	default:
		i := slices.IndexFunc(best.blame, func(n int) bool { return n > 0 })
		if i < 0 || best.States[i] == FlightDone {
			i = slices.IndexFunc(best.States, func(s string) bool { return s != FlightDone && s != FlightForgotten })
		}
		v.Rank, v.What = bestG.Members[i], "did not finish"
	}
	v.Detail = verdictDetail(best, bestG.Members, v.Rank)
	return v
}

// verdictDetail picks the error the verdict quotes: the first member's
// error that names the blamed rank, else the first member's error. Which
// waiting member times out first is a race (on a ring, a rank may time out
// on its neighbour that is itself stuck on the culprit), so the error that
// names the culprit is the one worth reading, when there is one.
func verdictDetail(op *AlignedOp, members []int, rank int) string {
	first := -1
	for i, e := range op.Errs {
		if e == "" {
			continue
		}
		if first < 0 {
			first = i
		}
		if namesRank(e, rank) {
			return fmt.Sprintf("rank %d: %s", members[i], e)
		}
	}
	if first < 0 {
		return ""
	}
	return fmt.Sprintf("rank %d: %s", members[first], op.Errs[first])
}

// namesRank reports whether text holds "rank N" for this N as a whole
// number ("rank 2" does not name rank 20).
func namesRank(text string, rank int) bool {
	word := fmt.Sprintf("rank %d", rank)
	for rest := text; ; {
		i := strings.Index(rest, word)
		if i < 0 {
			return false
		}
		rest = rest[i+len(word):]
		if rest == "" || rest[0] < '0' || rest[0] > '9' {
			return true
		}
	}
}

// alignContext is how many finished operations before a group's first
// pending one the text shows.
const alignContext = 4

// WriteText prints the alignment for people: per group, the operations
// around the first pending one with every member's state, then the
// verdict.
func (a *Alignment) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "world of %d ranks; dumps from ranks %v", a.Size, a.Dumped)
	if len(a.Missing) > 0 {
		fmt.Fprintf(&b, "; no dump from ranks %v", a.Missing)
	}
	b.WriteString("\n")
	for _, g := range a.Groups {
		fmt.Fprintf(&b, "\ngroup %d (ranks %v):", g.ID, g.Members)
		if len(g.Ops) == 0 {
			b.WriteString(" no operations recorded\n")
			continue
		}
		b.WriteString("\n")
		first := slices.IndexFunc(g.Ops, func(o AlignedOp) bool { return o.pending() })
		lo, hi := 0, len(g.Ops)
		if first < 0 {
			lo = max(0, len(g.Ops)-alignContext)
		} else {
			lo = max(0, first-alignContext)
			hi = min(len(g.Ops), first+4*alignContext)
		}
		if lo > 0 {
			fmt.Fprintf(&b, "  (%d earlier operations finished on every rank that dumped)\n", lo)
		}
		tw := tabwriter.NewWriter(&b, 2, 8, 2, ' ', 0)
		fmt.Fprint(tw, "  gen\top\tkind\tbytes")
		for _, m := range g.Members {
			fmt.Fprintf(tw, "\trank %d", m)
		}
		fmt.Fprintln(tw)
		for _, o := range g.Ops[lo:hi] {
			fmt.Fprintf(tw, "  %d\t%d\t%s\t%s", o.Gen, o.Op, o.Kind, fmtBytes(o.Bytes))
			for _, s := range o.States {
				fmt.Fprintf(tw, "\t%s", s)
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		if hi < len(g.Ops) {
			fmt.Fprintf(&b, "  (%d later operations)\n", len(g.Ops)-hi)
		}
	}
	if a.Verdict == nil {
		b.WriteString("\nverdict: no operation is pending on any rank that dumped\n")
	} else {
		fmt.Fprintf(&b, "\nverdict: %s\n", a.Verdict)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

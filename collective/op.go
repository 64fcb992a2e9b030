package collective

import (
	"fmt"
	"strings"

	"github.com/troupe-ml/troupe/kernels"
)

// Kind is the kind of a collective operation.
type Kind uint8

const (
	// KindAllReduce: ring reduce-scatter then ring all-gather.
	KindAllReduce Kind = iota + 1
	// KindReduceScatter: the ring reduce-scatter alone; rank r ends owning
	// chunk (r+1) mod P (see OwnedChunk).
	KindReduceScatter
	// KindAllGather: the ring all-gather alone; rank r contributes chunk
	// (r+1) mod P.
	KindAllGather
	// KindBroadcast: a pipelined chain from the root along the ring.
	KindBroadcast
	// KindBarrier: no data, only the completion ring.
	KindBarrier
	// KindNaiveAllReduce: every rank sends its buffer to rank 0, which sums
	// and sends the result back to each rank: the baseline the ring beats.
	KindNaiveAllReduce
	kindEnd
)

var kindNames = [...]string{"", "AllReduce", "ReduceScatter", "AllGather", "Broadcast", "Barrier", "NaiveAllReduce"}

func (k Kind) String() string {
	if k > 0 && k < kindEnd {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Valid reports whether k names an operation.
func (k Kind) Valid() bool { return k > 0 && k < kindEnd }

// ReduceOp says how a reduction combines the ranks' values: a base (Sum,
// Avg, Max) and the type the values travel in between ranks (float32
// unless In says otherwise).
type ReduceOp uint8

const (
	// Sum adds the ranks' values.
	Sum ReduceOp = iota
	// Avg adds them and divides by the number of ranks; the owner of each
	// chunk divides once, before the all-gather, so every rank ends with the
	// same bits.
	Avg
	// Max keeps the largest value (NaN wins, as with Go's max): the row
	// maximum of a vocabulary-parallel softmax.
	Max
)

// wireShift places the wire type in a ReduceOp's upper bits.
const wireShift = 4

// In returns the reduction o with its values sent in type dt: kernels.BF16
// or F16 halve the bytes on the wire, each hop rounding its sums to dt
// (see pack), kernels.F32 is o as it is. The buffer stays float32.
func (o ReduceOp) In(dt kernels.DType) ReduceOp { return o.Base() | ReduceOp(dt)<<wireShift }

// Base is o's combination, without its wire type.
func (o ReduceOp) Base() ReduceOp { return o & (1<<wireShift - 1) }

// Wire is the type o's values travel in.
func (o ReduceOp) Wire() kernels.DType { return kernels.DType(o >> wireShift) }

// valid reports whether o has a known base and wire type.
func (o ReduceOp) valid() bool {
	b, w := o.Base(), o.Wire()
	return (b == Sum || b == Avg || b == Max) && (w == kernels.F32 || w.Low())
}

func (o ReduceOp) String() string {
	if w := o.Wire(); w != kernels.F32 {
		return o.Base().String() + "/" + w.String()
	}
	switch o {
	case Sum:
		return "sum"
	case Avg:
		return "avg"
	case Max:
		return "max"
	}
	return fmt.Sprintf("ReduceOp(%d)", uint8(o))
}

// ParseReduceOp reads "sum", "avg" or "max", optionally followed by a
// wire type: "sum/bf16", "avg/fp16".
func ParseReduceOp(s string) (ReduceOp, error) {
	if base, wire, ok := strings.Cut(s, "/"); ok {
		o, err := ParseReduceOp(base)
		if err != nil {
			return 0, err
		}
		w, err := kernels.ParseDType(wire)
		if err != nil {
			return 0, fmt.Errorf("%w: reduce op %q: %v", ErrBadArgument, s, err)
		}
		return o.In(w), nil
	}
	switch s {
	case "sum":
		return Sum, nil
	case "avg", "average", "mean":
		return Avg, nil
	case "max":
		return Max, nil
	}
	return 0, fmt.Errorf("%w: reduce op %q: want sum, avg or max", ErrBadArgument, s)
}

// OpID identifies an operation within a group: the generation it belongs to
// and its position in the order the ranks issued operations in that
// generation (0, 1, 2…). Every rank must issue the same operations in the
// same order, as with NCCL and PyTorch DDP.
type OpID struct {
	Gen uint64
	Op  uint64
}

func (id OpID) String() string { return fmt.Sprintf("gen %d op %d", id.Gen, id.Op) }

// Spec describes one operation as a rank issues it.
type Spec struct {
	Kind Kind
	// Buf is reduced, gathered or broadcast in place. The operation owns it
	// until it completes; Core reads and writes it.
	Buf []float32
	// Reduce applies to AllReduce, ReduceScatter and NaiveAllReduce; a
	// 16-bit wire type (ReduceOp.In) to the ring's AllReduce and
	// ReduceScatter only.
	Reduce ReduceOp
	// Root is the broadcasting rank of a Broadcast (a group rank).
	Root int
	// Algo is an AllReduce's algorithm; AlgoAuto (the zero value) lets
	// Config.AllReduceAlgorithm choose. Other kinds take AlgoAuto only.
	Algo Algorithm
}

// Completion reports that an operation finished: Err is nil when it
// succeeded on this rank.
type Completion struct {
	ID   OpID
	Kind Kind
	Err  error
}

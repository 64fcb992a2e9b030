package collective

import (
	"math"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/kernels"
)

// TestLandingIsWhereTheCoreCopies: for every data message of an
// all-gather, a ring all-reduce and a broadcast, Landing.Land names
// exactly the values the Core copies that message into (nil for the
// reduce-scatter steps, which add); a message whose payload is already
// there (read in place) leaves the buffer as the copy would.
func TestLandingIsWhereTheCoreCopies(t *testing.T) {
	const sentinel = -7
	for P := 2; P <= 6; P++ {
		for _, n := range []int{0, 1, P - 1, P + 1, 37, 200} {
			for _, kind := range []Kind{KindAllGather, KindAllReduce, KindBroadcast} {
				cfg := DefaultConfig()
				cfg.SubChunkBytes, cfg.SmallAllReduceBytes = 4*5, -1
				for r := range P {
					buf := make([]float32, n)
					spec := Spec{Kind: kind, Root: (r + 1) % P, Buf: buf}
					l, ok := LandingOf(cfg, spec, r, P)
					if !ok {
						t.Fatalf("P=%d n=%d %s rank %d: no landing", P, n, kind, r)
					}
					core, _ := NewCore(cfg, 0, r, P, nil)
					if _, err := core.Start(time.Unix(0, 0), spec); err != nil {
						t.Fatal(err)
					}
					op := core.ops[0]
					for seq := 0; seq < op.recvNeed; seq++ {
						land := l.Land(uint32(seq))
						step := seq/op.numSub + 1
						copied := kind != KindAllReduce || step > P-1
						if !copied {
							if land != nil {
								t.Fatalf("P=%d n=%d %s rank %d seq %d: a reduce-scatter step lands", P, n, kind, r, seq)
							}
							continue
						}
						for i := range buf {
							buf[i] = sentinel
						}
						// where the Core copies: a payload of distinct values
						// of the length it expects, from the left neighbour
						want := len(land)
						payload := make([]float32, want)
						for i := range payload {
							payload[i] = float32(1000 + i)
						}
						op.seen[seq/64] &^= 1 << (seq % 64)
						if err := core.onData(op, &Message{Type: MsgData, From: mod(r-1, P), To: r, Seq: uint32(seq), Kind: kind, Len: uint64(n), Root: spec.Root, Payload: payload}); err != nil {
							t.Fatalf("P=%d n=%d %s rank %d seq %d: %v", P, n, kind, r, seq, err)
						}
						changed, lo := 0, landOffset(buf, land)
						for i, v := range buf {
							if v != sentinel {
								changed++
								if i < lo || i >= lo+len(land) || v != payload[i-lo] {
									t.Fatalf("P=%d n=%d %s rank %d seq %d: the Core wrote %v at %d, the landing is [%d, %d)", P, n, kind, r, seq, v, i, lo, lo+len(land))
								}
							}
						}
						if changed != len(land) {
							t.Fatalf("P=%d n=%d %s rank %d seq %d: the Core wrote %d values, the landing holds %d", P, n, kind, r, seq, changed, len(land))
						}
						// read in place: the payload is the landing itself
						copy(land, payload)
						op.seen[seq/64] &^= 1 << (seq % 64)
						if err := core.onData(op, &Message{Type: MsgData, From: mod(r-1, P), To: r, Seq: uint32(seq), Kind: kind, Len: uint64(n), Root: spec.Root, Payload: land}); err != nil {
							t.Fatal(err)
						}
						for i, v := range land {
							if math.Float32bits(v) != math.Float32bits(payload[i]) {
								t.Fatalf("read in place: value %d is %v", i, v)
							}
						}
						core.Ready()
					}
					if l.Land(uint32(op.recvNeed)) != nil {
						t.Fatalf("P=%d n=%d %s rank %d: a seq past the schedule lands", P, n, kind, r)
					}
				}
			}
		}
	}
	// No landing: recursive doubling, a 16-bit wire, the broadcast's root,
	// a reduce-scatter, one rank.
	cfg := DefaultConfig()
	buf := make([]float32, 8)
	for _, c := range []struct {
		spec Spec
		rank int
	}{
		{Spec{Kind: KindAllReduce, Buf: buf, Algo: AlgoRecursiveDoubling}, 0},
		{Spec{Kind: KindAllReduce, Buf: buf, Reduce: Sum.In(kernels.BF16)}, 0},
		{Spec{Kind: KindBroadcast, Buf: buf, Root: 1}, 1},
		{Spec{Kind: KindReduceScatter, Buf: buf}, 0},
	} {
		if _, ok := LandingOf(cfg, c.spec, c.rank, 3); ok {
			t.Errorf("%+v: a landing", c.spec)
		}
	}
	if _, ok := LandingOf(cfg, Spec{Kind: KindAllGather, Buf: buf}, 0, 1); ok {
		t.Error("one rank: a landing")
	}
}

// landOffset is where land starts in buf.
func landOffset(buf, land []float32) int {
	if len(land) == 0 {
		return 0
	}
	for i := range buf {
		if &buf[i] == &land[0] {
			return i
		}
	}
	return -1
}

package worker

import (
	"fmt"

	"go.uber.org/zap"
)

// PartState is a worker's whole training state of the model part it
// holds, on the host: what a worker that leaves hands to one that stays,
// so that a part with no other holder is not lost (graceful hand-over).
type PartState struct {
	// Hold is what the state is (its part, steps applied, cursor).
	Hold Holding
	// Steps is the optimizer's update count.
	Steps int
	// Bufs are the part's weights, then its optimizer's state buffers.
	Bufs [][]float32
}

// ExportPart copies the part the worker holds to the host. It needs a
// part held whole: ZeRO's sharded state has no single holder to hand over.
func (w *Worker) ExportPart() (PartState, error) {
	if w.model == nil || w.hold.Part < 0 || w.built != w.hold.Part {
		return PartState{}, fmt.Errorf("%w: no model part to hand over", ErrNoState)
	}
	if w.hold.ZeroGroup > 0 || w.optRanges != nil || w.zweights != nil {
		return PartState{}, fmt.Errorf("%w: a ZeRO shard is not handed over", ErrConfig)
	}
	bufs := w.stateBufs()
	ps := PartState{Hold: w.hold, Steps: w.opt.Steps(), Bufs: make([][]float32, len(bufs))}
	ps.Hold.Undo, ps.Hold.UndoCursor = false, 0
	for i, b := range bufs {
		ps.Bufs[i] = make([]float32, b.Len())
		w.be.Download(ps.Bufs[i], b)
	}
	return ps, nil
}

// ImportPart makes the worker hold ps, the part another worker handed
// over: it builds the part and takes its state. The worker must have no
// place in a generation (a standby); what it held before is replaced.
func (w *Worker) ImportPart(ps PartState) error {
	if w.rank >= 0 {
		return fmt.Errorf("%w: rank %d of generation %d takes no hand-over", ErrStale, w.rank, w.gen)
	}
	if ps.Hold.Part < 0 || ps.Hold.ZeroGroup > 0 {
		return fmt.Errorf("%w: a hand-over of part %d (ZeRO group %d)", ErrConfig, ps.Hold.Part, ps.Hold.ZeroGroup)
	}
	w.hold = NoHolding // a failed import leaves a mix
	if w.model == nil || w.built != ps.Hold.Part || w.optRanges != nil || w.zweights != nil {
		if err := w.buildPart(ps.Hold.Part); err != nil {
			return err
		}
	}
	bufs := w.stateBufs()
	if len(bufs) != len(ps.Bufs) {
		return fmt.Errorf("%w: a hand-over of %d buffers for part %d, which has %d", ErrConfig, len(ps.Bufs), ps.Hold.Part, len(bufs))
	}
	for i, b := range bufs {
		if b.Len() != len(ps.Bufs[i]) {
			return fmt.Errorf("%w: hand-over buffer %d of %d values, part %d's has %d", ErrConfig, i, len(ps.Bufs[i]), ps.Hold.Part, b.Len())
		}
	}
	for i, b := range bufs {
		w.be.Upload(b, ps.Bufs[i])
	}
	w.dropUndo()
	w.opt.SetSteps(ps.Steps)
	w.hold = ps.Hold
	w.log.Info("model part taken over", zap.Int("part", ps.Hold.Part), zap.Int("step", ps.Hold.Applied))
	return nil
}

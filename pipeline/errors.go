package pipeline

import "errors"

var (
	// ErrBadArgument: a stage count, micro-batch count, cost or layer count
	// is out of range.
	ErrBadArgument = errors.New("pipeline: bad argument")
	// ErrUnknownSchedule: a schedule name other than gpipe or 1f1b.
	ErrUnknownSchedule = errors.New("pipeline: unknown schedule")
	// ErrInvalidSchedule: a schedule is incomplete, out of order, or sends
	// and receives that do not match (Schedule.Validate).
	ErrInvalidSchedule = errors.New("pipeline: invalid schedule")
	// ErrDeadlock: no stage can make progress but some have ops left.
	ErrDeadlock = errors.New("pipeline: deadlock")
	// ErrStageLayers: an explicit --stage-layers spec is malformed or does
	// not fit the model.
	ErrStageLayers = errors.New("pipeline: bad stage layers")
	// ErrUnexpectedMessage: a message arrived that the stage's remaining
	// schedule does not receive (wrong kind, micro-batch or sender).
	ErrUnexpectedMessage = errors.New("pipeline: unexpected message")
	// ErrDuplicateMessage: the same message arrived twice; a shell that
	// follows the collectives' rule (a duplicate is ignored) drops it.
	ErrDuplicateMessage = errors.New("pipeline: duplicate message")
)

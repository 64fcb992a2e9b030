package pipeline

import "github.com/troupe-ml/troupe/failure"

var (
	// ErrBadArgument: a stage count, micro-batch count, cost or layer count
	// is out of range.
	ErrBadArgument = failure.New(failure.Config, "pipeline: bad argument")
	// ErrUnknownSchedule: a schedule name other than gpipe or 1f1b.
	ErrUnknownSchedule = failure.New(failure.Config, "pipeline: unknown schedule")
	// ErrInvalidSchedule: a schedule is incomplete, out of order, or sends
	// and receives that do not match (Schedule.Validate).
	ErrInvalidSchedule = failure.New(failure.Internal, "pipeline: invalid schedule")
	// ErrDeadlock: no stage can make progress but some have ops left.
	ErrDeadlock = failure.New(failure.Internal, "pipeline: deadlock")
	// ErrStageLayers: an explicit --stage-layers spec is malformed or does
	// not fit the model.
	ErrStageLayers = failure.New(failure.Config, "pipeline: bad stage layers")
	// ErrUnexpectedMessage: a message arrived that the stage's remaining
	// schedule does not receive (wrong kind, micro-batch or sender).
	ErrUnexpectedMessage = failure.New(failure.Internal, "pipeline: unexpected message")
	// ErrDuplicateMessage: the same message arrived twice; a shell that
	// follows the collectives' rule (a duplicate is ignored) drops it.
	ErrDuplicateMessage = failure.New(failure.Internal, "pipeline: duplicate message")
)

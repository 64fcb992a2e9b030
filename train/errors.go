package train

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/troupe-ml/troupe/failure"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/train/cadence"
	"github.com/troupe-ml/troupe/train/leader"
)

var (
	// ErrConfig: a configuration that cannot work; every such error is a
	// *FieldError naming the field.
	ErrConfig = leader.ErrConfig
	// ErrDiverged: replicas of a stage hold different parameters.
	ErrDiverged = leader.ErrDiverged
	// ErrStageLost: a pipeline stage that no member holds and no checkpoint
	// can restore (an elastic job, after AgentConfig.LostStageTimeout), or
	// every stage, when no member holds anything of a job that trained.
	ErrStageLost = leader.ErrStageLost
	// ErrRendezvousTimeout: an elastic node could not train in a world for
	// AgentConfig.RdzvTimeout (too few nodes, or no quorum).
	ErrRendezvousTimeout = leader.ErrRendezvousTimeout
	// ErrRestarts: more generations failed transiently than
	// AgentConfig.MaxRestarts allows.
	ErrRestarts = leader.ErrRestarts
	// ErrWorldTooSmall: an elastic job's world shrank below what its
	// pipeline needs: fewer members than stages.
	ErrWorldTooSmall = leader.ErrWorldTooSmall
	// ErrOutput: an output of the run (weights, metrics, trace) cannot be
	// written.
	ErrOutput = failure.New(failure.Output, "train: cannot write an output")
	// ErrInternal: a broken invariant (ranks that disagree where they
	// cannot).
	ErrInternal = failure.New(failure.Internal, "train: internal error")
	// ErrWire: a message from a peer that does not decode (a report of
	// the leader's with values out of range, or with nothing in it).
	ErrWire = failure.New(failure.Internal, "train: bad wire message")
	// ErrLoss: the loss became NaN or infinite.
	ErrLoss = cadence.ErrLoss
)

// errNoCheckpointDir: a checkpoint asked of a run that has no checkpoint
// directory (the step loop asks only when it has one: a caller's bug).
var errNoCheckpointDir = errors.New("train: this run has no checkpoint directory")

// FieldError is a configuration field whose value cannot work, or an
// output path set by one that cannot be written. Msg may name other
// fields as {Field}; Render writes them (and Field) the way the caller
// names them (the CLI: as its flags).
type FieldError struct {
	// Field is the Config (or AgentConfig) field, e.g. "Batch".
	Field string
	// Msg says what is wrong, e.g. "12 is not divisible by {Accum} 5".
	Msg string
	// Class is what errors.Is finds: ErrConfig when nil, ErrOutput for an
	// output that cannot be written, checkpoint.ErrNoCheckpoint for a
	// required checkpoint that is not there.
	Class error
}

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// outputErr is an output of field's that cannot be written.
func outputErr(field, path string, err error) *FieldError {
	return &FieldError{Field: field, Msg: fmt.Sprintf("%s: %v", path, err), Class: ErrOutput}
}

var fieldRef = regexp.MustCompile(`\{([A-Za-z.-]+)\}`)

// Render writes the error with every field named by name.
func (e *FieldError) Render(name func(field string) string) string {
	msg := fieldRef.ReplaceAllStringFunc(e.Msg, func(m string) string { return name(m[1 : len(m)-1]) })
	return name(e.Field) + " " + msg
}

func (e *FieldError) Error() string {
	prefix := "train: invalid config: "
	switch e.Class {
	case ErrOutput:
		prefix = "train: cannot write an output: "
	case nil:
	default:
		prefix = "train: "
	}
	return prefix + e.Render(func(f string) string { return f })
}

// Unwrap makes errors.Is(err, ErrConfig) (or the error's Class) hold.
func (e *FieldError) Unwrap() error {
	if e.Class != nil {
		return e.Class
	}
	return ErrConfig
}

// DivergedError names a rank whose parameters differ from the other
// replicas of its model part (errors.Is(err, ErrDiverged) holds).
type DivergedError = leader.DivergedError

// modelErr is field's error from the model API, without nn's prefix (the
// field error says it is a configuration error already).
func modelErr(field string, err error) *FieldError {
	return fieldErr(field, "%s", strings.TrimPrefix(err.Error(), nn.ErrConfig.Error()+": "))
}

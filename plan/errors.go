package plan

import "errors"

var (
	// ErrEmpty is returned by the unit parsers for empty (or all-blank) text.
	ErrEmpty = errors.New("plan: empty value")
	// ErrNegative is returned for a value below zero.
	ErrNegative = errors.New("plan: must not be negative")
	// ErrNotFinite is returned for NaN, infinities and values too large to
	// represent.
	ErrNotFinite = errors.New("plan: value not finite or out of range")
	// ErrSyntax is returned for text that does not start with a number.
	ErrSyntax = errors.New("plan: does not start with a number")
	// ErrUnknownUnit is returned for a unit suffix the parser does not know.
	ErrUnknownUnit = errors.New("plan: unknown unit")
	// ErrNotWhole is returned where a whole number (bytes, a count) is needed
	// and the text gives a fraction.
	ErrNotWhole = errors.New("plan: not a whole number")
	// ErrInvalidConfig is returned by the Validate methods for inputs the
	// model cannot use (zero ranks, a ZeRO stage outside 0..3, …).
	ErrInvalidConfig = errors.New("plan: invalid configuration")
	// ErrBadMetrics is returned by ReadMetrics for a malformed metrics file.
	ErrBadMetrics = errors.New("plan: bad metrics file")
	// ErrNoSteps is returned by Check when no step is left to compare.
	ErrNoSteps = errors.New("plan: no steps to check")
)

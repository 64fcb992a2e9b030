package workerpb

import "github.com/troupe-ml/troupe/failure"

// FailureOf is err on the wire (nil for nil).
func FailureOf(err error) *Failure {
	if err == nil {
		return nil
	}
	c, msg := failure.Encode(err)
	return &Failure{Code: uint32(c), Message: msg}
}

// Err is the failure as an error that keeps its class (nil for none).
func (f *Failure) Err() error {
	if f == nil {
		return nil
	}
	return failure.Decode(failure.Code(f.Code), f.Message)
}

// Failed is the reply's failure as an error (nil: it succeeded). Every
// reply has it, so that a group call can collect any of them.
func (m *Status) Failed() error       { return m.GetFailure().Err() }
func (m *Formed) Failed() error       { return m.GetFailure().Err() }
func (m *StepDone) Failed() error     { return m.GetFailure().Err() }
func (m *EvalDone) Failed() error     { return m.GetFailure().Err() }
func (m *Weights) Failed() error      { return m.GetFailure().Err() }
func (m *ShardSaved) Failed() error   { return m.GetFailure().Err() }
func (m *Finished) Failed() error     { return m.GetFailure().Err() }
func (m *FlightRecord) Failed() error { return m.GetFailure().Err() }
func (m *PartTaken) Failed() error    { return m.GetFailure().Err() }

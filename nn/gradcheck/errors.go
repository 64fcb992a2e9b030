package gradcheck

import "errors"

// ErrContract is wrapped by the errors of a layer that breaks the nn.Layer
// contract (an output or input gradient of the wrong size, buffers left on
// the tape, gradients that do not accumulate); a disagreement of gradients
// is a *Mismatch instead.
var ErrContract = errors.New("gradcheck: the layer breaks the nn.Layer contract")

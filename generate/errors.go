package generate

import (
	"fmt"

	"github.com/troupe-ml/troupe/failure"
)

var (
	// ErrOptions reports generation options that cannot work (a negative
	// temperature, top-p outside (0, 1], no tokens to generate).
	ErrOptions = failure.New(failure.Config, "generate: invalid options")
	// ErrPrompt reports a prompt the model cannot read (empty, or a token
	// outside its vocabulary).
	ErrPrompt = failure.New(failure.Config, "generate: invalid prompt")
	// ErrModel reports a model that cannot generate: not a causal language
	// model (its Spec does not implement nn.CausalLM), or not whole.
	ErrModel = failure.New(failure.Config, "generate: the model cannot generate")
	// ErrContext reports a request longer than the model's context; the
	// error is a *ContextError with the numbers.
	ErrContext = failure.New(failure.Config, "generate: past the model's context")
	// ErrLogits reports logits with which no token can be chosen (NaN, or
	// every one −Inf): a broken model or broken weights.
	ErrLogits = failure.New(failure.Internal, "generate: no token can be chosen")
)

// ContextError is a request whose prompt and new tokens together pass the
// model's context (the positions it was built for). It is ErrContext.
type ContextError struct {
	// Prompt is the prompt's length, MaxNew the tokens asked for, Context
	// the model's context.
	Prompt, MaxNew, Context int
}

func (e *ContextError) Error() string {
	return fmt.Sprintf("generate: a prompt of %d tokens and %d new ones need %d positions, past the model's context of %d (ask for at most %d new tokens, or shorten the prompt)",
		e.Prompt, e.MaxNew, e.Prompt+e.MaxNew, e.Context, max(0, e.Context-e.Prompt))
}

// Unwrap makes a ContextError ErrContext.
func (e *ContextError) Unwrap() error { return ErrContext }

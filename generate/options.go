package generate

import (
	"fmt"
	"math"
)

// Options say how many tokens to generate and how each is chosen. The
// logits of a step are divided by Temperature, then cut to the TopK most
// likely tokens, then to the nucleus of probability TopP, and a token is
// drawn from what is left (Hugging Face's order of logits warpers). At
// Temperature 0 the most likely token is taken (greedy decoding; TopK,
// TopP and Seed do not matter).
type Options struct {
	// MaxNewTokens is the number of tokens to generate (at least 1). The
	// prompt and these must fit the model's context (ContextError).
	MaxNewTokens int
	// Temperature divides the logits (0: greedy; above 1 flatter, below 1
	// sharper).
	Temperature float64
	// TopK keeps the TopK most likely tokens, and any equal to the last of
	// them (0: every token).
	TopK int
	// TopP keeps the most likely tokens whose probabilities, taken in
	// decreasing order, first reach TopP (nucleus sampling), at least one;
	// in (0, 1], 1 keeps every token (0 is read as unset: 1).
	TopP float64
	// Seed seeds the sampler: the same model, prompt, options and seed
	// give the same tokens.
	Seed uint64
	// OnToken, when set, is called with each new token as soon as it is
	// chosen (to stream it); an error it returns stops the generation and
	// is returned.
	OnToken func(id int32) error
}

// DefaultOptions are 64 new tokens drawn from the model's distribution
// as it is (temperature 1, no top-k or top-p cut), seed 1.
func DefaultOptions() Options {
	return Options{MaxNewTokens: 64, Temperature: 1, TopP: 1, Seed: 1}
}

// Validate checks o and fills TopP's default (1 when 0).
func (o *Options) Validate() error {
	if o.TopP == 0 {
		o.TopP = 1
	}
	switch {
	case o.MaxNewTokens < 1:
		return fmt.Errorf("%w: max new tokens %d; want at least 1", ErrOptions, o.MaxNewTokens)
	case o.Temperature < 0 || math.IsNaN(o.Temperature) || math.IsInf(o.Temperature, 0):
		return fmt.Errorf("%w: temperature %g; want 0 (greedy) or more", ErrOptions, o.Temperature)
	case o.TopK < 0:
		return fmt.Errorf("%w: top-k %d; want 0 (off) or more", ErrOptions, o.TopK)
	case !(o.TopP > 0 && o.TopP <= 1):
		return fmt.Errorf("%w: top-p %g; want a probability in (0, 1]", ErrOptions, o.TopP)
	}
	return nil
}

// Greedy reports whether o picks the most likely token at every step.
func (o Options) Greedy() bool { return o.Temperature == 0 }

// Package generate samples text from causal language models: any model
// whose Spec implements nn.CausalLM (the GPT, Llama, a user's), given its
// whole weights. Generate runs the model's decoder, whose KV cache makes
// each new token cost one row's work; Recompute runs the whole model over
// the sequence at every step (no cache), the reference the cache path is
// checked against. Sampling follows Hugging Face's generate: temperature,
// then top-k, then top-p (nucleus), or the most likely token at
// temperature 0; with a seed it is reproducible.
//
// The package sees models through package nn only: it never knows a model
// by name and imports neither models nor train.
package generate

// Package models holds the models troupe ships, each an implementation of
// the model API (nn.Spec) registered under its name, as a user's model is:
// the MLP classifier ("mlp"), the nanoGPT-style GPT ("gpt") and the Llama
// family ("llama"). The GPT is registered as the default model
// (nn.DefaultModel: what troupe train trains without --model). Nothing
// below this package knows a model by name.
//
// Import it (for its registrations) where models are chosen by name:
//
//	import _ "github.com/troupe-ml/troupe/models"
//
// A model of one's own is written the same way: a type implementing
// nn.Spec, and an nn.Register call in an init function (see
// examples/custom-model and docs/MODELS.md).
package models

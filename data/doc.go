// Package data provides troupe's datasets and the distributed sampler.
//
// # Datasets
//
// Open(spec, options) turns a --data spec into a training and a test
// Dataset: the Go specification (Go 1.26.8's, embedded in the binary, so
// the default job needs no file) or any text file as a character- or
// byte-level corpus for language models, MNIST (from $TROUPE_MNIST_DIR, the
// Go module cache, the Docker image's /usr/share/troupe/mnist, or a
// directory of IDX files), tensors in a safetensors file, and synthetic
// data for tests and benchmarks. A Dataset is read-only and indexed by
// sample; Fill copies the rows for a list of sample indices into a Batch
// whose slices it reuses:
//
//	Dense  (MNIST, synthetic-mlp, x/y tensors): X = Rows × Features float32,
//	       Y = Rows class labels.
//	Tokens (text, synthetic-tokens, token tensors): Tokens = Rows × Context
//	       ids, Y = Rows × Context next-token ids. Sample i is the window
//	       tokens[i·C : i·C+C+1] of the stream (stride C, no overlap but the
//	       boundary token).
//
// # Tokenizers and token shards
//
// A Tokenizer encodes text to ids and back: gpt2 (GPT-2's byte-level BPE,
// tiktoken's r50k_base, 50,257 ids, <|endoftext|> = 50256, its vocabulary
// compiled into the binary from github.com/tiktoken-go/tokenizer), char
// and byte, each with an end-of-text id (EOT). TokenizerFor returns one by
// name. Prepare (troupe data prepare) tokenizes text files, directories
// and JSONL files (a "text" field a line) into llm.c's token shards — a
// header of 256 int32 (magic 20240520, version 1, token count), then
// uint16 tokens — named PREFIX_train_NNNNNN.bin and PREFIX_val_NNNNNN.bin,
// and a meta.json (Meta: tokenizer, vocabulary, counts); every document
// begins with EOT. Open reads shards — a directory, a glob or one .bin
// file, llm.c's or nanoGPT's headerless train.bin/val.bin —
// memory-mapped, so that a corpus larger than memory trains: the shards
// whose name says val are the held-out set, each shard is cut into windows
// of Context tokens (stride Context, none across shards), and every id is
// checked against the vocabulary (meta.json's, Options.VocabSize or the
// largest id + 1) when the shards are opened.
//
// MNIST pixels are normalised as the torchvision examples do,
// (p/255 − 0.1307)/0.3081. Text corpora hold out their last 10% of tokens
// as the test set; the char-level vocabulary is the sorted distinct
// characters of the whole file (TextDataset.Vocab decodes ids).
//
// # Sampler
//
// The data order is a pure function of (N, seed, shuffle, cursor): the
// cursor counts samples consumed over all ranks, epoch e is a permutation
// of [0, N) seeded by (seed, e): a Fisher–Yates shuffle, cached, up to
// MaxCachedPerm samples; above, a keyed Feistel network computed index by
// index, so that the sampler's memory does not grow with the corpus. The coordinator advances the cursor by the
// global batch each step and sends it with RunStep; rank r of P reads its
// contiguous block of that global batch with Sampler.Shard (see Split for
// how uneven batches are cut). A checkpoint stores SamplerState; resuming
// from it gives the identical stream, and rescaling to a new P at the same
// cursor re-splits the rest of the epoch without repeats or gaps. All
// randomness uses PCG's raw output with this package's own shuffling and
// normal sampling, so the stream is stable across Go releases.
//
// This package imports only safetensors and failure from troupe. Only
// Prepare starts goroutines (its tokenizing workers), and it waits for
// them before it returns.
package data

// Package plan is troupe's cost model: the arithmetic that answers, before a
// single device is rented, whether a model's training state fits, how many
// devices it needs, how long an all-reduce takes, what speedup data
// parallelism really gives, and how much of a pipeline idles in its bubble.
// It also holds a real run's per-step metrics (train --metrics-out) against
// the same model, so that predictions can be checked and the model trusted.
//
// Everything here is a pure function of its inputs: no clocks, goroutines or
// devices. The unit parsers (ParseBytes, ParseBandwidth, ParseCount) and the
// metrics reader (ReadMetrics) take user-supplied text and are fuzzed.
//
// plan imports nothing else from troupe: it sits beside collective and
// pipeline in the layer map and restates the few formulas it shares with
// them (ring traffic 2(P−1)/P·S, bubble (P−1)/(M+P−1)) so that it can be used
// without linking any of the runtime.
package plan

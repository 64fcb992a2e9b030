package train

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
)

// configKeys are Config's serialized keys in the order of the flat struct
// it was before its fields were grouped by concern, so that checkpoint
// manifests, worker processes' environment and troupe report read byte
// for byte as before. Fields added since follow, in struct order.
var configKeys = append(slices.Clip(flatConfigKeys), newConfigKeys(flatConfigKeys)...)

// flatConfigKeys are the fields of the flat Config, in its order.
var flatConfigKeys = []string{
	"Model", "ModelArgs", "Context", "Data", "Vocab", "Shuffle", "Batch", "Steps", "Epochs", "Accum",
	"Optim", "LR", "Schedule", "Warmup", "MinLRFactor", "ClipNorm", "Seed", "Init", "Save",
	"MetricsOut", "StragglerThreshold", "MetricsAddr", "DumpDir", "EvalEvery", "EvalBatches", "LogEvery",
	"Device", "Threads", "DP", "Procs", "BucketMB", "Zero", "ZeroGroup", "Precision", "ReduceDType",
	"LossScaleInit", "LossScaleWindow", "LossScaleMin", "Sync", "SyncEvery", "MaxStaleness", "Servers",
	"MaxRestarts", "OuterLR", "OuterMomentum", "OuterNesterov", "SyncDType", "CheckEvery",
	"Transport", "AllReduceAlgo", "CollectiveTimeout", "StepTimeout", "PP", "TP", "SequenceParallel",
	"MicroBatches", "PipelineSchedule", "Recompute", "StageLayers", "Partition", "Trace",
	"CkptDir", "CkptEvery", "Keep", "Resume", "ResumeRequired",
}

// newConfigKeys are the promoted fields of Config not known, in struct
// order.
func newConfigKeys(known []string) []string {
	var out []string
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Config]()) {
		if len(f.Index) == 2 && f.IsExported() && !slices.Contains(known, f.Name) {
			out = append(out, f.Name)
		}
	}
	return out
}

// MarshalJSON writes c as one flat object of its fields, as encoding/json
// writes the embedded structs' fields, in configKeys' order. Unmarshalling
// needs no method of its own: encoding/json fills promoted fields.
func (c Config) MarshalJSON() ([]byte, error) {
	type flat Config // Config's fields without this method
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the caller's encoder escapes, or not
	if err := enc.Encode(flat(c)); err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b.Bytes(), &fields); err != nil {
		return nil, err
	}
	out := []byte{'{'}
	for _, k := range configKeys {
		v, ok := fields[k]
		if !ok {
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, '"')
		out = append(out, k...)
		out = append(out, '"', ':')
		out = append(out, v...)
	}
	return append(out, '}'), nil
}

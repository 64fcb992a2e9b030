package checkpoint

import "errors"

// Sentinel errors. Every error this package returns wraps one of these (or an
// error of the FS underneath) with a message naming the file, tensor or field
// that was wrong.
var (
	// ErrNoCheckpoint: the directory holds no committed checkpoint (no
	// `latest` pointer), or not the step asked for.
	ErrNoCheckpoint = errors.New("checkpoint: no checkpoint")
	// ErrManifest: manifest.json (or a rank's part manifest) is not valid:
	// bad JSON, a field out of range, slices that do not tile a tensor, a
	// checksum that does not match.
	ErrManifest = errors.New("checkpoint: invalid manifest")
	// ErrVersion: a manifest of a format version this build cannot read.
	ErrVersion = errors.New("checkpoint: unsupported format version")
	// ErrCorrupt: a shard file is missing, truncated, or its bytes do not
	// match the manifest (size, header, CRC32C).
	ErrCorrupt = errors.New("checkpoint: corrupt checkpoint")
	// ErrSnapshot: a snapshot that cannot be saved as given (duplicate
	// tensor names, data length versus shape, stage out of range, ...).
	ErrSnapshot = errors.New("checkpoint: invalid snapshot")
	// ErrMismatch: the checkpoint does not fit what it is loaded into (a
	// parameter missing or of another shape, another optimizer, a target
	// layout that does not cover the checkpoint's parameters).
	ErrMismatch = errors.New("checkpoint: checkpoint does not match")
	// ErrCommitted: the step being saved is already the latest checkpoint;
	// it is not written again (its state is the same whatever the world).
	ErrCommitted = errors.New("checkpoint: step already committed")
	// ErrPrune: the checkpoint was committed, but removing old or stale
	// directories afterwards failed.
	ErrPrune = errors.New("checkpoint: pruning old checkpoints failed")
	// ErrConfig: invalid SaverConfig or options.
	ErrConfig = errors.New("checkpoint: invalid config")
	// ErrClosed: the AsyncSaver was closed.
	ErrClosed = errors.New("checkpoint: saver closed")
	// ErrInjected: a failure injected by FaultFS.
	ErrInjected = errors.New("checkpoint: injected fault")
	// ErrCrashed: FaultFS simulated a crash; every operation after it fails.
	ErrCrashed = errors.New("checkpoint: simulated crash")
)

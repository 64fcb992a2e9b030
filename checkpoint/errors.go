package checkpoint

import (
	"github.com/troupe-ml/troupe/failure"
)

// Sentinel errors. Every error this package returns wraps one of these (or an
// error of the FS underneath) with a message naming the file, tensor or field
// that was wrong.
var (
	// ErrNoCheckpoint: the directory holds no committed checkpoint (no
	// `latest` pointer), or not the step asked for.
	ErrNoCheckpoint = failure.New(failure.Checkpoint, "checkpoint: no checkpoint")
	// ErrManifest: manifest.json (or a rank's part manifest) is not valid:
	// bad JSON, a field out of range, slices that do not tile a tensor, a
	// checksum that does not match.
	ErrManifest = failure.New(failure.Checkpoint, "checkpoint: invalid manifest")
	// ErrVersion: a manifest of a format version this build cannot read.
	ErrVersion = failure.New(failure.Checkpoint, "checkpoint: unsupported format version")
	// ErrCorrupt: a shard file is missing, truncated, or its bytes do not
	// match the manifest (size, header, CRC32C).
	ErrCorrupt = failure.New(failure.Checkpoint, "checkpoint: corrupt checkpoint")
	// ErrSnapshot: a snapshot that cannot be saved as given (duplicate
	// tensor names, data length versus shape, stage out of range, ...).
	ErrSnapshot = failure.New(failure.Internal, "checkpoint: invalid snapshot")
	// ErrMismatch: the checkpoint does not fit what it is loaded into (a
	// parameter missing or of another shape, another optimizer, a target
	// layout that does not cover the checkpoint's parameters).
	ErrMismatch = failure.New(failure.Checkpoint, "checkpoint: checkpoint does not match")
	// ErrCommitted: the step being saved is already the latest checkpoint;
	// it is not written again (its state is the same whatever the world).
	ErrCommitted = failure.New(failure.Checkpoint, "checkpoint: step already committed")
	// ErrWrite: a checkpoint could not be written (a full disk, a
	// read-only or vanished directory); the previous one is still the
	// latest.
	ErrWrite = failure.New(failure.Output, "checkpoint: cannot write the checkpoint")
	// ErrPrune: the checkpoint was committed, but removing old or stale
	// directories afterwards failed.
	ErrPrune = failure.New(failure.Output, "checkpoint: pruning old checkpoints failed")
	// ErrConfig: invalid SaverConfig or options.
	ErrConfig = failure.New(failure.Config, "checkpoint: invalid config")
	// ErrClosed: the AsyncSaver was closed.
	ErrClosed = failure.New(failure.Canceled, "checkpoint: saver closed")
	// ErrInjected: a failure injected by FaultFS.
	ErrInjected = failure.New(failure.Output, "checkpoint: injected fault")
	// ErrCrashed: FaultFS simulated a crash; every operation after it fails.
	ErrCrashed = failure.New(failure.Output, "checkpoint: simulated crash")
)

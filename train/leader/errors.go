package leader

import "github.com/troupe-ml/troupe/failure"

// The leader's errors are train's: train re-exports these very values
// (train.ErrStageLost is ErrStageLost), so errors.Is finds them under
// either name, and their messages name train, where a user meets them.
var (
	// ErrConfig: a configuration that cannot work (train.ErrConfig); the
	// leader's are meshes that cannot be formed.
	ErrConfig = failure.New(failure.Config, "train: invalid config")
	// ErrDiverged: replicas of a stage hold different parameters.
	ErrDiverged = failure.New(failure.Diverged, "train: replicas diverged")
	// ErrStageLost: a pipeline stage that no member holds and no checkpoint
	// can restore (after Config.LostStageTimeout), or every stage, when no
	// member holds anything of a job that trained.
	ErrStageLost = failure.New(failure.StateLost, "train: a pipeline stage is lost")
	// ErrRendezvousTimeout: an elastic node could not train in a world for
	// Config.RdzvTimeout (too few nodes, or no quorum).
	ErrRendezvousTimeout = failure.New(failure.Exhausted, "train: no world to train in within the rendezvous timeout")
	// ErrRestarts: more generations failed transiently than
	// Config.MaxRestarts allows.
	ErrRestarts = failure.New(failure.Exhausted, "train: too many restarts")
	// ErrWorldTooSmall: an elastic job's world shrank below what its
	// pipeline needs: fewer members than stages.
	ErrWorldTooSmall = failure.New(failure.Config, "train: the world is too small for the job")
)

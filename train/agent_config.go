package train

import (
	"errors"
	"net"
	"time"

	"github.com/troupe-ml/troupe/actors"
	"github.com/troupe-ml/troupe/elastic"
	"github.com/troupe-ml/troupe/internal/pki"
)

// Rescale is what an elastic world of another size keeps.
type Rescale string

const (
	// KeepGlobalBatch keeps the global batch; each replica's share changes.
	KeepGlobalBatch Rescale = "keep-global-batch"
	// LinearLR keeps each replica's batch: the global batch and the
	// learning rate scale with the world (the linear scaling rule).
	LinearLR Rescale = "linear-lr"
)

// AgentConfig is one node of an elastic job (troupe agent): one OS process
// with one worker, which holds a data-parallel replica, a pipeline stage
// (Train.PP > 1), or waits on standby. Validate says what cannot work and
// changes nothing.
type AgentConfig struct {
	// Train is the training run every node of the job shares; DP and
	// Procs do not apply (the world is the job's members).
	Train Config
	// Name is the stable node name (unique in the job).
	Name string
	// Listen is the gossip address host:port; the node's actor system and
	// data plane listen on the same host, on free ports.
	Listen string
	// Join lists gossip addresses of other nodes.
	Join []string
	// MinNodes: no world with fewer members forms (default 1); MaxNodes:
	// more members wait as standby (0: no limit).
	MinNodes, MaxNodes int
	// Quorum is whose agreement a new generation needs (default: a
	// majority of the previous one).
	Quorum elastic.Quorum
	// Key is the cluster key (see elastic.ParseKey); empty: gossip is not
	// encrypted.
	Key string
	// TLS, when its files are given, runs every channel between nodes over
	// mutually authenticated TLS 1.3 with certificates of one cluster CA
	// (troupe certs makes them): the actors' gRPC, the gossip streams and
	// the data plane. A node whose certificate the CA did not sign cannot
	// join, and its connections are refused and logged. Empty: plaintext,
	// with the cluster Key encrypting gossip and authenticating the data
	// plane.
	TLS TLSFiles
	// Timings is the failure detector preset, named for its network:
	// "loopback" (default; "fast" is its earlier name), "lan" or "wan"
	// (see elastic.ParseTimings).
	Timings string
	// JoinTimeout bounds the wait for an answer from the Join list
	// (default 30 s).
	JoinTimeout time.Duration
	// LostStageTimeout bounds the wait for a pipeline stage that no member
	// holds and no checkpoint can restore: a holder may still come back (a
	// hung or partitioned node keeps its state), but after this long every
	// agent exits with ErrStageLost. Default one minute.
	LostStageTimeout time.Duration
	// RdzvTimeout: a node that the membership keeps out of any world (too
	// few nodes, no quorum) for this long exits with ErrRendezvousTimeout
	// (torchrun's --rdzv-timeout). Default 15 minutes.
	RdzvTimeout time.Duration
	// MaxRestarts bounds the generations the leader starts after transient
	// failures (torchrun's --max-restarts); the next failure ends the job
	// with ErrRestarts. 0: no bound. Between restarts the leader waits 3 s,
	// doubled after each failure in a row up to 48 s.
	MaxRestarts int
	// Rescale is what a world of another size keeps (default
	// KeepGlobalBatch).
	Rescale Rescale
}

// TLSFiles are a node's PEM files: the cluster CA's certificate, the
// node's certificate and its private key. All three or none.
type TLSFiles struct {
	CA, Cert, Key string
}

// On reports whether TLS is asked for.
func (f TLSFiles) On() bool { return f != TLSFiles{} }

// load reads the identity; nil when TLS is off.
func (f TLSFiles) load() (*pki.Identity, error) {
	if !f.On() {
		return nil, nil
	}
	if f.CA == "" || f.Cert == "" || f.Key == "" {
		return nil, fieldErr("TLS", "needs the CA, the certificate and the key (--tls-ca, --tls-cert, --tls-key); got CA %q, certificate %q, key %q", f.CA, f.Cert, f.Key)
	}
	id, err := pki.Load(f.CA, f.Cert, f.Key)
	if err != nil {
		return nil, fieldErr("TLS", "%v", err)
	}
	return id, nil
}

func (c AgentConfig) withDefaults() AgentConfig {
	c.Train = c.Train.withDefaults()
	if c.Rescale == "" {
		c.Rescale = KeepGlobalBatch
	}
	if c.LostStageTimeout == 0 {
		c.LostStageTimeout = time.Minute
	}
	if c.RdzvTimeout == 0 {
		c.RdzvTimeout = 15 * time.Minute
	}
	if c.Timings == "" {
		c.Timings = "loopback"
	}
	if c.MinNodes == 0 {
		c.MinNodes = 1
	}
	return c
}

// Validate reports the first setting that cannot work, as a *FieldError
// (Train's fields as Train.Field); it changes nothing.
func (c AgentConfig) Validate() error {
	t := c.Train
	if t.DP == 1 && t.ZeroGroup > 1 {
		t.DP = t.ZeroGroup // the world is the members; the checks see one shard group
	}
	if err := t.Validate(); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			return &FieldError{Field: "Train." + fe.Field, Msg: fieldRef.ReplaceAllString(fe.Msg, "{Train.$1}")}
		}
		return err
	}
	r := c.withDefaults()
	switch t := &r.Train; {
	case t.Zero > 0 && t.ZeroGroup < 2:
		return fieldErr("Train.ZeroGroup", "is needed with {Train.Zero} on agents (2 or more): the shard group keeps its size as members come and go, and the world is a multiple of it; members beyond that wait on standby")
	case t.DP != 1 || t.Procs != 0:
		return fieldErr("Train.DP", "and {Train.Procs} do not apply: an agent runs one worker, the job's members make the world")
	case t.sync().Async() && t.CkptDir == "":
		return fieldErr("Train.CkptDir", "is needed with {Train.Sync} async on agents: the parameter servers live on the leader's node, and a new leader continues from their latest checkpoint")
	case t.sync().Async() && r.Rescale != KeepGlobalBatch:
		return fieldErr("Rescale", "%s does not apply with {Train.Sync} async: every step is one whole batch on one replica, whatever the world", r.Rescale)
	case t.Transport == actors.TransportShm:
		return fieldErr("Train.Transport", "shm needs every rank on one host; agents span hosts: use tcp")
	case t.Trace != "":
		return fieldErr("Train.Trace", "records the pipeline of one troupe train run; agents have no process that sees every stage")
	case t.PP > 1 && t.Partition == ByTime:
		return fieldErr("Train.Partition", "time would cut differently on each node: agents cut by params or {Train.StageLayers}")
	case r.Name == "" || r.Listen == "":
		return fieldErr("Name", "and {Listen} are needed")
	case r.LostStageTimeout < 0:
		return fieldErr("LostStageTimeout", "%s is negative", r.LostStageTimeout)
	case r.RdzvTimeout < 0:
		return fieldErr("RdzvTimeout", "%s is negative", r.RdzvTimeout)
	case r.MaxRestarts < 0:
		return fieldErr("MaxRestarts", "%d is negative (0: no bound)", r.MaxRestarts)
	case r.Rescale != KeepGlobalBatch && r.Rescale != LinearLR:
		return fieldErr("Rescale", "%q: want keep-global-batch or linear-lr", r.Rescale)
	case r.MinNodes < 1 || r.MaxNodes < 0 || r.MaxNodes > 0 && r.MaxNodes < r.MinNodes:
		return fieldErr("MinNodes", "%d and {MaxNodes} %d: want 1 ≤ MinNodes ≤ MaxNodes (0: no limit)", r.MinNodes, r.MaxNodes)
	}
	if _, _, err := net.SplitHostPort(r.Listen); err != nil {
		return fieldErr("Listen", "%q: %v", r.Listen, err)
	}
	if _, err := elastic.ParseTimings(r.Timings); err != nil {
		return fieldErr("Timings", "%v", err)
	}
	if r.Key != "" {
		if _, err := elastic.ParseKey(r.Key); err != nil {
			return fieldErr("Key", "%v", err)
		}
	}
	if _, err := r.TLS.load(); err != nil {
		return err
	}
	return nil
}

// AgentSummary is what an agent reports when the job ends (troupe agent
// prints it as JSON).
type AgentSummary struct {
	Name   string `json:"name"`
	Member string `json:"member"`
	Step   int    `json:"step"`
	// Stage is the pipeline stage the agent held at the end (0 without
	// pipelining, -1 on standby) and Shard its tensor-parallel shard of
	// it: checksums compare within a (stage, shard).
	Stage int `json:"stage"`
	Shard int `json:"shard,omitempty"`
	// ZeroShard is, with ZeRO-3, the agent's shard of the stage's weights
	// in its shard group: checksums then compare within a (stage, shard,
	// zero_shard).
	ZeroShard  int    `json:"zero_shard,omitempty"`
	Generation uint64 `json:"generation"`
	Checksum   string `json:"checksum"`
	// Led counts the generations this agent led.
	Led int `json:"generations_led"`
	// Left is true when the agent left the job before its end.
	Left bool `json:"left"`
	// Error is why the job could not go on, when it ended that way.
	Error string `json:"error,omitempty"`
}

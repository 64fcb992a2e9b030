package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/troupe-ml/troupe/elastic"
	"github.com/troupe-ml/troupe/train"
)

// agentFlags are troupe agent's flags.
type agentFlags struct {
	train                 trainFlags
	ac                    train.AgentConfig
	join, quorum, rescale string
	// leaveExit is the exit status when a signal ends the agent before the
	// job's end (0: a leave exits 0, as before).
	leaveExit int
}

// config is the agent configuration the flags (and $TROUPE_CLUSTER_KEY)
// say, validated.
func (a *agentFlags) config(fl *pflag.FlagSet) (train.AgentConfig, error) {
	cfg, err := a.train.build(fl)
	if err != nil {
		return train.AgentConfig{}, err
	}
	ac := a.ac
	// --max-restarts on an agent bounds its generations' restarts, not
	// worker processes (train's meaning, with --procs).
	ac.MaxRestarts, cfg.MaxRestarts = cfg.MaxRestarts, 0
	ac.Train = cfg // validated as an agent's below
	if a.join != "" {
		ac.Join = strings.Split(a.join, ",")
	}
	if ac.Key == "" {
		ac.Key = os.Getenv("TROUPE_CLUSTER_KEY")
	}
	if ac.Quorum, err = elastic.ParseQuorum(a.quorum); err != nil {
		return train.AgentConfig{}, fmt.Errorf("%w: --quorum: %v", errUsage, err)
	}
	ac.Rescale = train.Rescale(a.rescale)
	if a.leaveExit < 0 || a.leaveExit > 255 || a.leaveExit == 1 || a.leaveExit == 2 {
		return train.AgentConfig{}, fmt.Errorf("%w: --leave-exit-code %d: want 0 or 3-255 (1 is a failure's exit status, 2 a bad command line's)", errUsage, a.leaveExit)
	}
	if err := ac.Validate(); err != nil {
		return train.AgentConfig{}, fmt.Errorf("%w: %w", errUsage, inFlags(err))
	}
	return ac, nil
}

func newAgentCmd() *cobra.Command { return newAgentCmdWith(&agentFlags{}) }

// newAgentCmdWith binds troupe agent's flags to a.
func newAgentCmdWith(a *agentFlags) *cobra.Command {
	f, ac := &a.train, &a.ac
	cmd := &cobra.Command{
		Use:   "agent --name N --listen ADDR [--join ADDR[,ADDR]] [training flags]",
		Short: "One node of an elastic job: joins the cluster, trains its share, survives the loss of others",
		Long: `troupe agent runs one node of an elastic data-parallel job (one OS process, one worker).
The first agents form the job when --min-nodes are present; more join up to --max-nodes, and the
job re-forms (a new generation) when a node joins, leaves (SIGTERM) or dies, resuming from a
surviving replica at the step boundary. Every agent of a job gets the same training flags and
the same --join list. The cluster key (--key, or $TROUPE_CLUSTER_KEY) encrypts the gossip: a node
without it cannot join. With --tls-ca, --tls-cert and --tls-key every channel between nodes (the
actors' gRPC, the gossip streams, the data plane) runs over mutually authenticated TLS: a node
whose certificate the cluster CA did not sign cannot join, and is refused and logged (troupe certs
makes a CA and node certificates). At the end each agent prints a JSON summary (step, checksum) on
stdout.`,
		Example: `  troupe agent --name n1 --listen 127.0.0.1:7101 --join 127.0.0.1:7101 --min-nodes 2 --steps 500
  troupe agent --name n2 --listen 127.0.0.1:7102 --join 127.0.0.1:7101 --min-nodes 2 --steps 500
  troupe certs --out certs --nodes n1,n2 && troupe agent --name n1 --listen 127.0.0.1:7101 \
      --tls-ca certs/ca.pem --tls-cert certs/n1.pem --tls-key certs/n1-key.pem …
  scripts/local-cluster.sh 3    # a 3-node cluster on loopback`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ac, err := a.config(cmd.Flags())
			if err != nil {
				return err
			}
			if f.printConfig {
				return writeConfig(cmd.OutOrStdout(), cmd)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			dump, stopDump := dumpOnSignal()
			defer stopDump()
			o := train.Options{Logger: logger, Dump: dump}
			if stderrTerm != nil {
				o.Progress = stderrTerm
			}
			sum, err := train.RunAgent(ctx, ac, o)
			if sum != nil {
				if err := json.NewEncoder(os.Stdout).Encode(sum); err != nil {
					return err
				}
			}
			// A signal before the job's end: the node left, or was
			// stopped before it joined (the error says where).
			if a.leaveExit != 0 && ctx.Err() != nil && (err != nil || sum != nil && sum.Left) {
				msg := "left the job before its end"
				if err != nil {
					msg = fmt.Sprintf("stopped before the job's end: %v", inFlags(err))
				}
				return &exitError{code: a.leaveExit, msg: fmt.Sprintf("%s (exit status %d, --leave-exit-code)", msg, a.leaveExit)}
			}
			return inFlags(err)
		},
	}
	f.register(cmd.Flags())
	f.registerOldWarmup(cmd.Flags())
	fl := cmd.Flags()
	// The training flags an agent refuses whatever their value
	// (train.AgentConfig.Validate: an agent runs one worker, and the job's
	// members make the world) stay out of its help; given, they are
	// refused naming them.
	for _, name := range agentRefuses {
		if err := fl.MarkHidden(name); err != nil {
			panic(err)
		}
	}
	fl.StringVar(&ac.Name, "name", "", "stable node name (unique in the job)")
	fl.StringVar(&ac.Listen, "listen", "", "gossip address host:port; the node's actor system listens on the same host")
	fl.StringVar(&a.join, "join", "", "comma-separated gossip addresses of nodes to join (the same list on every node); dns:NAME:PORT joins every address NAME resolves to (a Kubernetes headless service), resolved again as nodes come and go")
	fl.IntVar(&ac.MinNodes, "min-nodes", 1, "the job forms once this many nodes are present")
	fl.IntVar(&ac.MaxNodes, "max-nodes", 0, "at most this many nodes train (more wait as standby; 0: no limit)")
	fl.StringVar(&a.quorum, "quorum", "majority", "a new generation needs: majority (of the previous one; no split brain) or any")
	fl.StringVar(&ac.Key, "key", "", "cluster key: hex:…, base64:…, passphrase:… (default $TROUPE_CLUSTER_KEY)")
	fl.StringVar(&ac.TLS.CA, "tls-ca", "", "TLS between nodes: the cluster CA's certificate (PEM); with --tls-cert and --tls-key (see troupe certs)")
	fl.StringVar(&ac.TLS.Cert, "tls-cert", "", "TLS: this node's certificate (PEM), signed by the cluster CA")
	fl.StringVar(&ac.TLS.Key, "tls-key", "", "TLS: this node's private key (PEM)")
	fl.StringVar(&ac.Timings, "timings", "loopback", "failure detection preset for the network: loopback (one host or a quiet LAN; detects a lost node in ~1 s), lan (links up to ~100 ms; ~5 s) or wan (across regions); fast is loopback's earlier name")
	fl.DurationVar(&ac.JoinTimeout, "join-timeout", 30*time.Second, "give up when no node of --join answers within this time")
	fl.DurationVar(&ac.LostStageTimeout, "lost-stage-timeout", time.Minute, "with --pp: end the job with an error when a stage no member holds, and no checkpoint can restore, stays lost this long")
	fl.DurationVar(&ac.RdzvTimeout, "rdzv-timeout", 15*time.Minute, "exit non-zero when this node cannot train in a world for this long because too few nodes are present (or no quorum of the last world is reachable); torchrun's --rdzv-timeout")
	fl.Lookup("max-restarts").Usage = "end the job after this many generations started after transient failures (a member lost, a timeout); 0: no bound. The leader waits 3 s before asking for a new generation, doubled after each failure in a row up to 48 s (torchrun's --max-restarts)"
	fl.StringVar(&a.rescale, "rescale", string(train.KeepGlobalBatch), "on a world of another size keep the global batch (keep-global-batch) or each rank's batch and scale the LR (linear-lr)")
	fl.IntVar(&a.leaveExit, "leave-exit-code", 0, "exit status when a signal (SIGTERM, SIGINT) ends the agent before the job's end: it left the job, or had not joined it yet; 0 (default): a leave exits 0 and a signal before joining is an error (1). A Kubernetes Job sets one (deploy/k8s: 143) so that a deleted or evicted pod is replaced, and exit 0 means the job reached its last step")
	inGroup(fl, groupCluster, "name", "listen", "join", "min-nodes", "max-nodes", "quorum", "rescale", "timings", "join-timeout", "lost-stage-timeout", "rdzv-timeout", "max-restarts", "leave-exit-code")
	inGroup(fl, groupSecurity, "key", "tls-ca", "tls-cert", "tls-key")
	return cmd
}

// agentRefuses are the training flags troupe agent refuses: --dp and
// --procs (one worker per agent), --trace (no process sees every stage).
// (--max-restarts means the agent's own: restarts of generations.)
var agentRefuses = []string{"dp", "procs", "trace"}

func init() { rootCmd.AddCommand(newAgentCmd()) }

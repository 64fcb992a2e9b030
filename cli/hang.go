package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/train"
)

// debugCmd groups the commands that look inside a running job.
var debugCmd = &cobra.Command{
	Use:   "debug",
	Short: "Look inside a running job (flight recorders)",
}

func init() {
	rootCmd.AddCommand(debugCmd)
	explainCmd.AddCommand(newExplainHangCmd())
	debugCmd.AddCommand(newDebugDumpCmd())
}

func newExplainHangCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "hang DUMP_DIR",
		Short: "Align the ranks' flight-recorder dumps and name the rank a hang waits on",
		Long: `Reads the flight-recorder dumps in DUMP_DIR (rank-R.json: one per rank,
written by a job whose step hung, on SIGUSR1, or by troupe debug dump) and
prints them side by side: for every collective group, the operations in the
order the ranks issue them (generation, op id) with each rank's state —
done, running, failed, not entered, skipped, no dump (the rank's dump is
missing: stopped, hung or gone) or forgotten (older than its recorder keeps).

The verdict names the first operation that did not finish everywhere (the
one entered first, over all groups) and the rank it waits on: a rank that
never entered it, else one that sent no dump, else the one the others'
failures blame, else the first that did not finish.`,
		Example: `  troupe explain hang /tmp/troupe-dumps/20261201T101500.123Z-step-41-hung
  troupe explain hang ./dumps --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dumps, err := train.ReadFlights(args[0])
			if err != nil {
				return err
			}
			return printAlignment(cmd.OutOrStdout(), collective.Align(dumps, nil), asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the alignment as one JSON document")
	return cmd
}

func printAlignment(w io.Writer, a *collective.Alignment, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(a)
	}
	return a.WriteText(w)
}

func newDebugDumpCmd() *cobra.Command {
	var out string
	var asJSON bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "dump HOST:PORT...",
		Short: "Fetch the flight recorders of running processes, save them and align them",
		Long: `Asks each process at HOST:PORT (its --metrics-addr) for its flight
recorders (/debug/flight): a troupe train process answers for every rank of
its job, an agent or a worker process for its own. Writes the dumps as
rank-R.json into a new directory under -o (default: troupe-dumps in the
temporary directory) and prints their alignment, as troupe explain hang does.

A process that does not answer within --timeout is an error naming it; the
dumps of the others are still written.`,
		Example: `  troupe debug dump 127.0.0.1:9100
  troupe debug dump n1:9100 n2:9100 n3:9100 -o ./dumps --json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dumps, ferr := fetchFlights(cmd.Context(), args, timeout)
			if len(dumps) == 0 {
				return ferr
			}
			dir, err := train.WriteFlights(out, "debug dump", dumps)
			if err != nil {
				return errors.Join(ferr, err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "dumps of %d ranks in %s\n", len(dumps), dir)
			if err := printAlignment(cmd.OutOrStdout(), collective.Align(dumps, nil), asJSON); err != nil {
				return err
			}
			return ferr
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&out, "output", "o", "", "write the dumps into a new directory under this one (default: troupe-dumps in the temporary directory)")
	fl.BoolVar(&asJSON, "json", false, "print the alignment as one JSON document")
	fl.DurationVar(&timeout, "timeout", 10*time.Second, "give up on a process that has not answered within this time")
	return cmd
}

// fetchFlights asks every address for its dumps, keeping the first dump
// of each rank; the error names the addresses that failed.
func fetchFlights(ctx context.Context, addrs []string, timeout time.Duration) ([]collective.FlightDump, error) {
	client := &http.Client{Timeout: timeout}
	var dumps []collective.FlightDump
	seen := map[int]bool{}
	var errs []error
	for _, addr := range addrs {
		got, err := fetchFlight(ctx, client, addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		for _, d := range got {
			if !seen[d.Rank] {
				seen[d.Rank] = true
				dumps = append(dumps, d)
			}
		}
	}
	return dumps, errors.Join(errs...)
}

func fetchFlight(ctx context.Context, client *http.Client, addr string) ([]collective.FlightDump, error) {
	url := addr
	if !strings.Contains(url, "://") {
		url = "http://" + addr
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(url, "/")+"/debug/flight", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/debug/flight: %s", resp.Status)
	}
	var raw struct {
		Dumps []json.RawMessage `json:"dumps"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(&raw); err != nil {
		return nil, fmt.Errorf("/debug/flight: %w: %v", collective.ErrBadDump, err)
	}
	var out []collective.FlightDump
	for _, b := range raw.Dumps {
		d, err := collective.ParseFlightDump(b)
		if err != nil {
			return nil, fmt.Errorf("/debug/flight: %w", err)
		}
		out = append(out, d)
	}
	return out, nil
}

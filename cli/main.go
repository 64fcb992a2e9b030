// Package cli is the troupe command line: every sub-command of troupe
// (train, agent, generate, data, bench, …), importable so that a Go
// program can register models of its own (nn.Register in an init
// function of an imported package) and run the same CLI with them:
//
//	package main
//
//	import (
//		"github.com/troupe-ml/troupe/cli"
//		_ "example.com/mymodel" // registers "my-model"
//	)
//
//	func main() { cli.Main() }
//
// Worker processes (--procs, agents) run the same executable, so they know
// the program's models too. See README.md for every sub-command.
package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// rootCmd is the troupe command; sub-command files attach themselves to it
// (or to benchCmd / explainCmd) in their init functions.
var rootCmd = &cobra.Command{
	Use:               "troupe",
	Short:             "Actor-based, elastic, fault-tolerant neural-network training",
	SilenceUsage:      true,
	SilenceErrors:     true,
	PersistentPreRunE: prepare,
}

// prepare runs before every command: its flags completed (its --config
// file first, so that the file can set the log level too), the logger,
// the profile.
func prepare(cmd *cobra.Command, _ []string) error {
	if err := prepareFlags(cmd); err != nil {
		return err
	}
	if err := setupLogging(cmd); err != nil {
		return err
	}
	return startProfile()
}

// benchCmd groups the measurement commands (troupe bench gemm, allreduce…).
var benchCmd = &cobra.Command{
	Use:   "bench",
	Short: "Measure kernels and collectives",
}

// explainCmd groups the teaching views (troupe explain allreduce, pipeline…).
var explainCmd = &cobra.Command{
	Use:   "explain",
	Short: "Show step by step what a schedule does",
}

func init() {
	rootCmd.PersistentFlags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	rootCmd.PersistentFlags().StringVar(&logFormat, "log-format", "auto", "log format: auto (console on a terminal, JSON otherwise), console, json")
	rootCmd.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile (go tool pprof) of the command to this file")
	rootCmd.AddCommand(benchCmd, explainCmd)
	// A bad flag is a usage error (exit 2), in every sub-command.
	rootCmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return fmt.Errorf("%w: %v", errUsage, err)
	})
}

// errUsage marks an error in the command line (exit status 2).
var errUsage = errors.New("usage")

// exitError ends troupe with its exit status, saying msg on stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// Main runs troupe with os.Args and exits with its status: 0, 2 for a bad
// command line or configuration, 1 for other failures.
func Main() {
	err := rootCmd.Execute()
	stopProfile()
	syncLogger()
	if err != nil {
		fmt.Fprintln(os.Stderr, "troupe:", err)
		var ee *exitError
		switch {
		case errors.As(err, &ee):
			os.Exit(ee.code)
		case errors.Is(err, errUsage) || strings.HasPrefix(err.Error(), "unknown command"):
			os.Exit(2)
		}
		os.Exit(1)
	}
}

package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"

	"github.com/troupe-ml/troupe/train"
)

var (
	logLevel  string
	logFormat string
	// logger is the process logger, ready after the root command's pre-run.
	logger = zap.NewNop()
	// stderrTerm is stderr when it is a terminal (else nil), shared by the
	// logger and the progress bar so that log lines go above the bar.
	stderrTerm *train.Terminal
)

// setupLogging builds the zap logger from --log-level and --log-format:
// human-readable on a terminal, one JSON object per line otherwise.
func setupLogging(cmd *cobra.Command) error {
	// Worker processes started by --procs log as their parent does.
	if v := os.Getenv("TROUPE_LOG_LEVEL"); v != "" && !cmd.Flags().Changed("log-level") {
		logLevel = v
	}
	if v := os.Getenv("TROUPE_LOG_FORMAT"); v != "" && !cmd.Flags().Changed("log-format") {
		logFormat = v
	}
	os.Setenv("TROUPE_LOG_LEVEL", logLevel)
	os.Setenv("TROUPE_LOG_FORMAT", logFormat)
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
		return fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", errUsage, logLevel)
	}
	format := logFormat
	if format == "auto" {
		format = "json"
		if stderrIsTerminal() {
			format = "console"
		}
	}
	// Worker processes log in the format decided here: their stderr is a
	// pipe into this process's when a progress bar shares its terminal.
	os.Setenv("TROUPE_LOG_FORMAT", format)
	var cfg zap.Config
	switch format {
	case "json":
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.TimeKey = "ts"
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
		cfg.Sampling = nil
		cfg.DisableStacktrace = true
	case "console":
		cfg = zap.NewDevelopmentConfig()
		cfg.EncoderConfig.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		cfg.DisableStacktrace = true
	default:
		return fmt.Errorf("%w: --log-format %q: want auto, console or json", errUsage, logFormat)
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.OutputPaths = []string{"stderr"}
	cfg.ErrorOutputPaths = []string{"stderr"}
	var opts []zap.Option
	if stderrIsTerminal() {
		stderrTerm = train.NewTerminal(os.Stderr)
		enc := zapcore.NewJSONEncoder(cfg.EncoderConfig)
		if format == "console" {
			enc = zapcore.NewConsoleEncoder(cfg.EncoderConfig)
		}
		core := zapcore.NewCore(enc, zapcore.AddSync(stderrTerm), cfg.Level)
		opts = append(opts, zap.WrapCore(func(zapcore.Core) zapcore.Core { return core }))
	}
	l, err := cfg.Build(opts...)
	if err != nil {
		return fmt.Errorf("building logger: %w", err)
	}
	logger = l
	return nil
}

func stderrIsTerminal() bool { return term.IsTerminal(int(os.Stderr.Fd())) }

func syncLogger() { _ = logger.Sync() }

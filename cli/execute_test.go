package cli

import (
	"bytes"

	"github.com/spf13/cobra"
)

// execute runs cmd, a freshly made command (cobra keeps flag values
// between executions of one), with args and returns what it wrote on
// stdout and stderr.
func execute(cmd *cobra.Command, args ...string) (string, error) {
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// prepareFlags completes cmd's flags before it runs: the values of its
// --config file that the command line did not set, then the old flag
// names turned into the new.
func prepareFlags(cmd *cobra.Command) error {
	if f := cmd.Flags().Lookup("config"); f != nil && len(f.Annotations[annConfigFile]) > 0 && f.Value.String() != "" {
		if err := applyConfigFile(cmd.Flags(), cmd.CommandPath(), f.Value.String()); err != nil {
			return err
		}
	}
	return resolveOldNames(cmd.Flags())
}

// resolveOldNames turns the old names of flags the command line or the
// file set (--warmup) into their new ones (pflag says that they are
// deprecated).
func resolveOldNames(fl *pflag.FlagSet) error {
	var err error
	fl.VisitAll(func(f *pflag.Flag) {
		a := f.Annotations[annAliasOf]
		if err != nil || len(a) == 0 || !f.Changed {
			return
		}
		if fl.Changed(a[0]) {
			err = fmt.Errorf("%w: --%s is the old name of --%s: give one", errUsage, f.Name, a[0])
			return
		}
		err = fl.Set(a[0], f.Value.String())
	})
	return err
}

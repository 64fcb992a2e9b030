package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/troupe-ml/troupe/kernels"
	_ "github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/plan"
)

func init() { rootCmd.AddCommand(newDevicesCmd()) }

// devicesReport is what troupe devices --json prints.
type devicesReport struct {
	Backends []string             `json:"backends"`
	Devices  []kernels.DeviceInfo `json:"devices"`
}

// newDevicesCmd builds `troupe devices`: every device of every registered
// kernels backend, the ones `troupe train --device NAME` can open. A fresh
// command each call, as cobra keeps flag values between executions.
func newDevicesCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "devices [--json]",
		Short: "List the devices troupe can train on",
		Long: `Lists the devices of every kernels backend built into this binary: the CPU
always; NVIDIA GPUs when troupe was built with -tags cuda (such a binary needs
the NVIDIA driver to start). Each device is one Worker actor's to own.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			devs, err := kernels.Devices()
			rep := devicesReport{Backends: kernels.Names(), Devices: devs}
			if rep.Devices == nil {
				rep.Devices = []kernels.DeviceInfo{}
			}
			if asJSON {
				if e := writeJSON(cmd.OutOrStdout(), rep); e != nil {
					return e
				}
			} else if e := writeDevices(cmd.OutOrStdout(), rep); e != nil {
				return e
			}
			// Devices that did list are printed; a backend that failed to
			// list is the error (stderr, exit 1).
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

// writeDevices prints the table: one row per device.
func writeDevices(w io.Writer, rep devicesReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tNAME\tMEMORY\tDETAIL")
	for _, d := range rep.Devices {
		mem := "host"
		if d.MemoryBytes > 0 {
			mem = plan.FormatBytes(float64(d.MemoryBytes))
		}
		fmt.Fprintf(tw, "%s:%d\t%s\t%s\t%s\n", d.Backend, d.Index, d.Name, mem, d.Detail)
	}
	return tw.Flush()
}

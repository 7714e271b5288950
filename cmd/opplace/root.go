package main

import (
	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// commands holds the subcommand constructors; each command's file adds
// its own in init, so adding a command is adding one file.
var commands []func() *cobra.Command

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "opplace",
		Short: "Place the operators of a deep-learning graph on a cluster's devices",
		Long: `opplace reads a model (ONNX), infers every tensor's shape, estimates each
operator's cost on each device type, places the operators on the devices of a
cluster under their memory limits, simulates the step and writes a
device-annotated plan, a Graphviz view and a schedule.

Exit codes: 0 success, 1 internal error, 2 invalid input, 3 the model does
not fit the cluster.

When stderr is a terminal, long work (the exact partitioner, the ilp
placer, profiling, compare, the auto search, reading a large model) shows a
progress bar there, cleared when done; -q turns it off. Nothing else on
stderr or stdout changes.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().BoolP("quiet", "q", false, "no progress bars on stderr")
	for _, c := range commands {
		root.AddCommand(c())
	}
	return root
}

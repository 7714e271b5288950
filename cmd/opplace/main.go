// Command opplace decides where every operator of a deep-learning graph
// runs: it reads a model and a cluster description, places the graph's
// ops on the cluster's devices under their memory limits, simulates the
// step and writes a device-annotated plan.
//
// Exit codes: 0 success, 1 internal error, 2 invalid input (unreadable or
// corrupt model or plan, bad cluster file, bad flag, unbound dimension, an
// output that cannot or must not be written, a plan an export target cannot
// express), 3 the model cannot fit the cluster.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/opplace/opplace/constraint"
	"github.com/opplace/opplace/export"
	"github.com/opplace/opplace/internal/output"
	"github.com/opplace/opplace/internal/printable"
	"github.com/opplace/opplace/internal/progress"
	"github.com/opplace/opplace/partition"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/placer"
)

// Exit codes.
const (
	exitOK         = 0
	exitInternal   = 1
	exitInvalid    = 2
	exitInfeasible = 3
)

func main() {
	tuneGC()
	stop := startCPUProfile(os.Stderr)
	code := run(os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns its exit code.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	// Errors before a command starts running (unknown command, wrong
	// argument count, missing flag) are usage errors.
	started := false
	// Progress bars go to stderr when it is a terminal and -q is not
	// given: the reporter rides in the command's context (and is the
	// process default for model import, which has none).
	var term *progress.Terminal
	restore := func() {}
	root.PersistentPreRun = func(cmd *cobra.Command, _ []string) {
		started = true
		quiet, _ := cmd.Flags().GetBool("quiet")
		r := progress.ForWriter(stderr, quiet)
		if t, ok := r.(*progress.Terminal); ok {
			term = t
			cmd.SetErr(printable.Writer(t.Writer()))
			restore = progress.SetDefault(t)
		}
		cmd.SetContext(progress.With(cmd.Context(), r))
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	// Errors and warnings quote names from the input files: what a
	// terminal would act on (controls, bidi overrides) is escaped.
	root.SetErr(printable.Writer(stderr))
	err := root.Execute()
	if term != nil {
		term.Close()
		restore()
	}
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "opplace: %s\n", oneLine(err.Error()))
	if !started {
		return exitInvalid
	}
	return exitCode(err)
}

// usageError marks a bad command line.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func exitCode(err error) int {
	var inf *placer.InfeasibleError
	var pinf *partition.InfeasibleError
	var in *pipeline.InputError
	var use usageError
	var out *output.Error
	var conflict *constraint.ConflictError
	var ex *export.Error
	switch {
	case errors.As(err, &inf), errors.As(err, &pinf), errors.As(err, &conflict):
		return exitInfeasible
	case errors.As(err, &in), errors.As(err, &use), errors.As(err, &out), errors.As(err, &ex):
		return exitInvalid
	}
	return exitInternal
}

// oneLine keeps the contract of one line on stderr whatever a message
// carries: control and bidirectional-override characters, which a
// message may copy from a file (an op name's newline, BEL, CR or U+202E),
// are escaped by package printable, so they can neither break the line nor
// rewrite the terminal.
func oneLine(msg string) string { return printable.String(strings.TrimSpace(msg)) }

package main

import (
	"errors"
	"io"

	"github.com/spf13/cobra"

	"github.com/opplace/opplace/internal/output"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/report"
)

type reportFlags struct {
	out        string
	noGraphviz bool
}

func init() { commands = append(commands, newReportCmd) }

func newReportCmd() *cobra.Command {
	f := &reportFlags{}
	cmd := &cobra.Command{
		Use:   "report PLAN --out FILE",
		Short: "Write a plan as one self-contained HTML page for a launch review",
		Long: `report reads PLAN, a plan written by opplace plan --out (JSON or YAML), and
writes one HTML page that loads nothing from anywhere (inline CSS and SVG), to
attach to a launch review: the summary (predicted step, lower bound and gap,
throughput, whether it fits), the schedule as a Gantt chart of every device's
op runs, transfers and all-reduces, each device's memory over the step against
its capacity, the stage table with its split points, every strategy auto tried
with why it lost, and the device-level Graphviz view (left out, with a note,
when Graphviz's dot is not installed). The same plan gives the same bytes.

The file is written through a temporary renamed into place, and may not be the
plan itself; -o - writes the page to stdout.`,
		Example: `  opplace plan gpt2.onnx --cluster 8xA100-2host.yaml --dim batch=8 --out plan.json
  opplace report plan.json -o report.html

  # A YAML plan, the page on stdout, no Graphviz run
  opplace report plan.yaml -o - --no-graphviz > report.html`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReport(cmd, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.out, "out", "o", "", "write the HTML page to this file (- for stdout)")
	fl.BoolVar(&f.noGraphviz, "no-graphviz", false, "leave out the device view (does not run Graphviz's dot)")
	return cmd
}

func runReport(cmd *cobra.Command, path string, f *reportFlags) error {
	if f.out == "" {
		return usageError{errors.New("--out FILE is required (-o - writes the page to stdout)")}
	}
	run := output.Run{Inputs: []output.Input{{What: "the plan", Path: path}}, Stdout: cmd.OutOrStdout()}
	out := f.out
	if out == "-" {
		out = "/dev/stdout"
	}
	if err := run.Check(output.File{What: "--out", Path: out}); err != nil {
		return err
	}
	p, err := plan.ReadFile(path)
	if err != nil {
		return &pipeline.InputError{Err: err}
	}
	opts := report.Options{Source: path, NoGraphviz: f.noGraphviz}
	return run.Commit(output.File{What: "--out", Path: out, Write: func(w io.Writer) error { return report.Write(cmd.Context(), w, p, opts) }})
}

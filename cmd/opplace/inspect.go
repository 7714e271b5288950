package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/opplace/opplace/pipeline"
)

type inspectFlags struct {
	dimFlags
	output  string
	summary bool
	ops     bool
}

func init() { commands = append(commands, newInspectCmd) }

func newInspectCmd() *cobra.Command {
	f := &inspectFlags{}
	cmd := &cobra.Command{
		Use:   "inspect MODEL",
		Short: "Import a model and report every op's shapes, parameters and MACs",
		Long: `inspect imports MODEL, infers every tensor's shape and reports, per op, its
output shapes, MACs and parameters, then the totals (ops, parameters and their
bytes, MACs, FLOPs, activation bytes) and which ops have outputs of unknown shape
or are of a type opplace does not know. Warnings go to stderr.

An op's params are the elements of the parameter tensors (initializers) it
reads, each counted once per op; totals.params counts every parameter tensor
once, so a weight shared by two ops appears in both ops but once in the total.
activation_bytes is the sum over ops of the bytes of their outputs (elements
times element size): everything a step writes, not its peak memory.`,
		Example: `  opplace inspect testdata/models/resnet50.onnx
  opplace inspect testdata/models/bert_base.onnx --dim batch=16 --summary
  opplace inspect testdata/models/bert_base.onnx --shape input_ids=16,128 -o json
  opplace inspect model.onnx --batch 8 --loop-trips 32 --if-branch then`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runInspect(cmd, args[0], f)
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fl.BoolVar(&f.summary, "summary", false, "table output: leave out the per-op table")
	fl.BoolVar(&f.ops, "ops", false, "list every op")
	_ = fl.MarkDeprecated("ops", "every op is listed by default; --summary leaves them out")
	return cmd
}

func runInspect(cmd *cobra.Command, path string, f *inspectFlags) error {
	if f.output != "table" && f.output != "json" {
		return usageError{fmt.Errorf("-o %q: want table or json", f.output)}
	}
	opts, err := f.options()
	if err != nil {
		return err
	}
	m, err := loadModel(path, opts)
	if err != nil {
		return err
	}
	r, err := pipeline.Inspect(path, m)
	if err != nil {
		return err
	}
	for _, w := range m.Warnings {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", oneLine(w))
	}
	out := cmd.OutOrStdout()
	if f.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return pipeline.WriteInspectionTable(out, r, !f.summary)
}

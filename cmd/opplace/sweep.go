package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/internal/output"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/sweep"
)

type sweepFlags struct {
	dimFlags
	searchFlags
	types     []string
	counts    []int
	batches   []int64
	template  string
	typesFile string
	output    string
	gavel     string
	job       string
	svg       string
	clusters  string
	verbose   bool
	mode      string
	optimizer string
	precision string
	runtime   string
}

func init() { commands = append(commands, newSweepCmd) }

func newSweepCmd() *cobra.Command {
	f := &sweepFlags{}
	cmd := &cobra.Command{
		Use:   "sweep MODEL --types T1,T2 --counts 1,2,4,8",
		Short: "Predict a model's throughput over device types, device counts and batch sizes",
		Long: `sweep plans MODEL (the auto strategy of opplace plan) on a cluster of every
device type x device count, at every batch size, and reports each point's
best plan: throughput (samples/s), step, strategy, peak memory, whether it
fits, and why not. The model is imported once per batch size.

Each cluster is laid out by a template: how many devices a host holds, the
links inside a host (NVLink between every pair, or PCIe) and the network
between hosts. The default template (docs/sweep.md) puts up to 8 devices in
a host, joins A100s and H100s by NVSwitch and V100s by NVLink, T4s by PCIe,
and hosts by 100 Gb/s Ethernet; --cluster-template FILE gives another, with
an optional price_per_hour per type. Device types are presets, or types a
cluster file given as --types-file declares.

Stdout gets the table, CSV or JSON (-o). --gavel FILE writes the
throughputs in the form Gavel's scheduling policies read, --svg FILE the
scaling curves (throughput against device count per type, and per dollar
where prices are given).`,
		Example: `  # GPT-2 XL on four types, four counts and three batch sizes
  opplace sweep gpt2_xl.onnx --types A100-80GB,H100-80GB,V100-16GB,T4 --counts 1,2,4,8 --batch 8,16,32

  # A throughput file for Gavel, and the scaling curves
  opplace sweep resnet50.onnx --types V100-16GB,T4 --counts 1,2,4 --gavel throughputs.json --svg scaling.svg

  # Your own host layout and prices, as CSV
  opplace sweep bert.onnx --dim batch=16 --types A100-80GB,T4 --counts 1,8,16 --cluster-template hosts.yaml -o csv`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSweep(cmd, args[0], f)
		},
	}
	f.dimFlags.registerBut(cmd)
	f.registerSearch(cmd)
	fl := cmd.Flags()
	fl.StringSliceVar(&f.types, "types", nil, "device types, comma-separated: presets ("+strings.Join(cluster.PresetNames(), ", ")+") or types --types-file declares")
	fl.IntSliceVar(&f.counts, "counts", nil, "device counts, comma-separated, like 1,2,4,8")
	fl.Int64SliceVar(&f.batches, "batch", nil, "global batch sizes, comma-separated, each binding the leading dimension of every input whose leading dimension is dynamic (default: the batch the model fixes)")
	fl.StringVar(&f.template, "cluster-template", "", "how devices are grouped into hosts and joined, and their prices (YAML; default: docs/sweep.md)")
	fl.StringVar(&f.typesFile, "types-file", "", "a cluster file whose device_types: the sweep may name")
	fl.StringVarP(&f.output, "output", "o", sweep.Table, "stdout format: "+strings.Join(sweep.Formats(), ", "))
	fl.StringVar(&f.gavel, "gavel", "", "write the throughputs in Gavel's form to this file (JSON: worker type, then \"('JOB (batch size N)', DEVICES)\", then {\"null\": steps/s})")
	fl.StringVar(&f.job, "job", "", "the job type name in the --gavel file (default: the model file's name without its extension)")
	fl.StringVar(&f.svg, "svg", "", "write the scaling curves (throughput against device count per type) to this SVG file")
	fl.StringVar(&f.clusters, "emit-clusters", "", "write each point's cluster file into this directory, as NAME.yaml (8xA100-80GB.yaml): opplace plan --cluster on one gives that point's figures")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "print each point to stderr as it is planned, and the time each stage took")
	fl.StringVar(&f.mode, "mode", pipeline.ModeTrain, "train (forward, backward and optimizer step) or infer (forward pass only)")
	fl.StringVar(&f.optimizer, "optimizer", "adam", "optimizer for --mode train: sgd, momentum or adam (sets state memory)")
	registerPrecision(cmd, &f.precision)
	registerRuntime(cmd, &f.runtime)
	return cmd
}

func runSweep(cmd *cobra.Command, model string, f *sweepFlags) error {
	imp, err := f.dimFlags.options()
	if err != nil {
		return err
	}
	if err := checkPrecision(f.precision); err != nil {
		return err
	}
	if !slices.Contains(sweep.Formats(), f.output) {
		return usageError{fmt.Errorf("-o %q: use table, csv or json", f.output)}
	}
	if len(f.types) == 0 || len(f.counts) == 0 {
		return usageError{fmt.Errorf("give the device types and counts to sweep, like --types A100-80GB,T4 --counts 1,2,4,8")}
	}
	run := output.Run{Inputs: []output.Input{{What: "the model", Path: model}, {What: "the cluster template", Path: f.template},
		{What: "the types file", Path: f.typesFile}}, Stdout: cmd.OutOrStdout()}
	if err := run.Check(output.File{What: "--gavel", Path: f.gavel}, output.File{What: "--svg", Path: f.svg}); err != nil {
		return err
	}
	if f.clusters != "" {
		if st, err := os.Stat(f.clusters); err != nil || !st.IsDir() {
			return usageError{fmt.Errorf("--emit-clusters %s: not a directory; make it first", f.clusters)}
		}
	}
	opts := sweep.Options{Model: model, Types: f.types, Counts: f.counts, Batches: f.batches,
		Plan: pipeline.Options{Strategy: pipeline.Auto, Import: imp, Mode: f.mode, Optimizer: f.optimizer, Precision: f.precision,
			Runtime: f.runtime, AroundStage: collectorOffDuring}}
	if err := f.searchFlags.apply(&opts.Plan.Strategies); err != nil {
		return err
	}
	if f.template != "" {
		if opts.Template, err = sweep.LoadTemplate(f.template); err != nil {
			return usageError{err}
		}
	}
	if f.typesFile != "" {
		if opts.Custom, err = sweep.LoadTypes(f.typesFile); err != nil {
			return usageError{err}
		}
	}
	stderr := cmd.ErrOrStderr()
	if f.verbose {
		opts.Progress = func(done, total int, p sweep.Point) {
			fmt.Fprintf(stderr, "point %d/%d: %s x%d batch %d: %.1f samples/s (%.0f ms to plan)\n", done, total, p.Type, p.Devices, p.Batch, p.ThroughputSamplesPerS, p.SolveMS)
		}
	}
	res, err := sweep.Run(cmd.Context(), opts)
	if err != nil {
		return err
	}
	if f.verbose {
		sweep.WriteTimes(stderr, res)
	}
	outs := []output.File{{What: "--gavel", Path: f.gavel, Write: func(w io.Writer) error { return sweep.WriteGavel(w, res, f.job) }},
		{What: "--svg", Path: f.svg, Write: func(w io.Writer) error { return sweep.WriteSVG(w, res) }}}
	if f.clusters != "" {
		for _, g := range res.Clusters {
			outs = append(outs, output.Bytes("--emit-clusters", filepath.Join(f.clusters, g.Name+".yaml"), g.YAML))
		}
	}
	if err := run.Commit(outs...); err != nil {
		return err
	}
	return sweep.WriteResult(cmd.OutOrStdout(), res, f.output)
}

package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/internal/output"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/view"
)

type planFlags struct {
	dimFlags
	deviceFlags
	givenFlags
	ruleFlags
	searchFlags
	cluster  string
	strategy string
	output   string
	out      string
	viewFlags
	verbose   bool
	mode      string
	optimizer string
	precision string
	fusion    string
	runtime   string
	profile   string
	spaceFlags
	parallelFlags
}

func init() { commands = append(commands, newPlanCmd) }

func newPlanCmd() *cobra.Command {
	f := &planFlags{}
	cmd := &cobra.Command{
		Use:   "plan MODEL --cluster FILE",
		Short: "Find the fastest plan of a model's step on a cluster and simulate it",
		Long: `plan searches one space of plans for MODEL on the cluster (operator
placement, data parallelism, pipeline stages with replicas and micro-batches,
and their hybrids), scores every candidate with one simulator, and prints the
fastest that fits. Strategies: auto (the default: the whole space, pruning
families a bound proves cannot win), or one of
` + strings.Join(pipeline.Strategies(), ", ") + `
(pipeline = pipeline:exact). Pipelines simulate a GPipe or 1F1B schedule of
--microbatches micro-batches. --placement FILE simulates a placement you give
(strategy given): a map from op names, module:PATH prefixes or patterns to
devices, or a plan file of an earlier run; --fill STRATEGY places the ops it
leaves out.

Without --out the plan goes to stdout in the -o format (json by default). With
--out FILE the plan is written there (YAML for .yaml/.yml, else JSON) and stdout
gets the table unless -o says otherwise. Every output file (--out, the
pictures, --emit-model) is made first and written to a temporary beside its
target; they are renamed into place together only once all were written, so a
failed run changes no file. An output may not be an input (the model, the
cluster file, the profile) or another output; a symbolic link is written
through; a device or FIFO (/dev/null, /dev/stdout) is written to, not replaced.

` + viewHelp,
		Example: `  # Plan ResNet-50 on four V100s and print a summary table
  opplace plan testdata/models/resnet50.onnx --cluster testdata/clusters/4xV100.yaml -o table

  # Pipeline parallelism: stages, replicas and micro-batches for GPT-2 on two hosts
  opplace plan gpt2.onnx --cluster 8xA100-2host.yaml --dim batch=8 --strategy pipeline -o table

  # BERT with its symbolic batch bound: plan, picture and schedule trace to files
  opplace plan bert.onnx --cluster c.yaml --dim batch=16 --out plan.json --svg plan.svg --trace step.json

  # Every op of one pipeline stage, as Graphviz source
  opplace plan gpt2.onnx --cluster 8xA100-2host.yaml --strategy pipeline --dot s2.dot --dot-detail op --dot-stage 2

  # Under rules: embeddings on gpu0, no backward op on a T4, 10% of every device kept free
  opplace plan gpt2.onnx --cluster hetero.yaml --pin module:/wte=gpu0 --avoid phase:backward=type:T4 --reserve '*=10%'

  # The same rules, and more, from a file (docs/constraints.md)
  opplace plan gpt2.onnx --cluster 8xA100-2host.yaml --constraints rules.yaml --strategy pipeline -o table

  # Score a placement you give (or an earlier plan file), m-etf placing what it leaves out
  opplace plan gpt2.onnx --cluster 4xV100.yaml --dim batch=8 --placement split.yaml --fill m-etf -o table`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPlan(cmd, args[0], f)
		},
	}
	f.dimFlags.register(cmd)
	f.registerDevices(cmd)
	f.registerGiven(cmd)
	f.registerRules(cmd)
	f.registerSearch(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.cluster, "cluster", "", "cluster file (YAML; see testdata/clusters/)")
	fl.StringVar(&f.strategy, "strategy", pipeline.Auto, "strategy: auto, pipeline, "+strings.Join(pipeline.Strategies(), ", "))
	fl.StringVarP(&f.output, "output", "o", "", "stdout format: json, yaml or table (default json, or table with --out)")
	fl.StringVar(&f.out, "out", "", "write the plan to this file (JSON, or YAML for .yaml/.yml)")
	f.viewFlags.register(cmd)
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "print each stage's time to stderr")
	fl.StringVar(&f.fusion, "fusion", pipeline.FusionAuto, "operator fusion before placement: none, vertical, horizontal, hybrid, or auto (hybrid unless the model file carries measured op times)")
	registerRuntime(cmd, &f.runtime)
	fl.StringVar(&f.profile, "profile", "", "measured op times (from opplace profile) to use on the device types they were measured on")
	f.registerSpace(cmd)
	f.registerParallel(cmd)
	fl.StringVar(&f.mode, "mode", pipeline.ModeTrain, "train (forward, backward and optimizer step) or infer (forward pass only)")
	fl.StringVar(&f.optimizer, "optimizer", "adam", "optimizer for --mode train: sgd, momentum or adam (sets state memory)")
	registerPrecision(cmd, &f.precision)
	return cmd
}

func runPlan(cmd *cobra.Command, model string, f *planFlags) error {
	importOpts, err := f.dimFlags.options()
	if err != nil {
		return err
	}
	viewOpts, err := f.viewFlags.options(cmd.Flags().Changed)
	if err != nil {
		return err
	}
	if err := checkPrecision(f.precision); err != nil {
		return err
	}
	stdoutFormat := plan.JSON
	if f.out != "" {
		stdoutFormat = plan.Table
	}
	if f.output != "" {
		if stdoutFormat, err = plan.ParseFormat(f.output); err != nil {
			return usageError{err}
		}
	}
	// Every file the run would write is checked before any work, so a
	// bad path costs no planning and clobbers nothing.
	run := output.Run{Inputs: []output.Input{{What: "the model", Path: model}, {What: "the cluster file", Path: f.cluster}, {What: "the profile", Path: f.profile},
		{What: "the placement file", Path: f.placement}, {What: "the constraints file", Path: f.constraints}}, Stdout: cmd.OutOrStdout()}
	if err := run.Check(append(f.outputs(), output.File{What: "--out", Path: f.out}, output.File{What: "--emit-model", Path: f.emitModel})...); err != nil {
		return err
	}
	if err := f.checkEmit(model); err != nil {
		return err
	}
	costModel, err := loadProfileModel(f.profile, f.precision)
	if err != nil {
		return err
	}
	var fusion pipeline.FusionReport
	opts := pipeline.Options{
		ModelPath: model, ClusterPath: f.cluster, Strategy: f.strategy, Import: importOpts,
		Mode: f.mode, Optimizer: f.optimizer, Precision: f.precision,
		Fusion: f.fusion, Runtime: f.runtime, FusionReport: &fusion, CostModel: costModel,
		AroundStage: collectorOffDuring,
	}
	if viewOpts.Stage != view.AllStages && f.cluster != "" {
		// Read here to check --dot-stage before planning, and planned on.
		if opts.Cluster, err = cluster.Load(f.cluster); err != nil {
			return &pipeline.InputError{Err: err}
		}
		if err := f.checkStage(opts.Cluster); err != nil {
			return err
		}
	}
	if err := f.deviceFlags.apply(&opts); err != nil {
		return err
	}
	if err := f.givenFlags.apply(&opts, cmd.Flags().Changed("strategy"), f.respectDevices); err != nil {
		return err
	}
	if err := f.ruleFlags.apply(&opts); err != nil {
		return err
	}
	if err := f.spaceFlags.apply(&opts); err != nil {
		return err
	}
	if err := f.searchFlags.apply(&opts.Strategies); err != nil {
		return err
	}
	if err := f.parallelFlags.apply(cmd, &opts); err != nil {
		return err
	}
	res, err := pipeline.Run(cmd.Context(), opts)
	stderr := cmd.ErrOrStderr()
	if f.verbose && res != nil {
		for _, t := range res.Timings {
			fmt.Fprintf(stderr, "stage %-9s %v\n", t.Stage, t.Duration.Round(1000))
		}
		printFusion(stderr, &fusion)
	}
	if err != nil {
		return f.explain(err)
	}
	outs, err := f.pictures(cmd.Context(), viewOpts, res, &fusion)
	if err != nil {
		return err
	}
	if f.out != "" {
		fileFormat := plan.JSON
		if ext := strings.ToLower(filepath.Ext(f.out)); ext == ".yaml" || ext == ".yml" {
			fileFormat = plan.YAML
		}
		// Rendered straight into the temporary file: a plan of 10^6 ops
		// is a few hundred MB of JSON.
		p := res.Plan
		outs = append([]output.File{{What: "--out", Path: f.out, Write: func(w io.Writer) error { return plan.Write(w, p, fileFormat) }}}, outs...)
	}
	if f.emitModel != "" {
		emitted, err := f.annotated(model, res)
		if err != nil {
			return err
		}
		outs = append(outs, emitted)
	}
	if err := run.Commit(outs...); err != nil {
		return err
	}
	// Only once nothing can fail, so a failure stays one line; always on
	// stderr, whatever stdout gets (the table and the plan list them too).
	for _, w := range res.Plan.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", oneLine(w))
	}
	return plan.Write(cmd.OutOrStdout(), res.Plan, stdoutFormat)
}

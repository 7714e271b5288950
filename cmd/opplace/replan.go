package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/internal/output"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/replan"
)

type replanFlags struct {
	dimFlags
	searchFlags
	spaceFlags
	cluster   string
	model     string
	profile   string
	steps     int64
	bandwidth string
	gradients bool
	optimizer string
	fusion    string
	output    string
	out       string
	verbose   bool
}

func init() { commands = append(commands, newReplanCmd) }

func newReplanCmd() *cobra.Command {
	f := &replanFlags{}
	cmd := &cobra.Command{
		Use:   "replan PLAN --cluster NEW",
		Short: "Re-plan a plan for a changed cluster, with the cost of moving its state in the objective",
		Long: `replan takes PLAN, a plan file of opplace plan, and NEW, the cluster file of
the cluster the job now has (devices removed, added or replaced), and finds the
plan to move to: auto's search on the new cluster (every family), and the old
plan as it is where every device it uses is still there, each scored by

    step x --amortize-steps K + migration

where migration is the time to move the parameters and optimizer state from
where the old plan keeps them to where the plan needs them: from a surviving
device that holds them over the new cluster's links (the simulator's transfer
times, transfers that share a link taking turns), else from the checkpoint read
at --checkpoint-bandwidth. Devices are renamed within a host where that keeps
state in place at no cost to the step. Devices are matched by name, type and
host.

The model is imported as the plan was made: its model file (--model
overrides), batch (--batch defaults to the plan's), mode, precision and
optimizer; give the --dim bindings and the plan-space flags (--zero,
--tensor-parallel, ...) it was planned with.

Stdout gets the table (the change, the chosen plan against the old and the
from-scratch one, the break-even step count, the moves and every candidate) or
-o json/yaml. --out FILE writes the chosen plan, the document opplace plan
writes, atomically.`,
		Example: `  # A GPU of two hosts failed: move GPT-2 XL's plan to the seven left
  opplace plan gpt2_xl.onnx --batch 8 --cluster testdata/clusters/8xA100-2host.yaml --out old.json
  opplace replan old.json --cluster testdata/clusters/7xA100-2host.yaml --out new.json

  # The job grew by a host; the new plan runs 10,000 steps; a checkpoint on a fast file system
  opplace replan old.json --cluster 12xA100-3host.yaml --amortize-steps 10000 --checkpoint-bandwidth 40GB/s

  # For a scheduler: JSON on stdout
  opplace replan old.json --cluster new.yaml -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReplan(cmd, args[0], f)
		},
	}
	f.dimFlags.register(cmd)
	f.registerSearch(cmd)
	f.registerSpace(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.cluster, "cluster", "", "the new cluster's file (YAML; see testdata/clusters/)")
	fl.StringVar(&f.model, "model", "", "the model file (default: the one the plan names)")
	fl.StringVar(&f.profile, "profile", "", "measured op times (from opplace profile) to use on the device types they were measured on, as the plan was made with them")
	fl.Int64Var(&f.steps, "amortize-steps", replan.DefaultAmortizeSteps, "K, the steps the new plan is expected to run before the cluster changes again: the objective is step x K + migration")
	fl.StringVar(&f.bandwidth, "checkpoint-bandwidth", "1.2GB/s", "the rate the job reads state no surviving device holds from its checkpoint, all reads together; the default is an FSx for Lustre file system of 1,200 GiB at 1000 MB/s per TiB (docs/replan.md)")
	fl.BoolVar(&f.gradients, "move-gradients", false, "count the weight gradients as state to move (a migration inside gradient accumulation; at a step boundary they hold nothing)")
	fl.StringVar(&f.optimizer, "optimizer", "", "optimizer the plan was made for: sgd, momentum or adam (default: the one its updates run)")
	fl.StringVar(&f.fusion, "fusion", pipeline.FusionAuto, "operator fusion before placement, as the plan was made: none, vertical, horizontal, hybrid, or auto")
	fl.StringVarP(&f.output, "output", "o", replan.Table, "stdout format: "+strings.Join(replan.Formats(), ", "))
	fl.StringVar(&f.out, "out", "", "write the chosen plan to this file (JSON, or YAML for .yaml/.yml)")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "print how long each part of the re-plan took to stderr")
	return cmd
}

func runReplan(cmd *cobra.Command, planPath string, f *replanFlags) error {
	imp, err := f.dimFlags.options()
	if err != nil {
		return err
	}
	if !slices.Contains(replan.Formats(), f.output) {
		return usageError{fmt.Errorf("-o %q: use %s", f.output, strings.Join(replan.Formats(), ", "))}
	}
	if f.cluster == "" {
		return usageError{fmt.Errorf("give the new cluster's file: --cluster NEW.yaml")}
	}
	if f.steps < 1 {
		return usageError{fmt.Errorf("--amortize-steps %d: want 1 or more", f.steps)}
	}
	bw, err := cluster.ParseBandwidth(f.bandwidth)
	if err != nil || !(bw > 0) {
		return usageError{fmt.Errorf("--checkpoint-bandwidth %q: want a rate such as 1.2GB/s or 100Gb/s", f.bandwidth)}
	}
	run := output.Run{Inputs: []output.Input{{What: "the plan", Path: planPath}, {What: "the cluster file", Path: f.cluster}, {What: "the model", Path: f.model},
		{What: "the profile", Path: f.profile}}, Stdout: cmd.OutOrStdout()}
	if err := run.Check(output.File{What: "--out", Path: f.out}); err != nil {
		return err
	}
	opts := replan.Options{PlanPath: planPath, ModelPath: f.model, ClusterPath: f.cluster, AmortizeSteps: f.steps, CheckpointBandwidth: bw,
		Gradients: f.gradients,
		Planning:  pipeline.Options{Import: imp, Optimizer: f.optimizer, Fusion: f.fusion, AroundStage: collectorOffDuring}}
	if f.profile != "" {
		// The profile's roofline for unmeasured ops takes the plan's
		// precision (TF32 matmuls under tf32), which the re-plan keeps.
		old, err := plan.ReadFile(planPath)
		if err != nil {
			return &pipeline.InputError{Err: err}
		}
		if opts.Planning.CostModel, err = loadProfileModel(f.profile, old.Precision); err != nil {
			return err
		}
		opts.Plan = old
	}
	if err := f.spaceFlags.apply(&opts.Planning); err != nil {
		return err
	}
	if err := f.searchFlags.apply(&opts.Planning.Strategies); err != nil {
		return err
	}
	res, err := replan.Run(cmd.Context(), opts)
	if err != nil {
		return err
	}
	if f.verbose {
		replan.WriteTimes(cmd.ErrOrStderr(), res)
	}
	if f.out != "" {
		format := plan.JSON
		if ext := strings.ToLower(filepath.Ext(f.out)); ext == ".yaml" || ext == ".yml" {
			format = plan.YAML
		}
		p := res.Plan
		if err := run.Commit(output.File{What: "--out", Path: f.out, Write: func(w io.Writer) error { return plan.Write(w, p, format) }}); err != nil {
			return err
		}
	}
	return replan.WriteResult(cmd.OutOrStdout(), res, f.output)
}

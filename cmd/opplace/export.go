package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/opplace/opplace/export"
	"github.com/opplace/opplace/internal/output"
	"github.com/opplace/opplace/internal/tfdevice"
)

type exportFlags struct {
	to             string
	out            string
	deviceTemplate string
}

func init() { commands = append(commands, newExportCmd) }

func newExportCmd() *cobra.Command {
	f := &exportFlags{}
	var targets []string
	for _, name := range export.Names() {
		targets = append(targets, fmt.Sprintf("  %-17s %s", name, export.Summary(name)))
	}
	cmd := &cobra.Command{
		Use:   "export PLAN --to TARGET [--out FILE]",
		Short: "Write a plan as what a training runtime consumes (PyTorch, torch.distributed.pipelining, DeepSpeed, Megatron-LM, TensorFlow)",
		Long: `export reads PLAN, a plan written by opplace plan --out (JSON or YAML), and
writes what a training runtime consumes to launch it. Targets:

` + strings.Join(targets, "\n") + `

torch-pipelining and deepspeed need a pipeline plan (--strategy pipeline)
whose stages start and end at module boundaries (the default; not --op-cuts),
of a model exported by torch.onnx, whose op names carry module paths; module
paths become PyTorch module names by the rule in docs/export.md.
tf-device-map takes any plan but a tensor-parallel one; rank-map and
hostfile take any plan; deepspeed-config takes data-parallel and pipelined
plans on one device type; megatron takes training plans of uniform stages
(one replica count, tensor degree, ZeRO level and micro-batch size) on one
device type, pipelines cut between transformer layers; torch takes
single-stage training plans (dp, tensor) and points pipelines to
torch-pipelining.

Without --out the artefact goes to stdout; with --out it is written to a
temporary beside FILE and renamed into place, and may not be the plan itself.
A plan the target cannot express is exit 2, with what to replan.`,
		Example: `  opplace plan gpt2.onnx --cluster 4xV100.yaml --dim batch=8 --strategy pipeline --out plan.json
  opplace export plan.json --to torch-pipelining --out split_spec.py
  opplace export plan.json --to deepspeed --out partition.json

  # Where each rank runs, and DeepSpeed's configuration of the plan
  opplace export plan.json --to rank-map --out ranks.json
  opplace export plan.json --to hostfile --out hostfile
  opplace export plan.json --to deepspeed-config --out ds_config.json

  # Megatron-LM's arguments, and PyTorch's DDP/FSDP/tensor-parallel settings
  opplace export plan.json --to megatron --out megatron.args
  torchrun ... pretrain_gpt.py $(grep -v '^#' megatron.args) MODEL_ARGS
  opplace export plan.json --to torch --out torch_plan.py

  # Every op's TensorFlow device string, on stdout
  opplace export plan.json --to tf-device-map

  # Device strings named after the cluster's devices
  opplace export plan.json --to tf-device-map --device-template '/job:{host}/device:{kind}:{index}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runExport(cmd, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.to, "to", "", "target: "+strings.Join(export.Names(), ", "))
	fl.StringVarP(&f.out, "out", "o", "", "write the artefact to this file (default: stdout)")
	fl.StringVar(&f.deviceTemplate, "device-template", tfdevice.DefaultTemplate,
		"tf-device-map: TensorFlow device string of a device; placeholders {task} (host index), {host}, {kind} (GPU or CPU), {index} (within host and kind), {name}, {type}")
	return cmd
}

func runExport(cmd *cobra.Command, path string, f *exportFlags) error {
	if f.to == "" {
		return usageError{fmt.Errorf("--to TARGET is required: one of %s", strings.Join(export.Names(), ", "))}
	}
	if _, err := export.New(f.to); err != nil {
		return usageError{fmt.Errorf("--to: %w", err)}
	}
	if err := tfdevice.CheckTemplate(f.deviceTemplate); err != nil {
		return usageError{fmt.Errorf("--device-template: %w", err)}
	}
	out := f.out
	if out == "" || out == "-" {
		out = "/dev/stdout"
	}
	run := output.Run{Inputs: []output.Input{{What: "the plan", Path: path}}, Stdout: cmd.OutOrStdout()}
	if err := run.Check(output.File{What: "--out", Path: out}); err != nil {
		return err
	}
	data, err := export.File(f.to, path, export.Options{Source: path, DeviceTemplate: f.deviceTemplate})
	if err != nil {
		return exportHint(err)
	}
	return run.Commit(output.Bytes("--out", out, data))
}

// exportHint adds to a refused export the flags that fix it.
func exportHint(err error) error {
	var e *export.Error
	if !errors.As(err, &e) {
		return err
	}
	switch e.Kind {
	case export.OneStage:
		return fmt.Errorf("%w (opplace plan MODEL --cluster FILE --strategy pipeline --out plan.json)", err)
	case export.OpCuts:
		return fmt.Errorf("%w: plan without --op-cuts (without it, stages are cut between ops only when module boundaries make the pipeline's objective over 10%% worse, as plan -o table notes; another cluster or --microbatches may keep them)", err)
	case export.NoModules:
		return fmt.Errorf("%w (--to tf-device-map)", err)
	}
	return err
}

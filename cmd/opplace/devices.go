package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/opplace/opplace/internal/output"
	"github.com/opplace/opplace/internal/tfdevice"
	"github.com/opplace/opplace/pipeline"
)

// deviceFlags carry a plan back into the framework: --emit-model writes
// the input model annotated with each op's device, --respect-devices
// pins TensorFlow nodes to the devices their device fields name.
type deviceFlags struct {
	emitModel      string
	respectDevices bool
	deviceTemplate string
}

func (f *deviceFlags) registerDevices(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.emitModel, "emit-model", "", "write the input model to this file with each op's device (TensorFlow: node device fields; ONNX: metadata_props)")
	fl.BoolVar(&f.respectDevices, "respect-devices", false, "pin ops whose device field names a cluster device: TensorFlow node devices (see --device-template), costed graphs' ops[].device")
	fl.StringVar(&f.deviceTemplate, "device-template", tfdevice.DefaultTemplate,
		"TensorFlow device string of a cluster device; placeholders {task} (host index), {host}, {kind} (GPU or CPU), {index} (within host and kind), {name}, {type}")
}

// apply checks the template and passes the flags to the pipeline, which
// resolves device fields once it has loaded the cluster.
func (f *deviceFlags) apply(opts *pipeline.Options) error {
	if err := tfdevice.CheckTemplate(f.deviceTemplate); err != nil {
		return usageError{err}
	}
	opts.RespectDevices, opts.DeviceTemplate = f.respectDevices, f.deviceTemplate
	return nil
}

// checkEmit refuses, before any planning, an --emit-model the model's
// format cannot write or whose directory its external data cannot be named
// from.
func (f *deviceFlags) checkEmit(model string) error {
	if f.emitModel == "" {
		return nil
	}
	if err := pipeline.CheckAnnotate(model, f.emitModel); err != nil {
		return fmt.Errorf("--emit-model %s: %w", f.emitModel, err)
	}
	return nil
}

// annotated is the --emit-model file: the input model with each op's
// device, in the model's own format.
func (f *deviceFlags) annotated(model string, res *pipeline.Result) (output.File, error) {
	placement := make(map[string]string, len(res.Plan.Ops))
	for _, op := range res.Plan.Ops {
		placement[op.Name] = op.Device
		for _, c := range op.Covers { // the model's ops a fused kernel runs
			placement[c] = op.Device
		}
	}
	data, err := pipeline.AnnotateModel(pipeline.Annotation{Placement: placement, Cluster: res.Cluster, Template: f.deviceTemplate, From: model, To: f.emitModel})
	if err != nil {
		return output.File{}, fmt.Errorf("--emit-model %s: %w", f.emitModel, err)
	}
	return output.Bytes("--emit-model", f.emitModel, data), nil
}

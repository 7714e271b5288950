package export

import (
	"bytes"
	"encoding/json"
	"io"
	"regexp"
	"slices"

	"github.com/opplace/opplace/plan"
)

func init() {
	Register("deepspeed", "JSON: a DeepSpeed PipelineModule partition: the cut-level modules as layers, parts (layer index of each stage boundary), stages with devices",
		func() Target { return deepSpeed{} })
}

// deepSpeed writes the plan as the partition of a DeepSpeed
// PipelineModule: the modules at the level the stages are cut at, in
// order, as its layers, and parts in DeepSpeed's convention (stage s
// builds layers parts[s] .. parts[s+1]-1).
type deepSpeed struct{}

// deepSpeedSpec is the document deepspeed writes. Field names are a
// contract with the scripts that read it: extend, never rename.
type deepSpeedSpec struct {
	Plan  string `json:"plan"`
	Model string `json:"model"`
	// NumStages is PipelineModule's num_stages.
	NumStages int `json:"num_stages"`
	// PartitionMethod is the PipelineModule partition_method that gives
	// Parts: "uniform" when DeepSpeed's uniform split of Layers is Parts
	// (PartitionMethodExact), else its default "parameters", which
	// balances parameters and may cut elsewhere: set Parts yourself (see
	// docs/export.md).
	PartitionMethod      string `json:"partition_method"`
	PartitionMethodExact bool   `json:"partition_method_exact"`
	// Parts are num_stages+1 layer indices, 0 first and len(Layers) last.
	Parts []int `json:"parts"`
	// Layers are the modules' fully qualified names (get_submodule),
	// LayerPaths the same as module paths of the model's op names.
	Layers     []string `json:"layers"`
	LayerPaths []string `json:"layer_paths"`
	// MicroBatches is the plan's micro-batches per step: DeepSpeed's
	// gradient_accumulation_steps.
	MicroBatches int    `json:"micro_batches"`
	Schedule     string `json:"schedule"`
	// TrainBatchSize is the step's batch (DeepSpeed's train_batch_size)
	// and TrainMicroBatchSizePerGPU the samples each data-parallel rank
	// runs per micro-batch (its train_micro_batch_size_per_gpu):
	// TrainBatchSize = TrainMicroBatchSizePerGPU × MicroBatches × the
	// stages' replicas. Absent when the batch is unknown, and the second
	// when stages run different sizes (Stages say each).
	TrainBatchSize            int64 `json:"train_batch_size,omitempty"`
	TrainMicroBatchSizePerGPU int64 `json:"train_micro_batch_size_per_gpu,omitempty"`
	// TensorParallel is the plan's tensor-parallel degree (Megatron-LM's
	// --tensor-model-parallel-size for each stage), 0 for none; each op's
	// split is in the plan's ops[].shard.
	TensorParallel int `json:"tensor_parallel,omitempty"`
	// ActivationCheckpointInterval is PipelineModule's
	// activation_checkpoint_interval: 1 (checkpoint every layer, a module
	// at the cut level) when every stage of the plan recomputes
	// activations, absent when none or only some do (Stages say which).
	ActivationCheckpointInterval int              `json:"activation_checkpoint_interval,omitempty"`
	PredictedMS                  float64          `json:"predicted_step_ms"`
	Stages                       []deepSpeedStage `json:"stages"`
}

type deepSpeedStage struct {
	Index       int      `json:"index"`
	FirstModule string   `json:"first_module"`
	LastModule  string   `json:"last_module"`
	Layers      [2]int   `json:"layers"`
	Devices     []string `json:"devices"`
	Replicas    int      `json:"replicas"`
	// MicroBatchSize is the samples each replica runs per micro-batch.
	MicroBatchSize int64 `json:"micro_batch_size,omitempty"`
	// Recompute is set when the stage recomputes activations, each layer
	// checkpointed.
	Recompute bool `json:"recompute,omitempty"`
}

func (deepSpeed) Export(w io.Writer, p *plan.Plan, o Options) error {
	c, err := moduleCuts(p, o, "deepspeed")
	if err != nil {
		return err
	}
	spec := deepSpeedSpec{
		Plan: o.source(), Model: p.Model, NumStages: len(c.Stages),
		Parts: slices.Clone(c.First), MicroBatches: max(p.MicroBatches, 1), Schedule: p.Schedule,
		PredictedMS: p.PredictedStepMS, TensorParallel: p.TensorParallel,
		Layers: make([]string, len(c.Layers)), LayerPaths: make([]string, len(c.Layers)),
	}
	for i, l := range c.Layers {
		spec.Layers[i], spec.LayerPaths[i] = l.FQN, l.Path
	}
	spec.PartitionMethod = "parameters"
	if slices.Equal(spec.Parts, uniformParts(len(c.Layers), len(c.Stages), false)) &&
		slices.Equal(spec.Parts, uniformParts(len(c.Layers), len(c.Stages), true)) {
		spec.PartitionMethod, spec.PartitionMethodExact = "uniform", true
	}
	for _, st := range c.Stages {
		a, b := c.First[st.Index], c.First[st.Index+1]
		reps := max(st.Replicas, 1)
		spec.Stages = append(spec.Stages, deepSpeedStage{
			Index: st.Index, FirstModule: c.Layers[a].FQN, LastModule: c.Layers[b-1].FQN,
			Layers: [2]int{a, b}, Devices: st.Devices, Replicas: reps, MicroBatchSize: st.MicroBatchSize, Recompute: st.Recompute,
		})
	}
	if p.Batch > 0 {
		spec.TrainBatchSize = p.Batch
		if len(c.Stages) > 0 && !slices.ContainsFunc(c.Stages, func(st plan.Stage) bool { return st.MicroBatchSize != c.Stages[0].MicroBatchSize }) {
			spec.TrainMicroBatchSizePerGPU = c.Stages[0].MicroBatchSize
		}
	}
	if len(c.Stages) > 0 && !slices.ContainsFunc(c.Stages, func(st plan.Stage) bool { return !st.Recompute }) {
		spec.ActivationCheckpointInterval = 1
	}
	return writeJSON(w, spec)
}

// scalarArray matches an indented JSON array of numbers and strings
// without spaces, brackets or braces, which deepspeed writes on one line.
var scalarArray = regexp.MustCompile(`\[\n(?:[ ]*[^\s\[\]{}]+\n)+[ ]*\]`)

// writeJSON writes v as the JSON targets write: indented by two spaces,
// HTML characters unescaped, and each array of scalars on one line.
func writeJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(scalarArray.ReplaceAllFunc(b.Bytes(), func(m []byte) []byte {
		fields := bytes.Fields(m[1 : len(m)-1])
		return append(append([]byte("["), bytes.Join(fields, []byte(" "))...), ']')
	}))
	return err
}

// uniformParts is DeepSpeed's partition_uniform(n, stages): the older
// releases put the remainder in the last stage, the newer (residual)
// spread it over the first stages.
func uniformParts(n, stages int, residual bool) []int {
	parts := make([]int, stages+1)
	if n <= stages {
		for p := range parts {
			parts[p] = min(p, n)
		}
		return parts
	}
	chunk := n / stages
	for p := range parts {
		parts[p] = chunk * p
	}
	if residual {
		for i := 0; i < n-chunk*stages; i++ {
			for j := i + 1; j <= stages; j++ {
				parts[j]++
			}
		}
	} else {
		parts[stages] = n
	}
	return parts
}

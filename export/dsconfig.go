package export

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strings"

	"github.com/opplace/opplace/plan"
)

func init() {
	Register("deepspeed-config", "JSON: a DeepSpeed ds_config.json for the plan (batch, micro-batch size per GPU, gradient accumulation steps, ZeRO stage and bucket sizes, bf16/fp16, activation checkpointing); data-parallel and pipelined plans on one device type",
		func() Target { return deepSpeedConfig{} })
}

// deepSpeedConfig writes the DeepSpeed configuration a plan runs under.
// Keys are DeepSpeed's own (deepspeed/runtime/config.py and
// deepspeed/runtime/zero/config.py); DeepSpeed reads the keys it knows by
// name, so the "opplace" object that says where the file came from is
// ignored by it.
type deepSpeedConfig struct{}

// dsConfig is the document deepspeed-config writes.
type dsConfig struct {
	TrainBatchSize            int64      `json:"train_batch_size"`
	TrainMicroBatchSizePerGPU int64      `json:"train_micro_batch_size_per_gpu"`
	GradientAccumulationSteps int        `json:"gradient_accumulation_steps"`
	ZeroOptimization          dsZero     `json:"zero_optimization"`
	BF16                      *dsEnabled `json:"bf16,omitempty"`
	FP16                      *dsEnabled `json:"fp16,omitempty"`
	// ActivationCheckpointing is set when every stage recomputes: it
	// configures deepspeed.checkpointing, which the model's layers call
	// (a PipelineModule does with activation_checkpoint_interval, which
	// the deepspeed target writes).
	ActivationCheckpointing *dsCheckpointing `json:"activation_checkpointing,omitempty"`
	Opplace                 dsSource         `json:"opplace"`
}

type dsZero struct {
	Stage int `json:"stage"`
	// Bucket sizes are in elements: the plan's median gradient bucket
	// over 4 bytes (fp32 gradients; opplace keeps fp32 master weights and
	// gradients under amp, docs/precision.md).
	ReduceBucketSize    int64 `json:"reduce_bucket_size,omitempty"`
	AllgatherBucketSize int64 `json:"allgather_bucket_size,omitempty"`
	ReduceScatter       bool  `json:"reduce_scatter"`
	OverlapComm         bool  `json:"overlap_comm"`
	ContiguousGradients bool  `json:"contiguous_gradients"`
}

type dsEnabled struct {
	Enabled bool `json:"enabled"`
}

type dsCheckpointing struct {
	PartitionActivations         bool `json:"partition_activations"`
	ContiguousMemoryOptimization bool `json:"contiguous_memory_optimization"`
	CPUCheckpointing             bool `json:"cpu_checkpointing"`
}

// dsSource says which plan and prediction the configuration came from.
type dsSource struct {
	Plan         string  `json:"plan"`
	Model        string  `json:"model"`
	Strategy     string  `json:"strategy"`
	Precision    string  `json:"precision,omitempty"`
	PredictedMS  float64 `json:"predicted_step_ms"`
	Stages       int     `json:"pipeline_stages"`
	DataParallel int     `json:"data_parallel"`
}

func (deepSpeedConfig) Export(w io.Writer, p *plan.Plan, o Options) error {
	src := o.source()
	if p.Mode != "" && p.Mode != "train" {
		return errorf(Invalid, "%s: mode %q: a DeepSpeed training configuration needs a plan of a training step, not of inference", src, p.Mode)
	}
	if p.Batch <= 0 {
		return errorf(Invalid, "%s: batch: the plan's batch is unknown, and DeepSpeed needs train_batch_size (plan a model whose inputs have a batch dimension)", src)
	}
	if len(p.Stages) == 0 {
		return errorf(Invalid, "%s: stages: the plan has none", src)
	}
	var types []string
	for _, d := range p.Devices {
		if d.Ops > 0 && !slices.Contains(types, d.Type) {
			types = append(types, d.Type)
		}
	}
	first := p.Stages[0]
	for _, st := range p.Stages {
		switch {
		case st.TensorParallel > 1:
			return errorf(Invalid, "%s: stages[%d].tensor_parallel: %d: DeepSpeed alone has no tensor parallelism (Megatron-DeepSpeed or torch's tensor parallel runs it); the rank-map target says which rank holds which shard", src, st.Index, st.TensorParallel)
		case len(st.ReplicaDevices) > 0:
			return errorf(Invalid, "%s: stages[%d].replica_devices: a replica spans %d devices placed op by op, and DeepSpeed runs a replica's stage on one device", src, st.Index, len(st.ReplicaDevices[0]))
		case st.Replicas != first.Replicas:
			return errorf(Invalid, "%s: stages[%d].replicas: %d against stage 0's %d: DeepSpeed's pipeline runs every stage on the same data-parallel degree", src, st.Index, st.Replicas, first.Replicas)
		case st.Sharding != first.Sharding:
			return errorf(Invalid, "%s: stages[%d].sharding: %q against stage 0's %q: DeepSpeed takes one ZeRO stage for the whole model", src, st.Index, st.Sharding, first.Sharding)
		case st.Recompute != first.Recompute:
			return errorf(Invalid, "%s: stages[%d].recompute: only some stages recompute, and DeepSpeed's configuration checkpoints all or none (checkpoint those stages' layers by hand)", src, st.Index)
		case st.MicroBatchSize <= 0:
			return errorf(Invalid, "%s: stages[%d].micro_batch_size: missing: the plan predates whole micro-batches; plan again", src, st.Index)
		}
	}
	if len(types) > 1 {
		return errorf(Invalid, "%s: devices: the plan runs on %s, and DeepSpeed assumes one device type", src, strings.Join(types, " and "))
	}
	zero := 0
	switch first.Sharding {
	case "":
	case "zero1":
		zero = 1
	case "zero2":
		zero = 2
	default:
		return errorf(Invalid, "%s: stages[0].sharding: %q is no ZeRO level DeepSpeed has", src, first.Sharding)
	}
	if len(p.Stages) > 1 && zero > 1 {
		return errorf(Invalid, "%s: stages[0].sharding: zero2 with %d pipeline stages: DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only (plan with ZeRO-1 or without sharding)", src, len(p.Stages))
	}
	mb := max(p.MicroBatches, 1)
	if first.MicroBatchSize*int64(mb)*int64(first.Replicas) != p.Batch {
		return errorf(Invalid, "%s: stages[0].micro_batch_size: %d x %d micro-batches x %d replicas is not the batch of %d", src, first.MicroBatchSize, mb, first.Replicas, p.Batch)
	}
	cfg := dsConfig{
		TrainBatchSize: p.Batch, TrainMicroBatchSizePerGPU: first.MicroBatchSize, GradientAccumulationSteps: mb,
		ZeroOptimization: dsZero{Stage: zero, ReduceScatter: zero == 2, OverlapComm: true, ContiguousGradients: true},
		Opplace: dsSource{Plan: src, Model: p.Model, Strategy: p.Strategy, Precision: p.Precision, PredictedMS: p.PredictedStepMS,
			Stages: len(p.Stages), DataParallel: first.Replicas},
	}
	if bucket := medianBucket(p, 0); bucket > 0 {
		cfg.ZeroOptimization.ReduceBucketSize = (bucket + 3) / 4
		cfg.ZeroOptimization.AllgatherBucketSize = cfg.ZeroOptimization.ReduceBucketSize
	}
	switch p.Precision {
	case "amp-bf16":
		cfg.BF16 = &dsEnabled{true}
	case "amp-fp16":
		cfg.FP16 = &dsEnabled{true}
	}
	if first.Recompute {
		cfg.ActivationCheckpointing = &dsCheckpointing{}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cfg); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

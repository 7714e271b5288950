package export

import (
	"io"
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
	// A training plan of uniform stages, as every launcher takes; then
	// what DeepSpeed alone cannot run.
	l, err := launchShape(p, o, "DeepSpeed")
	if err != nil {
		return err
	}
	if l.TP > 1 {
		return errorf(Invalid, "%s: stages[0].tensor_parallel: %d: DeepSpeed alone has no tensor parallelism (Megatron-DeepSpeed or torch's tensor parallel runs it); the rank-map target says which rank holds which shard", src, l.TP)
	}
	if len(l.Types) > 1 {
		return errorf(Invalid, "%s: devices: the plan runs on %s, and DeepSpeed assumes one device type", src, strings.Join(l.Types, " and "))
	}
	zero := map[string]int{"": 0, "zero1": 1, "zero2": 2, "zero3": 3}[l.Sharding]
	if l.PP > 1 && zero > 1 {
		return errorf(Invalid, "%s: stages[0].sharding: %s with %d pipeline stages: DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only (plan with ZeRO-1 or without sharding)", src, l.Sharding, l.PP)
	}
	cfg := dsConfig{
		TrainBatchSize: p.Batch, TrainMicroBatchSizePerGPU: l.MicroBatch, GradientAccumulationSteps: l.Accum,
		ZeroOptimization: dsZero{Stage: zero, ReduceScatter: zero >= 2, OverlapComm: true, ContiguousGradients: true},
		Opplace: dsSource{Plan: src, Model: p.Model, Strategy: p.Strategy, Precision: p.Precision, PredictedMS: p.PredictedStepMS,
			Stages: l.PP, DataParallel: l.DP},
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
	if l.Recompute {
		cfg.ActivationCheckpointing = &dsCheckpointing{}
	}
	return writeJSON(w, cfg)
}

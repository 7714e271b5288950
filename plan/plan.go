// Package plan is the document opplace writes: which device runs every
// op, when, what crosses between devices, and what the step is predicted
// to cost. It renders the plan as JSON, YAML and a human table; package
// view draws it, and internal/output writes the files of a run.
package plan

import (
	"fmt"
	"math"
)

// LowerBound is one bound a plan is held to (docs/model.md, The lower
// bound): 0 ms when it does not apply, Note saying why.
type LowerBound struct {
	Kind string  `json:"kind" yaml:"kind"`
	MS   float64 `json:"ms" yaml:"ms"`
	Note string  `json:"note,omitempty" yaml:"note,omitempty"`
}

// Plan is a device-annotated execution plan. Field names are a contract
// with the tools that read plans: extend, never rename.
type Plan struct {
	// Model is the path of the model the plan is for.
	Model string `json:"model" yaml:"model"`
	// Cluster is the cluster's name.
	Cluster string `json:"cluster" yaml:"cluster"`
	// Strategy is the strategy that produced the plan; for "auto" it
	// names the winner, as "auto:m-etf"; Family its family (placement,
	// data-parallel, pipeline, hybrid).
	Strategy string `json:"strategy" yaml:"strategy"`
	Family   string `json:"family,omitempty" yaml:"family,omitempty"`
	// Mode is "infer" (one forward pass) or "train" (a training step).
	Mode string `json:"mode" yaml:"mode"`
	// Precision is the numeric precision the step was planned in (fp32,
	// tf32, amp-bf16, amp-fp16); absent when the plan keeps the model
	// file's element types. PrecisionHint, in the table only, says what
	// amp-bf16 would change for a float32 plan on tensor-core devices.
	Precision     string `json:"precision,omitempty" yaml:"precision,omitempty"`
	PrecisionHint string `json:"-" yaml:"-"`
	// Runtime is the runtime the plan was made for (eager, eager-sdpa,
	// compile, ...): which kernels it runs. Absent for the default, where
	// the fusion mode alone says it.
	Runtime string `json:"runtime,omitempty" yaml:"runtime,omitempty"`
	// PredictedStepMS is the simulated step time.
	PredictedStepMS float64 `json:"predicted_step_ms" yaml:"predicted_step_ms"`
	// LowerBoundMS is the least step time any plan of the strategy's
	// space could reach; LowerBoundKind names the bound that binds
	// ("work", "critical path", "memory-forced communication", "LP
	// relaxation", ...); LowerBounds lists every bound the plan was held
	// to, with how each came out or why it was skipped.
	LowerBoundMS   float64      `json:"lower_bound_ms" yaml:"lower_bound_ms"`
	LowerBoundKind string       `json:"lower_bound_kind,omitempty" yaml:"lower_bound_kind,omitempty"`
	LowerBounds    []LowerBound `json:"lower_bounds,omitempty" yaml:"lower_bounds,omitempty"`
	// Gap is PredictedStepMS / LowerBoundMS - 1.
	Gap float64 `json:"gap" yaml:"gap"`
	// Batch is the samples one step processes (0: unknown) and
	// ThroughputSamplesPerS the samples per second at the predicted step.
	Batch                 int64   `json:"batch,omitempty" yaml:"batch,omitempty"`
	ThroughputSamplesPerS float64 `json:"throughput_samples_per_s,omitempty" yaml:"throughput_samples_per_s,omitempty"`
	// EstimatedStepMS is the strategy's own analytic prediction of the
	// step (a partitioner's model), when it has one; the predicted step
	// is always the simulator's.
	EstimatedStepMS float64 `json:"estimated_step_ms,omitempty" yaml:"estimated_step_ms,omitempty"`
	// Fits is true when every device's peak memory is within its capacity.
	Fits bool `json:"fits" yaml:"fits"`
	// CrossDeviceBytes sums the bytes of every transfer.
	CrossDeviceBytes int64      `json:"cross_device_bytes" yaml:"cross_device_bytes"`
	Devices          []Device   `json:"devices" yaml:"devices"`
	Ops              []Op       `json:"ops" yaml:"ops"`
	Transfers        []Transfer `json:"transfers" yaml:"transfers"`
	// AllReduces are the collectives of replicated stages: gradient
	// all-reduces, and under ZeRO reduce-scatters and all-gathers.
	AllReduces []AllReduce `json:"all_reduces,omitempty" yaml:"all_reduces,omitempty"`
	// Schedule is gpipe or 1f1b (plans of several stages or
	// micro-batches); MicroBatches the count a step is split into (1: the
	// whole batch at once); BottleneckMS the slowest stage's time per
	// micro-batch, its sends and its share of the all-reduce and update
	// included; BubbleFraction the share of the stages' time idle in the
	// step (plans of several stages). Stages always lists at least one
	// stage: a placement or data-parallel plan is one.
	Schedule string `json:"schedule,omitempty" yaml:"schedule,omitempty"`
	Replicas int    `json:"replicas,omitempty" yaml:"replicas,omitempty"`
	// TensorParallel is the largest tensor-parallel degree of a stage (0:
	// none).
	TensorParallel int     `json:"tensor_parallel,omitempty" yaml:"tensor_parallel,omitempty"`
	MicroBatches   int     `json:"micro_batches,omitempty" yaml:"micro_batches,omitempty"`
	BottleneckMS   float64 `json:"bottleneck_ms,omitempty" yaml:"bottleneck_ms,omitempty"`
	BubbleFraction float64 `json:"bubble_fraction,omitempty" yaml:"bubble_fraction,omitempty"`
	Stages         []Stage `json:"stages,omitempty" yaml:"stages,omitempty"`
	// Rules are the user's rules the plan was made under and what each
	// bound (see docs/constraints.md); every hard rule holds in the plan.
	Rules []Rule `json:"rules,omitempty" yaml:"rules,omitempty"`
	// Candidates lists every strategy tried (for "auto"), best first.
	Candidates []Candidate `json:"candidates,omitempty" yaml:"candidates,omitempty"`
	// Warnings are problems with the input that did not stop the plan.
	Warnings []string `json:"warnings,omitempty" yaml:"warnings,omitempty"`
	// Notes are what the chosen strategy reported about how it found the
	// plan: a solver's status, incumbent, bound and time, or a fallback
	// it took (m-sct placing by plain m-ETF, ilp keeping its starting
	// schedule, a pipeline partitioned again with less memory). They
	// carry solve times, so they are in the table only and plan files
	// stay byte-identical.
	Notes []string `json:"-" yaml:"-"`
}

// Device is one device's share of the plan.
type Device struct {
	Name            string `json:"name" yaml:"name"`
	Type            string `json:"type" yaml:"type"`
	Host            string `json:"host" yaml:"host"`
	MemoryBytes     int64  `json:"memory_bytes" yaml:"memory_bytes"`
	PeakMemoryBytes int64  `json:"peak_memory_bytes" yaml:"peak_memory_bytes"`
	ResidentBytes   int64  `json:"resident_bytes" yaml:"resident_bytes"`
	// ReservedBytes is the memory a reserve rule keeps free, already
	// taken off MemoryBytes.
	ReservedBytes int64   `json:"reserved_bytes,omitempty" yaml:"reserved_bytes,omitempty"`
	BusyMS        float64 `json:"busy_ms" yaml:"busy_ms"`
	Ops           int     `json:"ops" yaml:"ops"`
	// Memory is the device's memory over the step, at most
	// MemorySamples points: each holds the most the device held from its
	// time until the next sample's, so the curve keeps every peak.
	Memory []MemorySample `json:"memory,omitempty" yaml:"memory,omitempty"`
	// Breakdown splits the memory a device holds for its weights, in
	// plans made with a precision (absent otherwise, so plan files made
	// without one stay as they were).
	Breakdown *MemoryBreakdown `json:"memory_breakdown,omitempty" yaml:"memory_breakdown,omitempty"`
}

// MemoryBreakdown is what one device holds of the model's weights, each
// tensor counted once per device that holds it. Activations are the rest
// of PeakMemoryBytes.
type MemoryBreakdown struct {
	// WeightBytes are the parameters the device's ops read (the float32
	// master weights under amp); HalfWeightBytes the half-precision
	// working copies autocast casts them to (amp only), alive from the
	// forward pass until the backward pass read them.
	WeightBytes     int64 `json:"weight_bytes" yaml:"weight_bytes"`
	HalfWeightBytes int64 `json:"half_weight_bytes" yaml:"half_weight_bytes"`
	// GradientBytes are the weight gradients the device's backward ops
	// write for the optimizer, in their element type (float32 under amp,
	// as PyTorch's param.grad of a float32 parameter), what the
	// all-reduce moves; OptimizerStateBytes the optimizer's state. On a
	// stage sharded by ZeRO both are one replica's: the optimizer state
	// over the replicas (zero1 to zero3), and the gradients once
	// reduce-scattered (zero2, zero3); under zero3 the weights and half
	// copies too (a module's weights gathered whole for a pass count as
	// activations).
	GradientBytes       int64 `json:"gradient_bytes" yaml:"gradient_bytes"`
	OptimizerStateBytes int64 `json:"optimizer_state_bytes" yaml:"optimizer_state_bytes"`
}

// MemorySamples bounds a device's memory curve in a plan.
const MemorySamples = 200

// MemorySample is the most memory a device held from MS until the next
// sample.
type MemorySample struct {
	MS    float64 `json:"ms" yaml:"ms"`
	Bytes int64   `json:"bytes" yaml:"bytes"`
}

// Op is one op's placement and simulated run.
type Op struct {
	Name string `json:"name" yaml:"name"`
	Type string `json:"type" yaml:"type"`
	// Phase is forward, backward or update.
	Phase   string  `json:"phase" yaml:"phase"`
	Device  string  `json:"device" yaml:"device"`
	StartMS float64 `json:"start_ms" yaml:"start_ms"`
	EndMS   float64 `json:"end_ms" yaml:"end_ms"`
	// Runs lists the op's run per micro-batch, when it runs more than
	// once in the step; StartMS and EndMS are then its first start and
	// last end.
	Runs []Run `json:"runs,omitempty" yaml:"runs,omitempty"`
	// Stage is the index of the op's stage in Stages, when the plan has
	// more than one stage (nil otherwise: every op is in stage 0).
	Stage *int `json:"stage,omitempty" yaml:"stage,omitempty"`
	// Shard is how a tensor-parallel group splits the op ("column",
	// "row", "heads", "replicated", ...; a gradient or update op says
	// what it follows), in plans with tensor-parallel stages.
	Shard string `json:"shard,omitempty" yaml:"shard,omitempty"`
	// Covers lists the model's ops this op runs as one kernel (a fused
	// attention core under a runtime that has one), when it is not an op
	// of the model file itself.
	Covers []string `json:"covers,omitempty" yaml:"covers,omitempty"`
}

// Run is one micro-batch's run of an op.
type Run struct {
	MicroBatch int     `json:"micro_batch" yaml:"micro_batch"`
	StartMS    float64 `json:"start_ms" yaml:"start_ms"`
	EndMS      float64 `json:"end_ms" yaml:"end_ms"`
}

// Transfer is one tensor copied between devices.
type Transfer struct {
	Tensor string `json:"tensor" yaml:"tensor"`
	// MicroBatch is the micro-batch the copy belongs to (from 0).
	MicroBatch int     `json:"micro_batch,omitempty" yaml:"micro_batch,omitempty"`
	From       string  `json:"from" yaml:"from"`
	To         string  `json:"to" yaml:"to"`
	Bytes      int64   `json:"bytes" yaml:"bytes"`
	StartMS    float64 `json:"start_ms" yaml:"start_ms"`
	EndMS      float64 `json:"end_ms" yaml:"end_ms"`
}

// AllReduce is one collective across a stage's replicas: a bucket of
// gradients all-reduced or reduce-scattered, or a bucket of updated
// weights all-gathered.
type AllReduce struct {
	// Kind is all-reduce (DDP, ZeRO-1's gradients), reduce-scatter
	// (ZeRO-2's gradients, a module's under ZeRO-3) or all-gather (the
	// updated weights under ZeRO-1 and ZeRO-2, a module's weights before
	// each pass under ZeRO-3).
	Kind    string   `json:"kind" yaml:"kind"`
	Stage   int      `json:"stage" yaml:"stage"`
	Devices []string `json:"devices" yaml:"devices"`
	Bytes   int64    `json:"bytes" yaml:"bytes"`
	StartMS float64  `json:"start_ms" yaml:"start_ms"`
	EndMS   float64  `json:"end_ms" yaml:"end_ms"`
	// Tensor is the activation a tensor-parallel group collects (empty
	// for the replicas' gradient and parameter buckets).
	Tensor string `json:"tensor,omitempty" yaml:"tensor,omitempty"`
}

// Stage is one stage of the plan: a contiguous piece of the graph on a
// device group, replicated. The plan's ops name devices of the first
// replica; the other replicas run the same ops on their share of the
// batch.
type Stage struct {
	Index      int    `json:"index" yaml:"index"`
	DeviceType string `json:"device_type" yaml:"device_type"`
	// Devices lists every device of the stage, replica after replica;
	// ReplicaDevices the same grouped by replica.
	Devices        []string   `json:"devices" yaml:"devices"`
	ReplicaDevices [][]string `json:"replica_devices,omitempty" yaml:"replica_devices,omitempty"`
	Replicas       int        `json:"replicas" yaml:"replicas"`
	// MicroBatchSize is the samples each replica runs per micro-batch:
	// the batch is MicroBatchSize × the plan's MicroBatches × Replicas
	// exactly (a runtime's per-rank micro-batch size; with MicroBatches
	// its gradient accumulation steps). 0 when the batch is unknown.
	MicroBatchSize int64 `json:"micro_batch_size,omitempty" yaml:"micro_batch_size,omitempty"`
	// Sharding is how the replicas keep optimizer state and gradients:
	// zero1 (optimizer state sharded), zero2 (and gradients), zero3 (and
	// weights, gathered per module for each pass); absent for
	// plain DDP and for one replica.
	Sharding string `json:"sharding,omitempty" yaml:"sharding,omitempty"`
	// TensorParallel is the stage's tensor-parallel degree: each replica
	// is a group of this many devices sharing every op as the ops'
	// Shard says (docs/tensor-parallel.md); 0 for none. TensorSyncMS and
	// TensorSyncBytes are the group's collectives per micro-batch, on
	// its tensor-parallel stream beside the compute;
	// TensorSyncExposedMS is the part of them during which the group's
	// first device computed nothing, counted in SyncMS.
	TensorParallel      int     `json:"tensor_parallel,omitempty" yaml:"tensor_parallel,omitempty"`
	TensorSyncMS        float64 `json:"tensor_sync_ms,omitempty" yaml:"tensor_sync_ms,omitempty"`
	TensorSyncBytes     int64   `json:"tensor_sync_bytes,omitempty" yaml:"tensor_sync_bytes,omitempty"`
	TensorSyncExposedMS float64 `json:"tensor_sync_exposed_ms,omitempty" yaml:"tensor_sync_exposed_ms,omitempty"`
	// Recompute is set when the stage recomputes activations: it frees
	// what its modules save for backward after the forward pass and runs
	// their forward again before their backward (activation
	// checkpointing per module, as torch.utils.checkpoint around each
	// block).
	Recompute bool `json:"recompute,omitempty" yaml:"recompute,omitempty"`
	// Ops are the stage's ops in plan order; FirstOp and LastOp its first
	// and last forward ops that compute (bookkeeping ops such as Identity,
	// Constant and Shape skipped), ModulePrefix the module path its
	// forward ops share ("/blocks/blocks.11/"; "/" when only the root)
	// when op names carry one, and FirstModule and LastModule the modules
	// FirstOp and LastOp belong to, at the level pipeline stages are cut
	// at ("/blocks/blocks.6/"): the split points to give
	// torch.distributed.pipelining or DeepSpeed.
	Ops          []string `json:"ops" yaml:"ops"`
	FirstOp      string   `json:"first_op" yaml:"first_op"`
	LastOp       string   `json:"last_op" yaml:"last_op"`
	ModulePrefix string   `json:"module_prefix,omitempty" yaml:"module_prefix,omitempty"`
	FirstModule  string   `json:"first_module,omitempty" yaml:"first_module,omitempty"`
	LastModule   string   `json:"last_module,omitempty" yaml:"last_module,omitempty"`
	// Per micro-batch, from the simulated step: compute (the busiest
	// device's), sends to other stages, the share of the per-step
	// all-reduce and update with the exposed tensor-parallel syncs, and
	// their sum.
	ComputeMS float64 `json:"compute_ms" yaml:"compute_ms"`
	CommMS    float64 `json:"comm_ms" yaml:"comm_ms"`
	SyncMS    float64 `json:"sync_ms" yaml:"sync_ms"`
	TimeMS    float64 `json:"time_ms" yaml:"time_ms"`
	// SendBytes is what the stage sends to later stages per step.
	SendBytes int64 `json:"send_bytes" yaml:"send_bytes"`
	// PeakMemoryBytes is one device's parameters, activation stash and
	// scratch; AliveMicroBatches how many micro-batches it stashes at once.
	PeakMemoryBytes   int64 `json:"peak_memory_bytes" yaml:"peak_memory_bytes"`
	AliveMicroBatches int   `json:"alive_micro_batches" yaml:"alive_micro_batches"`
	// AllReduceMS and AllReduceBytes are the stage's collectives
	// (gradient all-reduce; under ZeRO reduce-scatter or all-reduce, and
	// all-gather, summed) per step (0 for one replica); StartMS and EndMS bound its ops.
	AllReduceMS    float64 `json:"all_reduce_ms" yaml:"all_reduce_ms"`
	AllReduceBytes int64   `json:"all_reduce_bytes" yaml:"all_reduce_bytes"`
	StartMS        float64 `json:"start_ms" yaml:"start_ms"`
	EndMS          float64 `json:"end_ms" yaml:"end_ms"`
}

// Modules describes the stage's modules for a reader: its first and last
// modules ("/blocks/blocks.0/ .. /blocks/blocks.5/") when they differ, else
// the module path its forward ops share; empty when op names carry none.
func (s *Stage) Modules() string {
	if s.FirstModule != "" && s.LastModule != "" && s.FirstModule != s.LastModule {
		return s.FirstModule + " .. " + s.LastModule
	}
	return s.ModulePrefix
}

// Stage returns the plan's stage of index i, or nil.
func (p *Plan) Stage(i int) *Stage {
	for k := range p.Stages {
		if p.Stages[k].Index == i {
			return &p.Stages[k]
		}
	}
	return nil
}

// DeviceStages maps every device a stage names, replicas included, to
// the stage's index; devices the plan leaves unused are absent.
func (p *Plan) DeviceStages() map[string]int {
	out := map[string]int{}
	for _, st := range p.Stages {
		for _, d := range st.Devices {
			out[d] = st.Index
		}
	}
	return out
}

// Rule is one of the user's rules and what it bound in the plan.
type Rule struct {
	// Rule is its one-line spelling (the command-line flag's, after the
	// kind); Source is where it was written (FILE:LINE or the flag).
	Rule   string `json:"rule" yaml:"rule"`
	Source string `json:"source,omitempty" yaml:"source,omitempty"`
	// Hard is false for a soft rule (prefer).
	Hard bool `json:"hard" yaml:"hard"`
	// Ops counts the ops it selects; Examples names the first few.
	Ops      int      `json:"ops,omitempty" yaml:"ops,omitempty"`
	Examples []string `json:"examples,omitempty" yaml:"examples,omitempty"`
	// Devices are the devices its target names.
	Devices []string `json:"devices,omitempty" yaml:"devices,omitempty"`
	// Against (soft rules) counts the selected ops the plan runs against
	// the preference; PenaltyMS is what they added to the objective.
	Against   int     `json:"against,omitempty" yaml:"against,omitempty"`
	PenaltyMS float64 `json:"penalty_ms,omitempty" yaml:"penalty_ms,omitempty"`
	// Effect says what the rule did to the plan, in words.
	Effect string `json:"effect,omitempty" yaml:"effect,omitempty"`
}

// Candidate is one strategy's outcome when several were tried.
type Candidate struct {
	Strategy              string  `json:"strategy" yaml:"strategy"`
	Family                string  `json:"family,omitempty" yaml:"family,omitempty"`
	PredictedStepMS       float64 `json:"predicted_step_ms,omitempty" yaml:"predicted_step_ms,omitempty"`
	ThroughputSamplesPerS float64 `json:"throughput_samples_per_s,omitempty" yaml:"throughput_samples_per_s,omitempty"`
	// PeakMemoryBytes is the largest device peak of the candidate's plan.
	PeakMemoryBytes int64 `json:"peak_memory_bytes,omitempty" yaml:"peak_memory_bytes,omitempty"`
	Fits            bool  `json:"fits" yaml:"fits"`
	// Shape summarises the plan: stages, replicas, micro-batches.
	Shape string `json:"shape,omitempty" yaml:"shape,omitempty"`
	// SolveMS is the strategy's search time plus the simulator's. It
	// varies from run to run, so only the table shows it: plan files stay
	// byte-identical.
	SolveMS float64 `json:"-" yaml:"-"`
	Error   string  `json:"error,omitempty" yaml:"error,omitempty"`
	// Why says why the candidate lost to the plan kept: slower by how
	// much, does not fit, failed, or pruned by a bound.
	Why string `json:"why,omitempty" yaml:"why,omitempty"`
}

// Fraction rounds a ratio to six decimals, so plans print stable numbers.
func Fraction(v float64) float64 { return math.Round(v*1e6) / 1e6 }

// FormatMS prints a duration given in ms for a label: three significant
// digits, in seconds from 1000 ms.
func FormatMS(ms float64) string {
	switch {
	case ms >= 1000:
		return fmt.Sprintf("%.2f s", ms/1000)
	case ms >= 100:
		return fmt.Sprintf("%.0f ms", ms)
	case ms >= 10:
		return fmt.Sprintf("%.1f ms", ms)
	case ms >= 1:
		return fmt.Sprintf("%.2f ms", ms)
	}
	return fmt.Sprintf("%.3f ms", ms)
}

// Count prints n with its noun for a label, singular for 1: "1 copy",
// "3 copies".
func Count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// MS converts seconds to milliseconds rounded to the nanosecond, so plans
// print short, stable numbers.
func MS(seconds float64) float64 { return math.Round(seconds*1e9) / 1e6 }

// MemoryEnvelope reduces a memory curve (samples in time order, each
// holding until the next, the last until endMS) to at most n samples
// without losing a peak: the span is cut into n equal windows, and each
// window's sample is the most memory held at any time in it. Consecutive
// windows of equal value merge.
func MemoryEnvelope(samples []MemorySample, endMS float64, n int) []MemorySample {
	if len(samples) <= n || n <= 0 || endMS <= 0 {
		return samples
	}
	width := endMS / float64(n)
	out := make([]MemorySample, 0, n)
	var held int64 // the value in effect when the window opens
	i := 0
	for w := 0; w < n; w++ {
		from, to := float64(w)*width, float64(w+1)*width
		peak := held
		for ; i < len(samples) && (samples[i].MS < to || w == n-1); i++ {
			held = samples[i].Bytes
			peak = max(peak, held)
		}
		if len(out) > 0 && out[len(out)-1].Bytes == peak {
			continue
		}
		out = append(out, MemorySample{MS: math.Round(from*1e6) / 1e6, Bytes: peak})
	}
	return out
}

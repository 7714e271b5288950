// Package plan is the document opplace writes: which device runs every
// op, when, what crosses between devices, and what the step is predicted
// to cost. It renders the plan as JSON, YAML, a human table and Graphviz
// DOT, and writes files atomically.
package plan

import (
	"math"
)

// Plan is a device-annotated execution plan. Field names are a contract
// with the tools that read plans: extend, never rename.
type Plan struct {
	// Model is the path of the model the plan is for.
	Model string `json:"model" yaml:"model"`
	// Cluster is the cluster's name.
	Cluster string `json:"cluster" yaml:"cluster"`
	// Strategy is the placement strategy that produced the plan; for
	// "auto" it names the winner, as "auto:m-etf".
	Strategy string `json:"strategy" yaml:"strategy"`
	// Mode is "infer" (one forward pass) or "train" (a training step).
	Mode string `json:"mode" yaml:"mode"`
	// PredictedStepMS is the simulated step time.
	PredictedStepMS float64 `json:"predicted_step_ms" yaml:"predicted_step_ms"`
	// LowerBoundMS is the least step time any placement could reach.
	LowerBoundMS float64 `json:"lower_bound_ms" yaml:"lower_bound_ms"`
	// Gap is PredictedStepMS / LowerBoundMS - 1.
	Gap float64 `json:"gap" yaml:"gap"`
	// Fits is true when every device's peak memory is within its capacity.
	Fits bool `json:"fits" yaml:"fits"`
	// CrossDeviceBytes sums the bytes of every transfer.
	CrossDeviceBytes int64      `json:"cross_device_bytes" yaml:"cross_device_bytes"`
	Devices          []Device   `json:"devices" yaml:"devices"`
	Ops              []Op       `json:"ops" yaml:"ops"`
	Transfers        []Transfer `json:"transfers" yaml:"transfers"`
	// The pipeline fields are set by the pipeline strategies only.
	// Schedule is gpipe or 1f1b; MicroBatches the count a step is split
	// into; BottleneckMS the slowest stage's time per micro-batch,
	// transfers and its share of weight synchronisation included (what
	// the partitioners minimise); BubbleFraction the share of stage time
	// idle in the pipelined part of the step.
	Schedule       string  `json:"schedule,omitempty" yaml:"schedule,omitempty"`
	MicroBatches   int     `json:"micro_batches,omitempty" yaml:"micro_batches,omitempty"`
	BottleneckMS   float64 `json:"bottleneck_ms,omitempty" yaml:"bottleneck_ms,omitempty"`
	BubbleFraction float64 `json:"bubble_fraction,omitempty" yaml:"bubble_fraction,omitempty"`
	Stages         []Stage `json:"stages,omitempty" yaml:"stages,omitempty"`
	// Candidates lists every strategy tried (for "auto"), best first.
	Candidates []Candidate `json:"candidates,omitempty" yaml:"candidates,omitempty"`
	// Warnings are problems with the input that did not stop the plan.
	Warnings []string `json:"warnings,omitempty" yaml:"warnings,omitempty"`
}

// Device is one device's share of the plan.
type Device struct {
	Name            string  `json:"name" yaml:"name"`
	Type            string  `json:"type" yaml:"type"`
	Host            string  `json:"host" yaml:"host"`
	MemoryBytes     int64   `json:"memory_bytes" yaml:"memory_bytes"`
	PeakMemoryBytes int64   `json:"peak_memory_bytes" yaml:"peak_memory_bytes"`
	ResidentBytes   int64   `json:"resident_bytes" yaml:"resident_bytes"`
	BusyMS          float64 `json:"busy_ms" yaml:"busy_ms"`
	Ops             int     `json:"ops" yaml:"ops"`
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
}

// Transfer is one tensor copied between devices.
type Transfer struct {
	Tensor  string  `json:"tensor" yaml:"tensor"`
	From    string  `json:"from" yaml:"from"`
	To      string  `json:"to" yaml:"to"`
	Bytes   int64   `json:"bytes" yaml:"bytes"`
	StartMS float64 `json:"start_ms" yaml:"start_ms"`
	EndMS   float64 `json:"end_ms" yaml:"end_ms"`
}

// Stage is one pipeline stage. Its devices hold replicas of the same ops;
// the plan's ops name the first of them as their device.
type Stage struct {
	Index      int      `json:"index" yaml:"index"`
	DeviceType string   `json:"device_type" yaml:"device_type"`
	Devices    []string `json:"devices" yaml:"devices"`
	Replicas   int      `json:"replicas" yaml:"replicas"`
	// Ops are the stage's ops in plan order; FirstOp and LastOp its first
	// and last forward ops, and ModulePrefix their common module path
	// ("/blocks.11/") when op names carry one: the split points to give
	// torch.distributed.pipelining or DeepSpeed.
	Ops          []string `json:"ops" yaml:"ops"`
	FirstOp      string   `json:"first_op" yaml:"first_op"`
	LastOp       string   `json:"last_op" yaml:"last_op"`
	ModulePrefix string   `json:"module_prefix,omitempty" yaml:"module_prefix,omitempty"`
	// Per micro-batch: compute, sends to the neighbouring stages, share
	// of the per-step weight synchronisation, and their sum.
	ComputeMS float64 `json:"compute_ms" yaml:"compute_ms"`
	CommMS    float64 `json:"comm_ms" yaml:"comm_ms"`
	SyncMS    float64 `json:"sync_ms" yaml:"sync_ms"`
	TimeMS    float64 `json:"time_ms" yaml:"time_ms"`
	// SendBytes is what the stage sends to the next per step.
	SendBytes int64 `json:"send_bytes" yaml:"send_bytes"`
	// PeakMemoryBytes is one device's parameters, activation stash and
	// scratch; AliveMicroBatches how many micro-batches it stashes at once.
	PeakMemoryBytes   int64 `json:"peak_memory_bytes" yaml:"peak_memory_bytes"`
	AliveMicroBatches int   `json:"alive_micro_batches" yaml:"alive_micro_batches"`
}

// Candidate is one strategy's outcome when several were tried.
type Candidate struct {
	Strategy        string  `json:"strategy" yaml:"strategy"`
	PredictedStepMS float64 `json:"predicted_step_ms,omitempty" yaml:"predicted_step_ms,omitempty"`
	Fits            bool    `json:"fits" yaml:"fits"`
	Error           string  `json:"error,omitempty" yaml:"error,omitempty"`
}

// Fraction rounds a ratio to six decimals, so plans print stable numbers.
func Fraction(v float64) float64 { return math.Round(v*1e6) / 1e6 }

// MS converts seconds to milliseconds rounded to the nanosecond, so plans
// print short, stable numbers.
func MS(seconds float64) float64 { return math.Round(seconds*1e9) / 1e6 }

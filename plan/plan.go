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

// Candidate is one strategy's outcome when several were tried.
type Candidate struct {
	Strategy        string  `json:"strategy" yaml:"strategy"`
	PredictedStepMS float64 `json:"predicted_step_ms,omitempty" yaml:"predicted_step_ms,omitempty"`
	Fits            bool    `json:"fits" yaml:"fits"`
	Error           string  `json:"error,omitempty" yaml:"error,omitempty"`
}

// MS converts seconds to milliseconds rounded to the nanosecond, so plans
// print short, stable numbers.
func MS(seconds float64) float64 { return math.Round(seconds*1e9) / 1e6 }

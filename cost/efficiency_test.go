package cost_test

import (
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/train"
)

// TestAchievableSpeed checks the device type's achievable-speed model on
// one MatMul: e_max by math path, the ramp W/(W+W_half), the sustained
// clock, the memory fraction, and the flat override.
func TestAchievableSpeed(t *testing.T) {
	const n = 1024
	g, _ := matmulGraph(t, n)
	flops := float64(2 * n * n * n)
	dt := &cluster.DeviceType{
		Name:            "X",
		PeakFLOPS:       map[graph.DType]float64{graph.Float32: 10e12, graph.BFloat16: 100e12},
		MemoryBandwidth: 1e12,
		LaunchOverhead:  5e-6,
		Efficiency:      cluster.Efficiency{Compute: 0.9, Tensor: 0.5, MatmulHalf: flops, Memory: 0.6, Clock: 0.5},
	}
	r := cost.Roofline{}
	// CUDA cores: 0.9 x clock 0.5 x ramp 1/2 (W = W_half).
	if got, want := r.ComputeEfficiencyOf(g, 0, dt), 0.9*0.5*0.5; !near(got, want) {
		t.Errorf("fp32 compute efficiency %v, want %v", got, want)
	}
	if got, want := r.ComputeTime(g, 0, dt), flops/(10e12*0.9*0.5*0.5); !near(got, want) {
		t.Errorf("fp32 compute time %v, want %v", got, want)
	}
	// Tensor cores under amp-bf16: the Tensor e_max.
	amp, _, err := train.ApplyPrecision(g, train.AMPBF16)
	if err != nil {
		t.Fatal(err)
	}
	mm, _ := amp.OpByName("mm")
	if got, want := r.ComputeEfficiencyOf(amp, mm, dt), 0.5*0.5*0.5; !near(got, want) {
		t.Errorf("bf16 compute efficiency %v, want %v", got, want)
	}
	// The ramp: a matmul of 8 W_half FLOPs is at 8/9 of e_max.
	big, _ := matmulGraph(t, 2*n)
	if got, want := r.ComputeEfficiencyOf(big, 0, dt), 0.9*0.5*8.0/9.0; !near(got, want) {
		t.Errorf("8 W_half matmul efficiency %v, want %v", got, want)
	}
	// The cast is memory-bound at 0.6 of bandwidth; no ramp, no clock.
	cast, ok := amp.OpByName("w_autocast_bfloat16")
	if !ok {
		t.Fatal("no cast of w")
	}
	if got, want := r.MemoryTime(amp, cast, dt), float64(6*n*n)/(1e12*0.6); !near(got, want) {
		t.Errorf("cast memory time %v, want %v", got, want)
	}
	// A flat efficiency overrides the whole model.
	flat := cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}
	if got, want := flat.OpTime(g, 0, dt), flops/10e12+5e-6; !near(got, want) {
		t.Errorf("flat: %v, want %v", got, want)
	}
	// A type with no model gets the flat defaults, as before the model.
	dt.Efficiency = cluster.Efficiency{}
	if got := r.ComputeEfficiencyOf(g, 0, dt); got != cost.DefaultComputeEfficiency {
		t.Errorf("no model: compute efficiency %v, want %v", got, cost.DefaultComputeEfficiency)
	}
	if got := r.MemoryEfficiencyOf(dt); got != cost.DefaultMemoryEfficiency {
		t.Errorf("no model: memory efficiency %v, want %v", got, cost.DefaultMemoryEfficiency)
	}
}

// TestT4SustainedClock: the power-capped T4 preset charges a 4096^3
// HGEMM at about the 24 of 65 TFLOP/s measured for it (presets.go cites
// the source), far below its datasheet peak.
func TestT4SustainedClock(t *testing.T) {
	const n = 4096
	g, _ := matmulGraph(t, n)
	amp, _, err := train.ApplyPrecision(g, train.AMPFP16)
	if err != nil {
		t.Fatal(err)
	}
	mm, _ := amp.OpByName("mm")
	t4, _ := cluster.Preset("T4")
	r := cost.Roofline{}
	rate := float64(2*n*n*n) / r.ComputeTime(amp, mm, t4)
	if rate < 22e12 || rate > 26e12 {
		t.Errorf("T4 4096^3 HGEMM at %.1f TFLOP/s, want about 24", rate/1e12)
	}
	v100, _ := cluster.Preset("V100-16GB")
	if ev, e := r.ComputeEfficiencyOf(amp, mm, v100), r.ComputeEfficiencyOf(amp, mm, t4); ev <= e {
		t.Errorf("V100 efficiency %v not above the power-capped T4's %v", ev, e)
	}
}

// TestConvOnTensorCores: convolutions on tensor cores take TensorConv,
// matmuls Tensor, and both on CUDA cores Compute.
func TestConvOnTensorCores(t *testing.T) {
	g, _ := matmulGraph(t, 512)
	g.Ops[0].Type = "Conv"
	dt, _ := cluster.Preset("V100-16GB")
	r := cost.Roofline{}
	ramp := func(gr *graph.Graph, id graph.OpID) float64 {
		w := float64(gr.Ops[id].Work.FLOPs)
		return w / (w + dt.Efficiency.MatmulHalf)
	}
	if got, want := r.ComputeEfficiencyOf(g, 0, dt), dt.Efficiency.Compute*ramp(g, 0); !near(got, want) {
		t.Errorf("fp32 Conv: %v, want %v", got, want)
	}
	amp, _, err := train.ApplyPrecision(g, train.AMPFP16)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := amp.OpByName("mm")
	if got, want := r.ComputeEfficiencyOf(amp, id, dt), dt.Efficiency.TensorConv*ramp(amp, id); !near(got, want) {
		t.Errorf("fp16 Conv: %v, want %v", got, want)
	}
	amp.Ops[id].Type = "MatMul"
	if got, want := r.ComputeEfficiencyOf(amp, id, dt), dt.Efficiency.Tensor*ramp(amp, id); !near(got, want) {
		t.Errorf("fp16 MatMul: %v, want %v", got, want)
	}
}

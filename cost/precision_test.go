package cost_test

import (
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/train"
)

// matmulGraph is one MatMul of two n x n float32 matrices, the same under
// amp-bf16 (casts of both inputs to bfloat16, then the MatMul), and the
// A100-80GB preset.
func matmulGraph(t *testing.T, n int64) (*graph.Graph, *cluster.DeviceType) {
	t.Helper()
	g := graph.New("mm", 0, 0)
	var ids [3]graph.TensorID
	for i, name := range []string{"a", "w", "y"} {
		kind := []graph.TensorKind{graph.Input, graph.Parameter, graph.Activation}[i]
		id, err := g.AddTensor(graph.Tensor{Name: name, DType: graph.Float32, Shape: []int64{n, n}, ShapeKnown: true, Kind: kind})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	if _, err := g.AddOp(graph.Op{Name: "mm", Type: "MatMul", Inputs: ids[:2], Outputs: ids[2:], Work: graph.Work{FLOPs: 2 * n * n * n}}); err != nil {
		t.Fatal(err)
	}
	g.Inputs, g.Outputs = ids[:1], ids[2:]
	dt, _ := cluster.Preset("A100-80GB")
	return g, dt
}

func TestMatMulAtTensorCoreRate(t *testing.T) {
	const n = 4096
	g, dt := matmulGraph(t, n)
	amp, _, err := train.ApplyPrecision(g, train.AMPBF16)
	if err != nil {
		t.Fatal(err)
	}
	mmID, _ := amp.OpByName("mm")
	// The flat efficiencies, so that the times show the peaks alone (the
	// device type's achievable-speed model is tested in efficiency_test.go).
	r := cost.Roofline{ComputeEfficiency: cost.DefaultComputeEfficiency, MemoryEfficiency: cost.DefaultMemoryEfficiency}
	flops := float64(2 * n * n * n)
	fp32 := r.OpTime(g, 0, dt)
	bf16 := r.OpTime(amp, mmID, dt)
	r32 := r
	r32.TF32 = true
	tf32 := r32.OpTime(g, 0, dt)
	// Compute-bound: FLOPs / (peak x 0.7) + launch, at 19.5, 312 and 156
	// TFLOP/s (A100 datasheet).
	for _, c := range []struct {
		name      string
		got, peak float64
	}{{"fp32", fp32, 19.5e12}, {"amp-bf16", bf16, 312e12}, {"tf32", tf32, 156e12}} {
		if want := flops/(c.peak*cost.DefaultComputeEfficiency) + dt.LaunchOverhead; !near(c.got, want) {
			t.Errorf("%s: MatMul takes %g s, want %g", c.name, c.got, want)
		}
	}
	if ratio := (fp32 - dt.LaunchOverhead) / (bf16 - dt.LaunchOverhead); !near(ratio, 16) {
		t.Errorf("fp32/bf16 MatMul time ratio %v, want the peak ratio 312/19.5 = 16", ratio)
	}
	// The casts are memory-bound: 4 bytes read and 2 written per element.
	castID, ok := amp.OpByName("w_autocast_bfloat16")
	if !ok {
		t.Fatal("no cast of w")
	}
	want := float64(6*n*n)/(dt.MemoryBandwidth*cost.DefaultMemoryEfficiency) + dt.LaunchOverhead
	if got := r.OpTime(amp, castID, dt); !near(got, want) {
		t.Errorf("the weight's cast takes %g s, want %g", got, want)
	}
	// A part without TF32 runs tf32 matmuls at its float32 figure.
	v100, _ := cluster.Preset("V100-16GB")
	if a, b := r32.OpTime(g, 0, v100), r.OpTime(g, 0, v100); a != b {
		t.Errorf("tf32 on V100: %g s, fp32 %g s", a, b)
	}
}

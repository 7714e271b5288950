package profile_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/profile"
)

// BenchmarkMeasureTiny is the profiler's overhead around tiny kernels:
// building each gorgonia graph, warm-up and timed runs of a 4x8x16 MatMul,
// a Relu and a Softmax (the Erf is skipped as unsupported).
func BenchmarkMeasureTiny(b *testing.B) {
	g := tiny(b)
	for b.Loop() {
		if _, err := profile.Measure(context.Background(), g, profile.MeasureOptions{CPU: &testCPU, Warmup: 1, Runs: 3}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkImportORT reads the ResNet-50 ONNX Runtime sample (3 runs of
// 122 nodes) and maps it to the graph.
func BenchmarkImportORT(b *testing.B) {
	g := loadResNetB1(b)
	data, err := os.ReadFile(filepath.Join(samples, "resnet50_b1_onnxruntime_cpu.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := profile.ImportBytes("x", data, g, testCPU); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkModelOpTime prices every ResNet-50 op from a profile of all of
// them: what cost.NewTable pays per op and device type with --profile.
func BenchmarkModelOpTime(b *testing.B) {
	g := loadResNetB1(b)
	res, err := profile.Import(filepath.Join(samples, "resnet50_b1_onnxruntime_cpu.json"), g, testCPU)
	if err != nil {
		b.Fatal(err)
	}
	m := profile.NewModel(res.Profile, nil)
	dt := &cluster.DeviceType{Name: "test-cpu", PeakFLOPS: map[graph.DType]float64{graph.Float32: 1e10}, MemoryBandwidth: 1e10}
	for b.Loop() {
		for i := range g.Ops {
			m.OpTime(g, graph.OpID(i), dt)
		}
	}
}

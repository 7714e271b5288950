package sweep_test

import (
	"context"
	"fmt"
	"os"

	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/sweep"
)

// A scheduler written in Go asks for a job's throughput on two device
// types at two scales, in-process, and hands Gavel's policies the
// result.
func ExampleRun() {
	res, err := sweep.Run(context.Background(), sweep.Options{
		Model:  "../testdata/models/resnet50.onnx",
		Types:  []string{"V100-16GB", "T4"},
		Counts: []int{1, 2},
		Plan:   pipeline.Options{Optimizer: "sgd"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	for _, p := range res.Points {
		fmt.Printf("%s x%d: %.0f samples/s (%.2f steps/s) by %s, fits %v\n", p.Type, p.Devices, p.ThroughputSamplesPerS, p.StepsPerS, p.Family, p.Fits)
	}
	g := sweep.GavelOf(res, "ResNet-50")
	fmt.Printf("Gavel: T4, ('ResNet-50', 2): %.2f steps/s\n", g["T4"]["('ResNet-50', 2)"]["null"])
	// Output:
	// V100-16GB x1: 456 samples/s (14.26 steps/s) by pipeline, fits true
	// V100-16GB x2: 838 samples/s (26.18 steps/s) by data-parallel, fits true
	// T4 x1: 134 samples/s (4.19 steps/s) by pipeline, fits true
	// T4 x2: 257 samples/s (8.04 steps/s) by data-parallel, fits true
	// Gavel: T4, ('ResNet-50', 2): 8.04 steps/s
}

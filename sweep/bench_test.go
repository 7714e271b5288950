package sweep

import (
	"context"
	"testing"
)

// BenchmarkSweepGPT2XL is the sweep issue 36 sets a target for: GPT-2 XL
// (training, adam) on four device types x four counts x three batch
// sizes, 48 points. Run it on one core as the target states:
//
//	GOMAXPROCS=1 go test ./sweep -run '^$' -bench SweepGPT2XL -benchtime 1x
//
// It reports the wall time per sweep and each stage's share (ms summed
// over the points).
func BenchmarkSweepGPT2XL(b *testing.B) {
	opts := Options{Model: "../testdata/models/gpt2_xl.onnx", Types: []string{"A100-80GB", "H100-80GB", "V100-16GB", "T4"},
		Counts: []int{1, 2, 4, 8}, Batches: []int64{8, 16, 32}}
	for b.Loop() {
		res, err := Run(context.Background(), opts)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range res.Stages {
			b.ReportMetric(float64(s.Duration.Milliseconds()), s.Stage+"-ms")
		}
		fits := 0
		for _, p := range res.Points {
			if p.Fits {
				fits++
			}
		}
		b.ReportMetric(float64(fits), "points-fit")
	}
}

package report

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/opplace/opplace/internal/output"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/plan"
)

// BenchmarkReport times what opplace report does (read the plan file,
// write the page, the Graphviz device view included) on GPT-2 XL's plans
// (6,785 ops; the pipeline runs them over 4 micro-batches), and reports
// the page's size. The plans are made in the setup, as
//
//	opplace plan testdata/models/gpt2_xl.onnx --cluster testdata/clusters/8xA100-2host.yaml --dim batch=4 [--strategy pipeline] --out plan.json
func BenchmarkReport(b *testing.B) {
	model := filepath.Join("..", "testdata", "models", "gpt2_xl.onnx")
	if _, err := os.Stat(model); err != nil {
		b.Skip("GPT-2 XL is not in testdata")
	}
	for _, strategy := range []string{pipeline.Auto, "pipeline"} {
		b.Run("gpt2_xl/"+strategy, func(b *testing.B) {
			res, err := pipeline.Run(context.Background(), pipeline.Options{
				ModelPath: model, ClusterPath: filepath.Join("..", "testdata", "clusters", "8xA100-2host.yaml"),
				Strategy: strategy, Import: pipeline.ImportOptions{Dims: map[string]int64{"batch": 4}},
				Mode: pipeline.ModeTrain, Optimizer: "adam", Schedule: "1f1b", Objective: "throughput",
			})
			if err != nil {
				b.Fatal(err)
			}
			path := filepath.Join(b.TempDir(), "plan.json")
			if err := (output.Run{}).Commit(output.File{Path: path, Write: func(w io.Writer) error { return plan.Write(w, res.Plan, plan.JSON) }}); err != nil {
				b.Fatal(err)
			}
			runs := 0
			for _, op := range res.Plan.Ops {
				runs += max(1, len(op.Runs))
			}
			var size int
			b.ResetTimer()
			for b.Loop() {
				p, err := plan.ReadFile(path)
				if err != nil {
					b.Fatal(err)
				}
				var out bytes.Buffer
				if err := Write(context.Background(), &out, p, Options{Source: path}); err != nil {
					b.Fatal(err)
				}
				size = out.Len()
			}
			b.ReportMetric(float64(size), "html-bytes")
			b.ReportMetric(float64(runs), "op-runs")
			b.ReportMetric(float64(res.Plan.MicroBatches), "micro-batches")
		})
	}
}

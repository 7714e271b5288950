package sim_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/strategy"
	"github.com/opplace/opplace/train"
)

// benchPlans are the plans BenchmarkRun simulates: one of each shape the
// simulator's hot loop serves (replicas with DDP buckets, pipeline stages
// over micro-batches, tensor-parallel groups and their syncs), each the
// plan its strategy keeps for a real model's training step (Adam,
// unfused, priced by the default roofline).
var benchPlans = []struct {
	model    string
	dims     map[string]int64
	cluster  string
	strategy string
}{
	{"resnet50", nil, "4xV100", "dp"},
	{"gpt2_small", map[string]int64{"batch": 8}, "8xA100-2host", "dp"},
	{"gpt2_small", map[string]int64{"batch": 8}, "8xA100-2host", "pipeline:exact"},
	{"bert_base", map[string]int64{"batch": 8}, "8xA100-2host", "pipeline:gpipe"},
	{"gpt2_small", map[string]int64{"batch": 8}, "8xA100-2host", "tensor"},
}

// BenchmarkRun times sim.Run, the judge every strategy calls for each
// proposal, on the plans of benchPlans. Each plan is found in the setup,
// as opplace plan MODEL --cluster CLUSTER --strategy STRATEGY --fusion
// none would find it; only sim.Run is timed.
func BenchmarkRun(b *testing.B) {
	for _, bp := range benchPlans {
		b.Run(bp.model+"/"+bp.cluster+"/"+bp.strategy, func(b *testing.B) {
			c, err := cluster.Load(filepath.Join("..", "testdata", "clusters", bp.cluster+".yaml"))
			if err != nil {
				b.Fatal(err)
			}
			m, err := onnx.Load(filepath.Join("..", "testdata", "models", bp.model+".onnx"), onnx.Options{Dims: bp.dims})
			if err != nil {
				b.Fatal(err)
			}
			fwd := m.Graph
			g, _, err := train.Build(fwd, train.Options{Optimizer: train.Adam})
			if err != nil {
				b.Fatal(err)
			}
			pp, err := placer.NewProblem(g, cost.NewTable(g, c, cost.Roofline{}))
			if err != nil {
				b.Fatal(err)
			}
			p := strategy.NewProblem(pp, fwd.Batch())
			outs, _, err := strategy.Search(context.Background(), p, strategy.Config{}, []string{bp.strategy})
			if err != nil {
				b.Fatal(err)
			}
			o := outs[0]
			if o.Err != nil || o.Plan == nil {
				b.Fatalf("%s found no plan: %v", bp.strategy, o.Err)
			}
			var res *sim.Result
			b.ResetTimer()
			for b.Loop() {
				res, err = sim.Run(p.Costs, p.Adj, p.Order, o.Plan)
				if err != nil {
					b.Fatal(err)
				}
			}
			if res.Step != o.Sim.Step {
				b.Fatalf("step %g, the search judged %g", res.Step, o.Sim.Step)
			}
			b.ReportMetric(float64(len(g.Ops)), "ops")
			b.ReportMetric(float64(len(o.Plan.Stages)), "stages")
			b.ReportMetric(float64(res.MicroBatches), "micro-batches")
			b.ReportMetric(float64(len(res.Transfers)+len(res.Collectives)), "comms")
		})
	}
}

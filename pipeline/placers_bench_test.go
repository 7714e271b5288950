package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/strategy"
)

// peersDir holds the published dnn-partitioning workloads and their
// clusters, when the team's shared folder is beside the checkout.
const peersDir = "../../shared/peers/dnn-partitioning"

// placementStrategies are the rows of BenchmarkPlacers: every placer of
// auto, Baechi's references, and the local search last, which refines the
// best placement before it with auto's budget.
var placementStrategies = []string{"single", "m-topo", "expert", "m-etf", "m-etf-baechi", "heft", "m-sct", "m-sct-baechi", "local"}

// BenchmarkPlacers is docs/strategies.md's table of the placers on real
// graphs: for the shared models' training steps on 4xV100 and
// 8xA100-2host, and the published dnn-partitioning training graphs as
// placement problems (each on its -norep cluster: distinct accelerators,
// edge costs as published), the simulated step of every placer, Baechi's
// references and the local search (which refines the best placement of
// the placers before it), whether it fits (a "*" marks a plan over a
// device's memory, "—" no plan), and each one's solve time.
//
//	go test -run '^$' -bench Placers -benchtime 1x ./pipeline/
func BenchmarkPlacers(b *testing.B) {
	ctx := context.Background()
	type problem struct{ name, cluster string }
	var cases []struct {
		name string
		opts pipeline.Options
	}
	for _, m := range sharedModels {
		if m.name == "gpt2_xl" || m.name == "vgg16" || m.name == "mobilenet_v2" || m.name == "transformer" {
			continue // kept to the models whose placements compete (see docs/plan-space.md)
		}
		for _, cl := range []string{"4xV100", "8xA100-2host"} {
			cases = append(cases, struct {
				name string
				opts pipeline.Options
			}{m.name + "/" + cl, opts(m.name, cl, m.dims)})
		}
	}
	for _, pc := range []problem{
		{"throughput-inputs_LayerGraphs_bert24_training", "bert24-norep"},
		{"throughput-inputs_LayerGraphs_gnmt_training", "gnmt-norep"},
		{"throughput-inputs_LayerGraphs_inceptionv3_training", "inceptionv3-norep"},
		{"throughput-inputs_LayerGraphs_resnet50_training", "resnet50L-norep"},
		{"throughput-inputs_OperatorGraphs_bert_L-12_training", "bert_L-12-norep"},
		{"throughput-inputs_OperatorGraphs_resnet50_training", "resnet50O-norep"},
	} {
		path := filepath.Join(peersDir, pc.name+".json")
		if _, err := os.Stat(path); err != nil {
			continue
		}
		cases = append(cases, struct {
			name string
			opts pipeline.Options
		}{strings.TrimPrefix(pc.name, "throughput-inputs_"), pipeline.Options{
			ModelPath: path, ClusterPath: filepath.Join(peersDir, "clusters", pc.cluster+".yaml"),
		}})
	}
	var rows []string
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var outs []strategy.Outcome
			for i := 0; i < b.N; i++ {
				prob, cfg, err := pipeline.Prepare(ctx, c.opts)
				if err != nil {
					b.Fatal(err)
				}
				// Search with no bound to prune by: every row runs.
				outs, _, _ = strategy.Search(ctx, prob, cfg, placementStrategies)
			}
			cells := []string{c.name}
			var solve []string
			for _, o := range outs {
				switch {
				case o.Sim == nil:
					cells = append(cells, "—")
				case !o.Fits:
					cells = append(cells, fmt.Sprintf("%.1f*", o.Sim.Step*1e3))
				default:
					cells = append(cells, fmt.Sprintf("%.1f", o.Sim.Step*1e3))
					b.ReportMetric(o.Sim.Step*1e3, o.Strategy+"_ms")
				}
				solve = append(solve, fmt.Sprintf("%.2f", o.Solve.Seconds()))
			}
			rows = append(rows, "| "+strings.Join(cells, " | ")+" | "+strings.Join(solve, " / ")+" |")
		})
	}
	b.Logf("\n| graph | %s | solve s (same order) |\n|---|%s---|\n%s", strings.Join(placementStrategies, " | "),
		strings.Repeat("---|", len(placementStrategies)), strings.Join(rows, "\n"))
}

package partition

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/costed"
)

// peersDir holds the published dnn-partitioning workloads (Tarnawski et
// al. 2020) and their clusters, beside the checkout; benchmarks that need
// them skip without.
const peersDir = "../../shared/peers/dnn-partitioning"

// peerProblem loads a dnn-partitioning graph on one of the folder's
// clusters as a costed graph, as `opplace plan` reads it.
func peerProblem(tb testing.TB, name, clusterName string, opts Options) *Problem {
	tb.Helper()
	path := filepath.Join(peersDir, name+".json")
	if _, err := os.Stat(path); err != nil {
		tb.Skipf("no dnn-partitioning inputs in %s", peersDir)
	}
	m, err := costed.Load(path)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := cluster.Load(filepath.Join(peersDir, "clusters", clusterName+".yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	p, err := NewProblem(cost.NewTable(m.Graph, c, m.Costs), opts)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// exactWorkloads are issue 13's: exact proving its optimum on the
// Inception-V3 layer graph and the BERT-L-12 operator graph of
// dnn-partitioning (distinct accelerators, one micro-batch), and on the
// shared inception_v3.onnx training step (8xA100-2host, auto M).
var exactWorkloads = []struct {
	name string
	load func(testing.TB) *Problem
}{
	{"dnnp-inceptionv3-layers", func(tb testing.TB) *Problem {
		return peerProblem(tb, "throughput-inputs_LayerGraphs_inceptionv3_training", "inceptionv3-norep", Options{MicroBatches: 1, TimeLimit: 10 * time.Minute})
	}},
	{"dnnp-bert-l12-ops", func(tb testing.TB) *Problem {
		return peerProblem(tb, "throughput-inputs_OperatorGraphs_bert_L-12_training", "bert_L-12-norep", Options{MicroBatches: 1, TimeLimit: 10 * time.Minute})
	}},
	{"inception_v3-train", func(tb testing.TB) *Problem {
		return modelProblem(tb, "inception_v3", nil, "8xA100-2host.yaml", true)
	}},
	// The other shared training steps on the same cluster (auto M).
	{"resnet50-train", func(tb testing.TB) *Problem {
		return modelProblem(tb, "resnet50", nil, "8xA100-2host.yaml", true)
	}},
	{"bert_base-train", func(tb testing.TB) *Problem {
		return modelProblem(tb, "bert_base", map[string]int64{"batch": 16}, "8xA100-2host.yaml", true)
	}},
	{"gpt2_small-train", func(tb testing.TB) *Problem {
		return modelProblem(tb, "gpt2_small", map[string]int64{"batch": 8}, "8xA100-2host.yaml", true)
	}},
	// Cutting between any ops, as the pipeline strategy also searches.
	{"inception_v3-train-opcuts", func(tb testing.TB) *Problem {
		return opCuts(tb, modelProblem(tb, "inception_v3", nil, "8xA100-2host.yaml", true))
	}},
	{"resnet50-train-opcuts", func(tb testing.TB) *Problem {
		return opCuts(tb, modelProblem(tb, "resnet50", nil, "8xA100-2host.yaml", true))
	}},
	{"bert_base-train-opcuts", func(tb testing.TB) *Problem {
		return opCuts(tb, modelProblem(tb, "bert_base", map[string]int64{"batch": 16}, "8xA100-2host.yaml", true))
	}},
	{"gpt2_small-train-opcuts", func(tb testing.TB) *Problem {
		return opCuts(tb, modelProblem(tb, "gpt2_small", map[string]int64{"batch": 8}, "8xA100-2host.yaml", true))
	}},
}

// opCuts is p's costs as a problem that may cut between any ops.
func opCuts(tb testing.TB, p *Problem) *Problem {
	tb.Helper()
	q, err := NewProblem(p.Costs, Options{OpCuts: true})
	if err != nil {
		tb.Fatal(err)
	}
	return q
}

// BenchmarkExactProof times exact on issue 13's workloads and reports
// whether it proved its plan optimal, the gap it proved, and the
// downsets it searched.
//
//	go test -run '^$' -bench ExactProof -benchtime 1x ./partition/
func BenchmarkExactProof(b *testing.B) {
	for _, w := range exactWorkloads {
		b.Run(w.name, func(b *testing.B) {
			p := w.load(b)
			pl := benchPartition(b, "exact", p)
			if e := pl.Exact; e != nil {
				b.ReportMetric(float64(e.ReducedUnits), "reduced_units")
				b.ReportMetric(float64(e.Downsets), "downsets")
				b.ReportMetric(e.Gap, "gap")
				opt := 0.0
				if e.Optimal {
					opt = 1
				}
				b.ReportMetric(opt, "optimal")
			}
			b.ReportMetric(float64(len(pl.Stages)), "stages")
			for _, w := range pl.Warnings {
				b.Log(w)
			}
		})
	}
}

// TestExactProvesPeers: exact proves its plan optimal over the unit
// graph, with no gap, on issue 13's dnn-partitioning workloads, at the
// optimum bottleneck (the dnn-partitioning objective: the largest device
// load). It skips in -short mode (the Inception-V3 proof takes seconds)
// and without the inputs.
func TestExactProvesPeers(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of search")
	}
	want := map[string]float64{"dnnp-inceptionv3-layers": 122.6, "dnnp-bert-l12-ops": 429.5}
	for _, w := range exactWorkloads[:2] {
		t.Run(w.name, func(t *testing.T) {
			pl := run(t, "exact", w.load(t))
			e := pl.Exact
			if e == nil || !e.Optimal || e.Gap != 0 || e.ReducedUnits != e.Units {
				t.Errorf("not proven on the unit graph: %+v %q", e, pl.Warnings)
			}
			if math.Abs(pl.BottleneckMs-want[w.name]) > 0.05 {
				t.Errorf("bottleneck %v ms, want %v", pl.BottleneckMs, want[w.name])
			}
		})
	}
}

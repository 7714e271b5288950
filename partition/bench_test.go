package partition

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/train"
)

// syntheticTransformer is a deterministic training graph of about n
// grouped ops: blocks of q, k, v projections in parallel, an attention op
// reading all three, and an output op with a residual from the block
// input, so downsets are many (width 3 plus the skip) but bounded.
func syntheticTransformer(n int) *graph.Graph {
	var ops []fwdOp
	prev := "x"
	for b := 0; len(ops)+5 <= n; b++ {
		name := func(s string) string { return fmt.Sprintf("/blocks.%d/%s", b, s) }
		w := 1 + float64(b%3)*0.25 // uneven blocks
		ops = append(ops,
			fwdOp{name("q"), w, 1 << 22, 1 << 22, []string{prev}},
			fwdOp{name("k"), w, 1 << 22, 1 << 22, []string{prev}},
			fwdOp{name("v"), w, 1 << 22, 1 << 22, []string{prev}},
			fwdOp{name("attn"), 2 * w, 1 << 22, 0, []string{name("q"), name("k"), name("v")}},
			fwdOp{name("out"), w, 1 << 22, 1 << 22, []string{name("attn"), prev}},
		)
		prev = name("out")
	}
	return buildGraph(ops, true)
}

func loadCluster(b testing.TB) *cluster.Cluster {
	c, err := cluster.Load("../testdata/clusters/8xA100-2host.yaml")
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkExactSynthetic times exact on 100, 1,000 and 5,000 grouped
// ops on 8 A100s (auto micro-batches: six dynamic programmes each),
// cutting between any ops, not only between its blocks.
func BenchmarkExactSynthetic(b *testing.B) {
	c := loadCluster(b)
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			g := syntheticTransformer(n)
			p := newTestProblem(b, g, c, Options{TimeLimit: 10 * time.Minute, OpCuts: true}) // every op a cut candidate
			l, err := idealLattice(p.u, p.m, 1<<22)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			var pl *Plan
			for i := 0; i < b.N; i++ {
				pl = run(b, "exact", p)
			}
			b.ReportMetric(float64(p.Units()), "units")
			b.ReportMetric(float64(l.n), "downsets")
			b.ReportMetric(pl.BottleneckMs, "bottleneck_ms")
			b.ReportMetric(float64(len(pl.Stages)), "stages")
			if len(pl.Warnings) > 0 {
				b.Log(pl.Warnings)
			}
		})
	}
}

var benchModels = []struct {
	name string
	dims map[string]int64
}{
	{"gpt2_small", map[string]int64{"batch": 8}},
	{"bert_base", map[string]int64{"batch": 16}},
	{"inception_v3", nil},
	{"gnmt", nil},
	{"gpt2_xl", map[string]int64{"batch": 4}},
}

// BenchmarkModels runs each partitioner on the real models, as inference
// graphs and as training graphs (train.Build with Adam), on 8 A100s in
// two hosts.
func BenchmarkModels(b *testing.B) {
	c := loadCluster(b)
	for _, mdl := range benchModels {
		for _, mode := range []string{"infer", "train"} {
			var p *Problem
			load := func(b *testing.B) {
				if p != nil {
					return
				}
				m, err := onnx.Load(filepath.Join("../testdata/models", mdl.name+".onnx"), onnx.Options{Dims: mdl.dims})
				if err != nil {
					b.Fatal(err)
				}
				g := m.Graph
				if mode == "train" {
					if g, _, err = train.Build(g, train.Options{Optimizer: train.Adam}); err != nil {
						b.Fatal(err)
					}
				}
				p, err = NewProblem(cost.NewTable(g, c, cost.Roofline{}), Options{})
				if err != nil {
					b.Fatal(err)
				}
			}
			for _, part := range []string{"gpipe", "pipedream", "exact"} {
				b.Run(mdl.name+"/"+mode+"/"+part, func(b *testing.B) {
					load(b)
					pl := benchPartition(b, part, p)
					b.ReportMetric(float64(len(pl.Stages)), "stages")
					b.ReportMetric(pl.BubbleFraction, "bubble")
					if e := pl.Exact; e != nil {
						b.ReportMetric(float64(e.ReducedUnits), "reduced_units")
						b.ReportMetric(float64(e.Downsets), "downsets")
						b.ReportMetric(e.Gap, "gap")
					}
					for _, w := range pl.Warnings {
						b.Log(w)
					}
				})
			}
		}
	}
}

// benchPartition times partitioner part on p and reports the figures
// every partitioning benchmark shares.
func benchPartition(b *testing.B, part string, p *Problem) *Plan {
	pr, err := New(part)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var pl *Plan
	for i := 0; i < b.N; i++ {
		if pl, err = pr.Partition(context.Background(), p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(p.Units()), "units")
	b.ReportMetric(pl.BottleneckMs, "bottleneck_ms")
	b.ReportMetric(pl.StepMs, "step_ms")
	b.ReportMetric(float64(pl.MicroBatches), "M")
	return pl
}

package strategy_test

import (
	"context"
	"strings"
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/partition"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/strategy"
	"github.com/opplace/opplace/train"
)

// TestPipelineModuleFallback: a training step (built by train, so
// backward ops are named "<op>/grad") of three blocks of two ops on two
// devices. With balanced blocks the stages cut between blocks, with no
// note; when block 1 holds most of the work (forward 1,1 | 4,4 | 1,1 |
// 1,1 GFLOPs: 6 | 8 between ops, 10 | 4 between blocks), cutting between blocks costs
// over partition.ModuleCutTolerance and the stages cut inside block 1,
// with a note saying how much the modules would have cost.
func TestPipelineModuleFallback(t *testing.T) {
	names := []string{"/blocks/blocks.0/a", "/blocks/blocks.0/b", "/blocks/blocks.1/a", "/blocks/blocks.1/b", "/blocks/blocks.2/a", "/blocks/blocks.2/b", "/blocks/blocks.3/a", "/blocks/blocks.3/b"}
	for _, tc := range []struct {
		name     string
		heavy    map[string]int64 // GFLOPs, 1 when absent
		fallback bool
	}{
		{"balanced blocks", nil, false},
		{"a heavy block 1", map[string]int64{"/blocks/blocks.1/a": 4, "/blocks/blocks.1/b": 4}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := graphtest.New("blocks").Input("x", 1<<20)
			prev := "x"
			for _, n := range names {
				gf := tc.heavy[n]
				if gf == 0 {
					gf = 1
				}
				b.Param(n+".w", 1<<26).Op(n, gf*1e9, 1<<20, prev, n+".w")
				prev = n
			}
			b.Output(prev)
			for i := range b.G.Tensors {
				b.G.Tensors[i].DType = graph.Float32
				b.G.Tensors[i].Shape = []int64{b.G.Tensors[i].Shape[0] / 4}
			}
			g, _, err := train.Build(b.G, train.Options{Optimizer: train.SGD})
			if err != nil {
				t.Fatal(err)
			}
			c := graphtest.Cluster(1e10, 1e-6, graphtest.Device{FLOPS: 1e12, Memory: 1 << 40}, graphtest.Device{FLOPS: 1e12, Memory: 1 << 40})
			pp, err := placer.NewProblem(g, cost.NewTable(g, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
			if err != nil {
				t.Fatal(err)
			}
			p := strategy.NewProblem(pp, 8)
			s, err := strategy.New("pipeline:pipedream", strategy.Config{Pipeline: partition.Options{MicroBatches: 8}})
			if err != nil {
				t.Fatal(err)
			}
			props, err := s.Propose(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			pl := props[0].Pipeline
			if len(pl.Stages) != 2 {
				t.Fatalf("%d stages", len(pl.Stages))
			}
			cut := false // some block's forward ops in both stages
			for blk := range 4 {
				a, _ := g.OpByName(names[2*blk])
				bb, _ := g.OpByName(names[2*blk+1])
				if pl.OpStage[a] != pl.OpStage[bb] {
					cut = true
				}
			}
			for i := range g.Ops {
				if g.Ops[i].Phase != graph.Backward {
					continue
				}
				fwd, ok := g.OpByName(strings.TrimSuffix(g.Ops[i].Name, "/grad"))
				if ok && pl.OpStage[fwd] != pl.OpStage[i] {
					t.Errorf("%s in stage %d, its forward op in %d", g.Ops[i].Name, pl.OpStage[i], pl.OpStage[fwd])
				}
			}
			notes := strings.Join(props[0].Notes, "\n")
			if cut != tc.fallback || tc.fallback != strings.Contains(notes, "stages cut between ops, inside modules") || tc.fallback && !strings.Contains(notes, "% longer slowest stage") {
				t.Errorf("a block cut: %v; notes %q", cut, notes)
			}
		})
	}
}

package strategy

import (
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/sim"
)

// TestCoarseSplitWithin: carried to a fused kernel, a sync on a member's
// tensor the kernel writes stays on that tensor (it runs after the
// kernel), and one on an intermediate the kernel keeps inside is marked
// Within (the kernel stops for it).
func TestCoarseSplitWithin(t *testing.T) {
	b := graphtest.New("chain").Input("x", 8).
		Op("a", 1e9, 100, "x").Op("b", 1e9, 100, "a").Op("c", 1e9, 100, "b").Output("c")
	g := b.G
	gr := graph.NewGrouping(len(g.Ops))
	gr.Union(0, 1) // a+b one kernel, c another
	coarse, err := graph.Coarsen(g, gr)
	if err != nil {
		t.Fatal(err)
	}
	ta, _ := g.TensorByName("a")
	tb, _ := g.TensorByName("b")
	fine := &sim.TensorSplit{Split: []float32{1, 1, 0}, Syncs: [][]sim.Sync{
		{{Kind: sim.AllReduce, Tensor: ta, Bytes: 100}},
		{{Kind: sim.AllGather, Tensor: tb, Bytes: 100}},
		nil,
	}}
	c := graphtest.Cluster(1e9, 0, graphtest.Device{FLOPS: 1e9, Memory: 1 << 30})
	tab := cost.NewTable(g, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1})
	got := coarseSplit(coarse, tab, 0, fine)
	fused := coarse.GroupOf[0]
	syncs := got.Syncs[fused]
	if len(syncs) != 2 {
		t.Fatalf("fused kernel has %d syncs, want its members' 2", len(syncs))
	}
	cb, _ := coarse.Graph.TensorByName("b")
	if !syncs[0].Within || syncs[0].Kind != sim.AllReduce {
		t.Errorf("sync on the intermediate a: %+v, want an all-reduce within the kernel", syncs[0])
	}
	if syncs[1].Within || syncs[1].Tensor != cb {
		t.Errorf("sync on the kernel's output b: %+v, want one on tensor %d after the kernel", syncs[1], cb)
	}
	if got.Split[fused] != 1 || got.Split[coarse.GroupOf[2]] != 0 {
		t.Errorf("shares %v, want the fused kernel 1 and c 0", got.Split)
	}
}

package sim_test

import (
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/sim"
)

// TestScales: on the Adam training step x -> a(w1) -> r1 -> b(w2) -> r2 ->
// c(w3), the graph input, the activations and their gradients are shares
// of the batch, the weights whole, Adam's moments sharded, the weight
// gradients pooled into their buffers; every forward and backward op
// runs per micro-batch, the updates once a step.
func TestScales(t *testing.T) {
	g := zeroChain(t, 10)
	c := graphtest.Cluster(1e18, 0, devices(2, 1<<40)...)
	adj := g.BuildAdjacency()
	order, err := g.TopoOrder(adj)
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(cost.NewTable(g, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}), adj, order).Scales()
	want := map[string]sim.Scale{
		"x": sim.PerSample, "a": sim.PerSample, "r2": sim.PerSample, "grad/r2/grad/b": sim.PerSample, "grad/r1/grad/a": sim.PerSample,
		"w1": sim.Whole, "w3": sim.Whole,
		"w1/adam_state0": sim.Sharded, "w3/adam_state1": sim.Sharded,
		"grad/c/grad/w3": sim.Pooled, "grad/a/grad/w1": sim.Pooled,
	}
	seen := 0
	for i, tn := range g.Tensors {
		if w, ok := want[tn.Name]; ok {
			seen++
			if s.Tensor[i] != w {
				t.Errorf("tensor %s: scale %d, want %d", tn.Name, s.Tensor[i], w)
			}
		}
	}
	if seen != len(want) {
		t.Errorf("found %d of the %d tensors named", seen, len(want))
	}
	for i, op := range g.Ops {
		if per := op.Phase != graph.Update; s.PerMicroBatch[i] != per {
			t.Errorf("op %s (%v): per micro-batch %v, want %v", op.Name, op.Phase, s.PerMicroBatch[i], per)
		}
	}
}

package sim_test

import (
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/sim"
)

// TestComputeBoundFillAndDrain: on a uniform pipeline with free links the
// bound is the step itself. Each stage runs a forward of f = 1/M and a
// backward of b = 2/M per micro-batch; the step is (M+S-1)(f+b), the
// busiest device's compute alone M(f+b). Release times alone give the
// last stage's wait for the first micro-batch, (S-1)f + M(f+b), and the
// first stage's for its gradient, Sf + (S-1)b + Mb; the order of each
// stage's slots (slotBound) adds the rest of the bubble.
func TestComputeBoundFillAndDrain(t *testing.T) {
	for _, tc := range []struct {
		s, m  int
		sched sim.Schedule
	}{{4, 8, sim.OneFOneB}, {4, 2, sim.OneFOneB}, {2, 1, sim.OneFOneB}, {8, 4, sim.OneFOneB}, {4, 8, sim.GPipe}, {3, 5, sim.GPipe}} {
		b := chain(tc.s, 1000)
		c := graphtest.Cluster(1e18, 0, devices(tc.s, 1<<40)...)
		g := b.G
		adj := g.BuildAdjacency()
		order, err := g.TopoOrder(adj)
		if err != nil {
			t.Fatal(err)
		}
		sm := sim.New(cost.NewTable(g, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}), adj, order)
		p := perLayer(g, tc.s, tc.m, tc.sched)
		lb, err := sm.ComputeBound(p)
		if err != nil {
			t.Fatal(err)
		}
		S, M := float64(tc.s), float64(tc.m)
		f, bw := 1/M, 2/M
		if want := (M + S - 1) * (f + bw); !near(lb, want) {
			t.Errorf("%+v: bound %g, want the step %g", tc, lb, want)
		}
		res, err := sm.Run(p)
		if err != nil {
			t.Fatal(err)
		}
		if lb > res.Step+1e-12 {
			t.Errorf("%+v: bound %g above the step %g", tc, lb, res.Step)
		}
	}
}

package sim_test

import (
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/sim"
)

// TestComputeBoundFillAndDrain: on a uniform pipeline with free links the
// bound adds the schedule's fill and drain to a stage's work. Each stage
// runs a forward of f = 1/M and a backward of b = 2/M per micro-batch;
// the last stage cannot start before the first micro-batch's forward
// crossed the S-1 before it, (S-1)f + M(f+b), and the first stage's
// backward waits for it to cross them all and come back, Sf + (S-1)b +
// Mb. The step is (M+S-1)(f+b); the busiest device's compute alone, the
// bound before release times, is M(f+b).
func TestComputeBoundFillAndDrain(t *testing.T) {
	for _, tc := range []struct{ s, m int }{{4, 8}, {4, 2}, {2, 1}, {8, 4}} {
		b := chain(tc.s, 1000)
		c := graphtest.Cluster(1e18, 0, devices(tc.s, 1<<40)...)
		g := b.G
		adj := g.BuildAdjacency()
		order, err := g.TopoOrder(adj)
		if err != nil {
			t.Fatal(err)
		}
		sm := sim.New(cost.NewTable(g, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}), adj, order)
		p := perLayer(g, tc.s, tc.m, sim.OneFOneB)
		lb, err := sm.ComputeBound(p)
		if err != nil {
			t.Fatal(err)
		}
		S, M := float64(tc.s), float64(tc.m)
		f, bw := 1/M, 2/M
		want := max((S-1)*f+M*(f+bw), S*f+(S-1)*bw+M*bw)
		if !near(lb, want) {
			t.Errorf("%+v: bound %g, want %g", tc, lb, want)
		}
		res, err := sm.Run(p)
		if err != nil {
			t.Fatal(err)
		}
		if lb > res.Step+1e-12 || lb <= M*(f+bw) && tc.s > 1 {
			t.Errorf("%+v: bound %g against step %g and compute %g", tc, lb, res.Step, M*(f+bw))
		}
	}
}

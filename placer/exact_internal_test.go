package placer

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/sim"
)

// TestExactBoundBelowStep checks that the search's lower bound, on a
// full assignment, never exceeds the simulated step: a bound above it
// would prune optima. Random placements of random training steps, on
// equal and mixed devices, fast and slow links.
func TestExactBoundBelowStep(t *testing.T) {
	for _, speeds := range [][]float64{{1e9, 1e9, 1e9}, {2e9, 1e9, 1e9 / 15}} {
		for _, bw := range []float64{1e10, 5e8} {
			var devs []graphtest.Device
			for _, f := range speeds {
				devs = append(devs, graphtest.Device{FLOPS: f, Memory: 1 << 40})
			}
			c := graphtest.Cluster(bw, 1e-5, devs...)
			r := rand.New(rand.NewPCG(uint64(bw), 1))
			b := graphtest.RandomDAG(r, 16, true)
			p, err := NewProblem(b.G, cost.NewTable(b.G, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
			if err != nil {
				t.Fatal(err)
			}
			n := len(p.Graph.Ops)
			s := &exactSearch{p: p, unitOf: make([]int32, n), allowed: [][]int{{0, 1, 2}}, fastest: make([]float64, n), fin: make([]float64, n), load: make([]float64, len(speeds)), ctx: context.Background()}
			for trial := 0; trial < 200; trial++ {
				s.dev = make([]int, n)
				for op := range s.dev {
					s.dev[op] = r.IntN(len(speeds))
				}
				res, err := p.Simulate(sim.Placement{Device: s.dev})
				if err != nil {
					t.Fatal(err)
				}
				if lb := s.bound(); lb > res.Step*(1+1e-12) {
					t.Fatalf("bound %.9g above the simulated step %.9g", lb, res.Step)
				}
			}
		}
	}
}

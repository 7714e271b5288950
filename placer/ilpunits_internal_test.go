package placer

import (
	"math/rand/v2"
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
)

// TestStepUnitsTarget: the training-step units come near the target
// however the start is placed. A start from a list scheduler may switch
// devices every few ops; keeping every unit on one of the start's
// devices then left GPT-2 XL with 1,063 units instead of 40, and Cbc
// spent more than ten minutes on the root LP of a model whose limit was
// 10 s. A start in contiguous blocks is kept exactly.
func TestStepUnitsTarget(t *testing.T) {
	const fwd, target, nd = 80, 10, 4
	b := graphtest.RandomDAG(rand.New(rand.NewPCG(7, 1)), fwd, true)
	c := graphtest.Cluster(1e10, 1e-5, mixCluster(nd)...)
	p, err := NewProblem(b.G, cost.NewTable(b.G, c, cost.Roofline{}))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := newLimits(p)
	if err != nil {
		t.Fatal(err)
	}
	// Forward ops in p.Order, by position: the blocked start gives each
	// device a contiguous quarter, the scattered one deals them round.
	var order []graph.OpID
	for _, op := range p.Order {
		if p.Graph.Ops[op].Phase == graph.Forward {
			order = append(order, op)
		}
	}
	blocked, scattered := make([]int, len(p.Graph.Ops)), make([]int, len(p.Graph.Ops))
	for i, op := range order {
		blocked[op] = i * nd / len(order)
		scattered[op] = i % nd
	}
	free := stepUnits(p, lim, target, nil)
	if free == nil {
		t.Fatal("no training units")
	}
	for _, tc := range []struct {
		name  string
		start []int
		exact bool // every unit's forward ops on one of the start's devices
	}{
		{"no start", nil, false},
		{"blocked start", blocked, true},
		{"scattered start", scattered, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs := stepUnits(p, lim, target, tc.start)
			if gs == nil {
				t.Fatal("no training units")
			}
			// Forward units come to target/2, or up to twice that where
			// no unit may grow past twice the average or a start keeps
			// them apart, each with a mirror unit.
			if n := gs.Len(); n > 2*target {
				t.Errorf("%d units for a target of %d (%d without a start)", n, target, free.Len())
			}
			if !tc.exact {
				return
			}
			for u, ms := range gs.Members {
				dev := -1
				for _, op := range ms {
					if p.Graph.Ops[op].Phase != graph.Forward {
						continue
					}
					if dev >= 0 && tc.start[op] != dev {
						t.Fatalf("unit %d mixes the start's devices %d and %d", u, dev, tc.start[op])
					}
					dev = tc.start[op]
				}
			}
		})
	}
}

// mixCluster is n equal devices with room for anything.
func mixCluster(n int) []graphtest.Device {
	devs := make([]graphtest.Device, n)
	for i := range devs {
		devs[i] = graphtest.Device{FLOPS: 1e9, Memory: 1 << 40}
	}
	return devs
}

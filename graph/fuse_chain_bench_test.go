package graph_test

import (
	"fmt"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
)

// identityChain is n Identity ops in a row, the first reading input x and
// the last a graph output: vertical fusion merges all of them into one
// group, one op at a time.
func identityChain(n int) *graph.Graph {
	b := graphtest.New("chain").Input("x", 16)
	prev := "x"
	for i := range n {
		name := fmt.Sprintf("id%d", i)
		typed(b, name, "Identity", 0, 16, prev)
		prev = name
	}
	return b.Output(prev).G
}

// BenchmarkFuseChain fuses and coarsens chains of Identity ops of growing
// length. Each merge must cost about the same however long the group it
// grows is: the time per op stays flat from 10^4 to 10^5 ops (it grew
// linearly, the whole quadratically, before).
func BenchmarkFuseChain(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		g := identityChain(n)
		adj := g.BuildAdjacency()
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				fu, err := graph.Fuse(g, adj, "hybrid")
				if err != nil {
					b.Fatal(err)
				}
				c, err := graph.Coarsen(g, fu.Groups)
				if err != nil {
					b.Fatal(err)
				}
				if len(c.Graph.Ops) != 1 {
					b.Fatalf("%d ops fused into %d groups, want 1", n, len(c.Graph.Ops))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/chain-op")
		})
	}
}

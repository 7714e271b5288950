package graph_test

import (
	"math/rand/v2"
	"testing"

	"github.com/opplace/opplace/graph"
)

// BenchmarkFuseHybrid fuses and coarsens a random 5,000-op graph.
func BenchmarkFuseHybrid(b *testing.B) {
	g := randomFusionDAG(rand.New(rand.NewPCG(3, 4)), 5000)
	adj := g.BuildAdjacency()
	for b.Loop() {
		fu, err := graph.Fuse(g, adj, "hybrid")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := graph.Coarsen(g, fu.Groups); err != nil {
			b.Fatal(err)
		}
	}
}

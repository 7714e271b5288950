package placer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/placer"
)

// layered builds a deterministic layered DAG of about n ops, width ops
// per layer, each reading two ops of the previous layer and one weight of
// a few KiB, with FLOPs and sizes varied by a fixed linear congruence.
func layered(n, width int, seed uint32) *graphtest.Builder {
	b := graphtest.New("layered").Input("x", 1<<16)
	r := seed
	next := func() uint32 { r = r*1664525 + 1013904223; return r >> 8 }
	name := func(i int) string { return fmt.Sprintf("op%d", i) }
	for i := 0; i < n; i++ {
		w := fmt.Sprintf("w%d", i)
		b.Param(w, int64(1024+next()%4096))
		flops := int64(1e6 + next()%(50e6))
		out := int64(4096 + next()%(1<<18))
		layer := i / width
		if layer == 0 {
			b.Op(name(i), flops, out, "x", w)
			continue
		}
		prev := (layer - 1) * width
		a := prev + int(next()%uint32(width))
		c := prev + int(next()%uint32(width))
		if a == c {
			b.Op(name(i), flops, out, name(a), w)
		} else {
			b.Op(name(i), flops, out, name(a), name(c), w)
		}
	}
	return b
}

// BenchmarkPlace times each strategy on layered DAGs of 10^3..10^5 ops on
// four devices. ilp is skipped past 10^3 ops (it coarsens anyway), and so
// is m-sct-baechi (its LP, over every op and edge, passes its column
// limit); m-sct's LP past its column limit falls back to m-ETF (see its
// notes).
func BenchmarkPlace(b *testing.B) {
	c := graphtest.Cluster(25*giga, 2e-6, dev(100*giga, 1<<40), dev(100*giga, 1<<40), dev(100*giga, 1<<40), dev(100*giga, 1<<40))
	for _, name := range placer.Names() {
		for _, n := range []int{1000, 10000, 100000} {
			if (name == "ilp" || name == "m-sct-baechi") && n > 1000 {
				continue
			}
			b.Run(fmt.Sprintf("%s/%d", name, n), func(b *testing.B) {
				g := layered(n, 16, 7)
				p, err := placer.NewProblem(g.G, cost.NewTable(g.G, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					pl, _ := placer.New(name)
					if _, err := pl.Place(context.Background(), p); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

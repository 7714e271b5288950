package placer

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/sim"
)

// scanETF is m-ETF as first written, an O(ready x devices) scan per
// step; the heap version, etf, must give the same placement.
func scanETF(p *Problem) (sim.Placement, error) {
	s, err := newListState(p, nil)
	if err != nil {
		return sim.Placement{}, err
	}
	var ready []graph.OpID
	for step := 0; step < len(p.Graph.Ops); step++ {
		ready = append(ready, s.fresh...)
		s.fresh = s.fresh[:0]
		bestOp, bestDev, bestStart := graph.OpID(-1), -1, 0.0
		for _, op := range ready {
			for _, d := range s.candidates(op) {
				start := max(s.devFree[d], s.dataReady(op, d))
				if bestOp >= 0 && (start > bestStart ||
					start == bestStart && (s.pos[op] > s.pos[bestOp] || s.pos[op] == s.pos[bestOp] && d >= bestDev)) {
					continue
				}
				if !s.fits(op, d, start) {
					continue
				}
				bestOp, bestDev, bestStart = op, d, start
			}
		}
		if bestOp < 0 {
			return sim.Placement{}, s.stuck(ready)
		}
		s.schedule(bestOp, bestDev, bestStart)
		for i, r := range ready {
			if r == bestOp {
				ready = append(ready[:i], ready[i+1:]...)
				break
			}
		}
	}
	return s.placement(), nil
}

func TestHeapETFMatchesScan(t *testing.T) {
	dev := func(f float64, m int64) graphtest.Device { return graphtest.Device{FLOPS: f, Memory: m} }
	clusters := []struct {
		name string
		devs []graphtest.Device
	}{
		{"roomy", []graphtest.Device{dev(1e9, 1<<40), dev(1e9, 1<<40), dev(2e9, 1<<40)}},
		{"tight", []graphtest.Device{dev(1e9, 3<<20), dev(1e9, 3<<20), dev(2e9, 3<<20), dev(1e9, 3<<20)}},
	}
	for _, cl := range clusters {
		for seed := uint32(1); seed <= 4; seed++ {
			t.Run(fmt.Sprintf("%s/%d", cl.name, seed), func(t *testing.T) {
				b := graphtest.New("l").Input("x", 4096)
				r := seed
				next := func() uint32 { r = r*1664525 + 1013904223; return r >> 8 }
				for i := 0; i < 300; i++ {
					w := fmt.Sprintf("w%d", i)
					b.Param(w, int64(1024+next()%8192))
					ins := []string{w}
					if i < 6 {
						ins = append(ins, "x")
					} else {
						for k := 0; k < 1+int(next()%3); k++ {
							ins = append(ins, fmt.Sprintf("o%d", i-1-int(next()%6)))
						}
					}
					b.Op(fmt.Sprintf("o%d", i), int64(1e6+next()%2e7), int64(1024+next()%(1<<17)), ins...)
				}
				c := graphtest.Cluster(5e9, 1e-6, cl.devs...)
				p, err := NewProblem(b.G, cost.NewTable(b.G, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
				if err != nil {
					t.Fatal(err)
				}
				want, errWant := scanETF(p)
				s, err := newListState(p, nil)
				if err != nil {
					t.Fatal(err)
				}
				got, errGot := etf(context.Background(), s)
				if (errWant == nil) != (errGot == nil) {
					t.Fatalf("scan: %v, heap: %v", errWant, errGot)
				}
				if !reflect.DeepEqual(want, got) {
					t.Fatal("heap m-ETF placed differently from the scan")
				}
			})
		}
	}
}

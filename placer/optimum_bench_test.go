package placer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/placer"
)

// smallDAG is a random 10-op DAG whose ops do 1 to 8 GFLOP and send 0.1 to
// 2 GB, each reading one to two earlier ops.
func smallDAG(seed uint64) *graphtest.Builder {
	r := rand.New(rand.NewPCG(seed, 7))
	b := graphtest.New(fmt.Sprint("small", seed)).Input("x", 8)
	names := []string{"x"}
	for i := 0; i < 10; i++ {
		name := fmt.Sprintf("op%d", i)
		ins := []string{names[r.IntN(len(names))]}
		if len(names) > 2 && r.IntN(2) == 0 {
			if other := names[1+r.IntN(len(names)-1)]; other != ins[0] {
				ins = append(ins, other)
			}
		}
		b.Op(name, int64(1+r.IntN(8))*1e9, int64(1+r.IntN(20))*1e8, ins...)
		names = append(names, name)
	}
	return b
}

// BenchmarkGapToOptimum places random small DAGs with every heuristic and
// with the ILP, uncoarsened, where Cbc proves its placement optimal (under
// Baechi co-placement and the ILP's transfer model), and reports each
// heuristic's mean and worst simulated step relative to the ILP's.
func BenchmarkGapToOptimum(b *testing.B) {
	c := graphtest.Cluster(5e9, 1e-5,
		graphtest.Device{FLOPS: 1e9, Memory: 1 << 40}, graphtest.Device{FLOPS: 1e9, Memory: 1 << 40}, graphtest.Device{FLOPS: 2e9, Memory: 1 << 40})
	heuristics := []string{"single", "m-etf", "heft", "m-sct", "m-topo", "expert"}
	for i := 0; i < b.N; i++ {
		sum := map[string]float64{}
		worst := map[string]float64{}
		proven := 0
		for seed := uint64(0); seed < 20; seed++ {
			p := problem(b, smallDAG(seed), c)
			ilp := &placer.ILP{Groups: 64, MaxSeconds: 30, MaxNodes: 1 << 20}
			opt, err := ilp.Place(context.Background(), p)
			if err != nil || !strings.Contains(strings.Join(ilp.Notes(), " "), ": optimal after") {
				continue
			}
			optRes, err := p.Simulate(opt)
			if err != nil {
				b.Fatal(err)
			}
			proven++
			for _, h := range heuristics {
				pl, _ := placer.New(h)
				got, err := pl.Place(context.Background(), p)
				if err != nil {
					b.Fatalf("%s on seed %d: %v", h, seed, err)
				}
				res, err := p.Simulate(got)
				if err != nil {
					b.Fatal(err)
				}
				gap := res.Step/optRes.Step - 1
				sum[h] += gap
				worst[h] = max(worst[h], gap)
			}
		}
		if proven == 0 {
			b.Fatal("the ILP proved no placement optimal")
		}
		b.ReportMetric(float64(proven), "proven")
		for _, h := range heuristics {
			b.ReportMetric(100*sum[h]/float64(proven), h+"-mean-gap%")
			b.ReportMetric(100*worst[h], h+"-worst-gap%")
		}
	}
}

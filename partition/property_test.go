package partition

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph/graphtest"
)

// randomDAG makes n forward ops with random edges i -> j (i < j), sizes
// and weights, from a fixed seed.
func randomDAG(rng *rand.Rand, n int) []fwdOp {
	ops := make([]fwdOp, n)
	for j := 0; j < n; j++ {
		ops[j] = fwdOp{name: fmt.Sprintf("op%d", j), gflops: 0.5 + 2.5*rng.Float64(),
			out: int64(1e6 * math.Pow(10, 3*rng.Float64())), param: int64(1e8 * math.Pow(10, 1.5*rng.Float64()))}
		for i := 0; i < j; i++ {
			if rng.Float64() < 0.35 {
				ops[j].inputs = append(ops[j].inputs, ops[i].name)
			}
		}
		if len(ops[j].inputs) == 0 {
			ops[j].inputs = []string{"x"}
		}
	}
	return ops
}

// bruteForce scores every chain ∅ ⊂ D1 ⊂ … ⊂ V of the lattice's ideals
// with every class and replica count per stage (devices allocated per
// class in pipeline order, ending at the class's last device, as the
// dynamic programme does) and returns the best objective.
func bruteForce(p *Problem, l *lattice, M int) float64 {
	counts := make([]int, len(p.m.classes))
	for k, cl := range p.m.classes {
		counts[k] = len(cl.devices)
	}
	best := math.Inf(1)
	var st []solStage
	used := make([]int, len(counts))
	subset := func(d, e int32) bool {
		for v := int32(0); v < int32(l.units); v++ {
			if l.has(d, v) && !l.has(e, v) {
				return false
			}
		}
		return l.size[e] > l.size[d]
	}
	var rec func(d int32)
	rec = func(d int32) {
		if d == l.full() {
			pos := make([]int, len(counts))
			for k := range counts {
				pos[k] = counts[k] - used[k]
			}
			placed := append([]solStage(nil), st...)
			for i := range placed {
				placed[i].pos = pos[placed[i].class]
				pos[placed[i].class] += placed[i].r
			}
			best = min(best, evaluate(p, l, M, placed))
			return
		}
		for e := int32(0); e < int32(l.n); e++ {
			if !subset(d, e) {
				continue
			}
			for k := range counts {
				for r := 1; used[k]+r <= counts[k]; r++ {
					used[k] += r
					st = append(st, solStage{from: d, to: e, class: k, r: r})
					rec(e)
					st = st[:len(st)-1]
					used[k] -= r
				}
			}
		}
	}
	rec(0)
	return best
}

// countIdeals counts the downsets of the unit DAG by testing every subset.
func countIdeals(u *units) int {
	n := 0
	for s := uint64(0); s < 1<<u.n; s++ {
		ok := true
		for x := s; x != 0 && ok; x &= x - 1 {
			v := bits.TrailingZeros64(x)
			for _, p := range u.pred[v] {
				if s&(1<<p) == 0 {
					ok = false
					break
				}
			}
		}
		if ok {
			n++
		}
	}
	return n
}

func propertyCluster() *cluster.Cluster {
	// Two 1 GFLOP/s devices (one class) and one 2 GFLOP/s device with less
	// memory (another), on 10 GB/s.
	return graphtest.Cluster(10*giga, 1e-5,
		graphtest.Device{FLOPS: giga, Memory: 4e9}, graphtest.Device{FLOPS: giga, Memory: 4e9},
		graphtest.Device{FLOPS: 2 * giga, Memory: 2e9})
}

// TestAgainstBruteForce: on random DAGs, exact equals brute force over all
// contiguous cuts, pipedream equals brute force over the prefixes of its
// order, and exact is never worse than pipedream or gpipe.
func TestAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := propertyCluster()
	feasible, split := 0, 0
	defer func() {
		// The trials must exercise the search, not only infeasibility.
		if feasible < 25 || split < 10 {
			t.Errorf("only %d of 40 trials feasible, %d of them multi-stage", feasible, split)
		}
		t.Logf("%d of 40 trials feasible, %d with several stages", feasible, split)
	}()
	for trial := 0; trial < 40; trial++ {
		n := 2 + rng.IntN(7)
		ops := randomDAG(rng, n)
		training := rng.IntN(3) > 0
		opts := Options{MicroBatches: []int{1, 2, 4}[rng.IntN(3)], Schedule: []Schedule{OneFOneB, GPipe}[rng.IntN(2)],
			Objective: []Objective{Throughput, Latency}[rng.IntN(4)/3]}
		name := fmt.Sprintf("trial%d/n%d/train=%v/%s/%s/M%d", trial, n, training, opts.Schedule, opts.Objective, opts.MicroBatches)
		t.Run(name, func(t *testing.T) {
			p := newTestProblem(t, buildGraph(ops, training), c, opts)
			il, err := idealLattice(p.u, p.m, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if want := countIdeals(p.u); il.n != want {
				t.Fatalf("enumerated %d downsets, subset test finds %d", il.n, want)
			}
			wantExact := bruteForce(p, il, opts.MicroBatches) * 1e3
			wantPD := bruteForce(p, chainLattice(p.u, p.m), opts.MicroBatches) * 1e3
			got := map[string]float64{}
			for _, part := range []string{"exact", "pipedream", "gpipe"} {
				pr, _ := New(part)
				pl, err := pr.Partition(context.Background(), p)
				var inf *InfeasibleError
				switch {
				case err == nil:
					got[part] = pl.ObjectiveMs
					if part == "exact" {
						feasible++
						if len(pl.Stages) > 1 {
							split++
						}
					}
				case errors.As(err, &inf):
					got[part] = math.Inf(1)
				default:
					t.Fatalf("%s: %v", part, err)
				}
			}
			if !(near(got["exact"], wantExact) || math.IsInf(wantExact, 1) && math.IsInf(got["exact"], 1)) {
				t.Errorf("exact %v ms, brute force %v ms", got["exact"], wantExact)
			}
			if !(near(got["pipedream"], wantPD) || math.IsInf(wantPD, 1) && math.IsInf(got["pipedream"], 1)) {
				t.Errorf("pipedream %v ms, brute force over prefixes %v ms", got["pipedream"], wantPD)
			}
			for _, other := range []string{"pipedream", "gpipe"} {
				if got["exact"] > got[other]*(1+1e-9) {
					t.Errorf("exact %v ms worse than %s %v ms", got["exact"], other, got[other])
				}
			}
		})
	}
}

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
// and weights, from a fixed seed. A share tiny of them are side ops of
// 10 kFLOP, 1 kB outputs and no weights, which "exact" merges away.
func randomDAG(rng *rand.Rand, n int, tiny float64) []fwdOp {
	ops := make([]fwdOp, n)
	for j := 0; j < n; j++ {
		ops[j] = fwdOp{name: fmt.Sprintf("op%d", j), gflops: 0.5 + 2.5*rng.Float64(),
			out: int64(1e6 * math.Pow(10, 3*rng.Float64())), param: int64(1e8 * math.Pow(10, 1.5*rng.Float64()))}
		if j > 0 && rng.Float64() < tiny {
			ops[j].gflops, ops[j].out, ops[j].param = 1e-5, 1e3, 0
		}
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
	// memory (another), on 10 GB/s; a training graph's weights need room
	// for their gradients too.
	return graphtest.Cluster(10*giga, 1e-5,
		graphtest.Device{FLOPS: giga, Memory: 8e9}, graphtest.Device{FLOPS: giga, Memory: 8e9},
		graphtest.Device{FLOPS: 2 * giga, Memory: 4e9})
}

// TestAgainstBruteForce: on random DAGs of 2 to 14 ops, pipedream equals
// brute force over the prefixes of its order, and exact equals brute
// force over all contiguous cuts and is never worse than pipedream or
// gpipe. Forced to reduce (SearchIdeals 1, so ε grows to 16ε), exact
// equals the better of pipedream and brute force over the reduced graph,
// and its lower bound equals brute force over the relaxed graph and is at
// most the optimum over all cuts (equal to it when the plan claims
// optimality).
func TestAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := propertyCluster()
	const trials = 60
	feasible, split, reduced := 0, 0, 0
	defer func() {
		// The trials must exercise the search, not only infeasibility.
		if feasible < 40 || split < 15 || reduced < 10 {
			t.Errorf("only %d of %d trials feasible, %d of them multi-stage, %d reduced", feasible, trials, split, reduced)
		}
		t.Logf("%d of %d trials feasible, %d with several stages, %d with units merged", feasible, trials, split, reduced)
	}()
	for trial := 0; trial < trials; trial++ {
		n := 2 + rng.IntN(13)
		tiny := []float64{0, 0.4}[rng.IntN(2)]
		ops := randomDAG(rng, n, tiny)
		training := rng.IntN(3) > 0
		opts := Options{MicroBatches: []int{1, 2, 4}[rng.IntN(3)], Schedule: []Schedule{OneFOneB, GPipe}[rng.IntN(2)],
			Objective: []Objective{Throughput, Latency}[rng.IntN(4)/3]}
		name := fmt.Sprintf("trial%d/n%d/tiny%v/train=%v/%s/%s/M%d", trial, n, tiny, training, opts.Schedule, opts.Objective, opts.MicroBatches)
		t.Run(name, func(t *testing.T) {
			g := buildGraph(ops, training)
			p := newTestProblem(t, g, c, opts)
			M := opts.MicroBatches
			il, err := idealLattice(p.u, p.m, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if want := countIdeals(p.u); il.n != want {
				t.Fatalf("enumerated %d downsets, subset test finds %d", il.n, want)
			}
			wantAll := bruteForce(p, il, M) * 1e3
			wantPD := bruteForce(p, chainLattice(p.u, p.m), M) * 1e3
			same := func(a, b float64) bool { return near(a, b) || math.IsInf(a, 1) && math.IsInf(b, 1) }
			got := map[string]float64{}
			for _, part := range []string{"exact", "pipedream", "gpipe"} {
				pl, err := partitionOrInf(t, part, p)
				got[part] = pl
				if err == nil && part == "exact" {
					feasible++
				}
			}
			if !same(got["exact"], wantAll) {
				t.Errorf("exact %v ms, brute force %v ms", got["exact"], wantAll)
			}
			if !same(got["pipedream"], wantPD) {
				t.Errorf("pipedream %v ms, brute force over prefixes %v ms", got["pipedream"], wantPD)
			}
			for _, other := range []string{"pipedream", "gpipe"} {
				if got["exact"] > got[other]*(1+1e-9) {
					t.Errorf("exact %v ms worse than %s %v ms", got["exact"], other, got[other])
				}
			}

			// Forced reduction: the same graph searched after merging.
			forced := opts
			forced.SearchIdeals = 1
			pf := newTestProblem(t, g, c, forced)
			pr, _ := New("exact")
			// With the search of the unit graph under the reduced optimum,
			// the plan is the optimum over all cuts, proven.
			if pl, err := pr.Partition(context.Background(), pf); err == nil {
				if !near(pl.ObjectiveMs, wantAll) || !pl.Exact.Optimal || pl.Exact.Gap != 0 {
					t.Errorf("reduced then proven on the unit graph: %v ms (%+v), brute force %v ms", pl.ObjectiveMs, pl.Exact, wantAll)
				}
			} else if !math.IsInf(wantAll, 1) {
				t.Errorf("reduced then proven: %v, brute force finds %v ms", err, wantAll)
			}
			// Without it, the relaxation bounds the reduced optimum.
			withoutUnitProof(t)
			pl, err := pr.Partition(context.Background(), pf)
			var inf *InfeasibleError
			if errors.As(err, &inf) {
				if !math.IsInf(wantPD, 1) {
					t.Errorf("forced reduction infeasible, pipedream finds %v ms", wantPD)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(pl.Stages) > 1 {
				split++
			}
			if pl.ObjectiveMs < wantAll-1e-6 {
				t.Errorf("reduced exact %v ms beats brute force over all cuts %v ms", pl.ObjectiveMs, wantAll)
			}
			eps := 16 * pf.Options.Epsilon
			red := reduce(pf.u, pf.m, eps)
			if red == nil {
				if pl.Exact.Epsilon != 0 || !near(pl.ObjectiveMs, wantAll) || !pl.Exact.Optimal {
					t.Errorf("nothing to merge, yet exact gives %v ms (%+v), brute force %v ms", pl.ObjectiveMs, pl.Exact, wantAll)
				}
				return
			}
			reduced++
			if pl.Exact.Epsilon != eps {
				t.Fatalf("searched at ε = %v, want %v", pl.Exact.Epsilon, eps)
			}
			rl, err := idealLattice(red.real, red.m, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if want := min(bruteForce(pf, rl, M)*1e3, wantPD); !near(pl.ObjectiveMs, want) {
				t.Errorf("reduced exact %v ms, brute force over the reduced graph (or pipedream) %v ms", pl.ObjectiveMs, want)
			}
			wantLB := bruteForce(pf, rl.reweight(red.relaxU, red.relaxM), M) * 1e3
			if wantLB > wantAll*(1+1e-9) {
				t.Errorf("relaxed optimum %v ms above the optimum over all cuts %v ms: not a lower bound", wantLB, wantAll)
			}
			if !near(pl.Exact.LowerBoundMs, wantLB) {
				t.Errorf("lower bound %v ms, brute force over the relaxed graph %v ms", pl.Exact.LowerBoundMs, wantLB)
			}
			if pl.Exact.Optimal && !near(pl.ObjectiveMs, wantAll) {
				t.Errorf("exact claims optimality at %v ms, brute force finds %v ms", pl.ObjectiveMs, wantAll)
			}
		})
	}
}

// partitionOrInf runs a partitioner and returns its objective, +Inf when
// nothing fits.
func partitionOrInf(t *testing.T, name string, p *Problem) (float64, error) {
	t.Helper()
	pr, _ := New(name)
	pl, err := pr.Partition(context.Background(), p)
	var inf *InfeasibleError
	switch {
	case err == nil:
		return pl.ObjectiveMs, nil
	case errors.As(err, &inf):
		return math.Inf(1), err
	}
	t.Fatalf("%s: %v", name, err)
	return 0, err
}

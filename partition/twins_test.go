package partition

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph/graphtest"
)

// twinCluster is dnn-partitioning's setting in small: three accelerators
// of distinct types but the same speed and memory (twins: no stage is
// replicated) and a host CPU ten times slower, on one host.
func twinCluster(mem int64) *cluster.Cluster {
	c := graphtest.Cluster(10*giga, 1e-5,
		graphtest.Device{FLOPS: giga, Memory: mem}, graphtest.Device{FLOPS: giga, Memory: mem},
		graphtest.Device{FLOPS: giga, Memory: mem}, graphtest.Device{FLOPS: giga / 10, Memory: 1 << 40})
	for i := 0; i < 3; i++ {
		dt := *c.Devices[i].Type
		dt.Name = fmt.Sprintf("acc%d", i)
		c.Devices[i].Type = &dt
	}
	return c
}

// TestTwinsAgainstBruteForce: on random DAGs on twinCluster, the search
// (canonical twins, capacity windows, stage ends found by compute) finds
// brute force's optimum over every contiguous split, class and device,
// as does the breadth-first walk over the cover edges it replaced; and
// exact forced to reduce (SearchIdeals 1) proves that optimum on the unit
// graph, with no gap.
func TestTwinsAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	feasible, split := 0, 0
	for trial := 0; trial < 40; trial++ {
		n := 2 + rng.IntN(8)
		ops := randomDAG(rng, n, []float64{0, 0.4}[rng.IntN(2)])
		training := rng.IntN(3) > 0
		mem := []int64{1 << 40, 3e9}[rng.IntN(2)]
		opts := Options{MicroBatches: []int{1, 2}[rng.IntN(2)], Schedule: []Schedule{OneFOneB, GPipe}[rng.IntN(2)],
			Objective: []Objective{Throughput, Latency}[rng.IntN(4)/3]}
		name := fmt.Sprintf("trial%d/n%d/train=%v/mem%d/%s/%s/M%d", trial, n, training, mem, opts.Schedule, opts.Objective, opts.MicroBatches)
		t.Run(name, func(t *testing.T) {
			g := buildGraph(ops, training)
			p := newTestProblem(t, g, twinCluster(mem), opts)
			twins := 0
			for _, x := range twinGroups(p.m) {
				if x >= 0 {
					twins++
				}
			}
			if twins != 3 {
				t.Fatalf("%d twin classes, want 3", twins)
			}
			M := opts.MicroBatches
			l, err := idealLattice(p.u, p.m, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			want := bruteForce(p, l, M) * 1e3
			for _, walk := range []bool{false, true} {
				lw := *l
				lw.walk = walk
				got := math.Inf(1)
				s, err := solveBounded(p, &lw, M, math.Inf(1), time.Time{}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if s != nil {
					got = s.value * 1e3
					if v := evaluate(p, l, M, s.stages) * 1e3; !near(v, got) {
						t.Errorf("walk=%v: the split found scores %v ms, the search said %v ms", walk, v, got)
					}
				}
				if !near(got, want) && !(math.IsInf(got, 1) && math.IsInf(want, 1)) {
					t.Errorf("walk=%v: search %v ms, brute force %v ms", walk, got, want)
				}
			}
			if math.IsInf(want, 1) {
				return
			}
			feasible++
			got, err := partitionOrInf(t, "exact", p)
			if err != nil || !near(got, want) {
				t.Errorf("exact %v ms (%v), brute force %v ms", got, err, want)
			}
			forced := opts
			forced.SearchIdeals = 1
			pl := run(t, "exact", newTestProblem(t, g, twinCluster(mem), forced))
			if len(pl.Stages) > 1 {
				split++
			}
			if !near(pl.ObjectiveMs, want) || !pl.Exact.Optimal || pl.Exact.Gap != 0 {
				t.Errorf("reduced, then proven on the unit graph: %v ms (%+v), brute force %v ms", pl.ObjectiveMs, pl.Exact, want)
			}
		})
	}
	if feasible < 25 || split < 10 {
		t.Errorf("only %d trials feasible, %d split: the test exercises too little", feasible, split)
	}
	t.Logf("%d of 40 trials feasible, %d of them split", feasible, split)
}

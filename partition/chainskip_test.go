package partition

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestChainSkipMatchesBreadthFirst checks solve's walk along a chain
// (skipping, by binary search, the ideals whose remainder cannot run on
// the devices left, and stopping at the first stage too big) against the
// breadth-first walk over the cover edges that every lattice supports:
// the same optimum, the same stages and the same work charged (so the
// same work budget runs out on both), on the downsets of paths, where
// both apply.
func TestChainSkipMatchesBreadthFirst(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 12 {
		n := 20 + rng.IntN(60)
		ops := make([]fwdOp, n)
		prev := "x"
		for i := range ops {
			name := fmt.Sprintf("op%d", i)
			ops[i] = fwdOp{name, 0.1 + 4*rng.Float64(), int64(1 + rng.IntN(1<<20)), int64(rng.IntN(1 << 22)), []string{prev}}
			prev = name
		}
		training := trial%3 != 0
		c := testCluster(2+rng.IntN(6), 1<<30, giga)
		p := newTestProblem(t, buildGraph(ops, training), c, Options{Schedule: []Schedule{OneFOneB, GPipe}[trial%2]})
		chained, err := idealLattice(p.u, p.m, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if !chained.chain || chained.tempMax == nil {
			t.Fatalf("trial %d: the downsets of a path (%d units, %d downsets) are not taken for a chain", trial, p.u.n, chained.n)
		}
		bfs := *chained
		bfs.chain, bfs.tempMax, bfs.walk = false, nil, true
		for _, M := range []int{1, 2, 4} {
			for _, slack := range []float64{math.Inf(1), 1.5, 1.05} {
				ub := slack
				if !math.IsInf(slack, 1) {
					// A bound near the optimum, where the skips bite.
					best, err := solve(p, &bfs, M, math.Inf(1), time.Time{}, nil)
					if err != nil || best == nil {
						continue
					}
					ub = best.value * slack
				}
				for _, budget := range []int64{1 << 40, 500, 50} {
					w1, w2 := budget, budget
					s1, err1 := solve(p, chained, M, ub, time.Time{}, &w1)
					s2, err2 := solve(p, &bfs, M, ub, time.Time{}, &w2)
					name := fmt.Sprintf("trial %d, M=%d, bound x%v, budget %d", trial, M, slack, budget)
					switch {
					case !errors.Is(err1, err2) && (err1 != nil || err2 != nil):
						t.Fatalf("%s: chain walk: %v, breadth-first: %v", name, err1, err2)
					case err1 == nil && w1 != w2: // a failed search stops charging mid-step
						t.Fatalf("%s: chain walk left %d work, breadth-first %d", name, w1, w2)
					case (s1 == nil) != (s2 == nil):
						t.Fatalf("%s: chain walk found %v, breadth-first %v", name, s1 != nil, s2 != nil)
					case s1 != nil && (s1.value != s2.value || !slices.Equal(s1.stages, s2.stages)):
						t.Fatalf("%s: chain walk %v %v, breadth-first %v %v", name, s1.value, s1.stages, s2.value, s2.stages)
					}
				}
			}
		}
	}
}

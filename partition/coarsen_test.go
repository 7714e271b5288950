package partition

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestCoarsenChain: the coarsened chain keeps at most k+1 prefixes of the
// unit order, including the empty and the full one, with the full
// chain's sums at each, so the dynamic programme on it equals brute force
// over its prefixes and any split of it scores the same on the full
// chain.
func TestCoarsenChain(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	c := propertyCluster()
	for trial := 0; trial < 10; trial++ {
		ops := randomDAG(rng, 8+rng.IntN(7), 0.3)
		p := newTestProblem(t, buildGraph(ops, trial%2 == 0), c, Options{MicroBatches: 2})
		full := chainLattice(p.u, p.m)
		k := 2 + rng.IntN(4)
		l, warn := coarsenChain(full, k)
		if warn == "" || l.n > k+1 || l.n < 2 || l.size[0] != 0 || int(l.size[l.n-1]) != p.u.n {
			t.Fatalf("trial %d: %d units to k=%d: %d cuts %v, warning %q", trial, p.u.n, k, l.n, l.size, warn)
		}
		for i := 1; i < l.n; i++ {
			j := l.size[i]
			if l.size[i-1] >= j || l.fast[i] != full.fast[j] || l.cut[i] != full.cut[j] || l.stash[i] != full.stash[j] {
				t.Fatalf("trial %d: cut %d (prefix %d) differs from the full chain", trial, i, j)
			}
		}
		if l.stageTemp(0, l.full()) != full.stageTemp(0, full.full()) {
			t.Errorf("trial %d: scratch of the whole graph differs", trial)
		}
		want := bruteForce(p, l, 2)
		s, err := solveBounded(p, l, 2, heuristicUB(p, l, 2), time.Time{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := math.Inf(1)
		if s != nil {
			got = s.value
			st := append([]solStage(nil), s.stages...)
			for i := range st {
				st[i].from, st[i].to = l.size[st[i].from], l.size[st[i].to]
			}
			if v := evaluate(p, full, 2, st); !near(v, got) {
				t.Errorf("trial %d: split scores %v on the coarse chain, %v on the full one", trial, got, v)
			}
		}
		if !near(got, want) && !(math.IsInf(got, 1) && math.IsInf(want, 1)) {
			t.Errorf("trial %d: coarse pipedream %v, brute force over its cuts %v", trial, got, want)
		}
	}
	small := newTestProblem(t, buildGraph(randomDAG(rng, 5, 0), true), c, Options{})
	if l, warn := coarsenChain(chainLattice(small.u, small.m), 8); warn != "" || l.n != small.u.n+1 {
		t.Errorf("a chain of 5 units coarsened to 8 blocks: %q", warn)
	}
}

// TestExactTimeLimit: past its time limit while enumerating downsets,
// exact returns the split of its pipedream pass at once, with a warning.
func TestExactTimeLimit(t *testing.T) {
	g := syntheticTransformer(1000) // 1,801 downsets
	c := loadCluster(t)
	// Cut between any ops: between its 1000 blocks, it has few downsets.
	want := run(t, "pipedream", newTestProblem(t, g, c, Options{OpCuts: true}))
	pl := run(t, "exact", newTestProblem(t, g, c, Options{TimeLimit: time.Nanosecond, OpCuts: true}))
	if pl.ObjectiveMs != want.ObjectiveMs || pl.StepMs != want.StepMs || len(pl.Warnings) != 1 || !strings.Contains(pl.Warnings[0], "time limit passed while enumerating") {
		t.Errorf("exact under 1 ns: %v ms (step %v), warnings %q; pipedream %v ms (step %v)", pl.ObjectiveMs, pl.StepMs, pl.Warnings, want.ObjectiveMs, want.StepMs)
	}
}

// TestWidestLevel: a DAG with w units of one depth has at least 2^w
// downsets, the bound exact uses to give up without enumerating.
func TestWidestLevel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	c := propertyCluster()
	for trial := 0; trial < 20; trial++ {
		p := newTestProblem(t, buildGraph(randomDAG(rng, 2+rng.IntN(12), 0.3), false), c, Options{})
		w, n := widestLevel(p.u), countIdeals(p.u)
		if w < 1 || n < 1<<w {
			t.Errorf("trial %d: widest level %d, %d downsets", trial, w, n)
		}
	}
	// Five independent ops: one level of five, 32 downsets.
	var ops []fwdOp
	for i := range 5 {
		ops = append(ops, fwdOp{name: fmt.Sprint("op", i), gflops: 1, out: 1, inputs: []string{"x"}})
	}
	p := newTestProblem(t, buildGraph(ops, false), c, Options{})
	if w, n := widestLevel(p.u), countIdeals(p.u); w != 5 || n != 32 {
		t.Errorf("five independent ops: widest level %d, %d downsets; want 5, 32", w, n)
	}
}

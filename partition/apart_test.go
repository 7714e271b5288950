package partition

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/opplace/opplace/cost"
)

// TestSeparateGroupsInOtherStages: on a chain of four equal layers over
// two devices the balanced split puts a and b in one stage; with a and b
// kept apart, every partitioner puts them in different stages, and the
// split is no faster than the free optimum; gpipe, whose one balanced
// split holds both, refuses.
func TestSeparateGroupsInOtherStages(t *testing.T) {
	g := chainGraph([]string{"a", "b", "c", "d"}, nil, 1<<10, true)
	c := testCluster(2, 1<<40, giga)
	costs := cost.NewTable(g, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1})
	stageOf := func(pl *Plan, name string) int {
		for _, st := range pl.Stages {
			if slices.Contains(st.Ops, name) {
				return st.Index
			}
		}
		t.Fatalf("op %s in no stage", name)
		return -1
	}
	free := run(t, "exact", newTestProblem(t, g, c, Options{MicroBatches: 4}))
	if stageOf(free, "a") != stageOf(free, "b") {
		t.Fatalf("without the rule a and b are in stages %d and %d; the test wants them together", stageOf(free, "a"), stageOf(free, "b"))
	}
	group := make([]int8, len(g.Ops))
	for i := range group {
		group[i] = -1
		switch g.Ops[i].Name {
		case "a", "a_grad":
			group[i] = 0
		case "b", "b_grad":
			group[i] = 1
		}
	}
	for _, name := range []string{"exact", "pipedream", "gpipe"} {
		p, err := NewProblemRules(costs, Options{MicroBatches: 4}, nil, [][]int8{group})
		if err != nil {
			t.Fatal(err)
		}
		if name == "gpipe" {
			// Its one balanced split holds both: it refuses, naming the rules.
			part, _ := New(name)
			_, err := part.Partition(context.Background(), p)
			var inf *InfeasibleError
			if !errors.As(err, &inf) || !inf.Rules {
				t.Errorf("gpipe: %v, want an infeasible split under the rules", err)
			}
			continue
		}
		pl := run(t, name, p)
		if stageOf(pl, "a") == stageOf(pl, "b") {
			t.Errorf("%s: a and b both in stage %d", name, stageOf(pl, "a"))
		}
		if pl.BottleneckMs < free.BottleneckMs {
			t.Errorf("%s: kept apart at %.3f ms, faster than the free optimum %.3f ms", name, pl.BottleneckMs, free.BottleneckMs)
		}
	}
}

// TestCoarsenChainKeepsGroupsApart: coarsening a long chain into a few
// blocks keeps the cuts where a separate rule's groups start and end, so
// the coarse chain can still part them.
func TestCoarsenChainKeepsGroupsApart(t *testing.T) {
	var names []string
	for i := range 40 {
		names = append(names, fmt.Sprint("l", i))
	}
	g := chainGraph(names, nil, 1<<10, false)
	c := testCluster(2, 1<<40, giga)
	costs := cost.NewTable(g, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1})
	group := make([]int8, len(g.Ops))
	for i := range group {
		group[i] = -1
		switch g.Ops[i].Name {
		case "l1":
			group[i] = 0
		case "l3":
			group[i] = 1
		}
	}
	p, err := NewProblemRules(costs, Options{MicroBatches: 1}, nil, [][]int8{group})
	if err != nil {
		t.Fatal(err)
	}
	l := chainLattice(p.u, p.m)
	coarse, _ := coarsenChain(l, 4)
	s := newSums(coarse.nc)
	parted := false
	for i := 1; i < coarse.n-1; i++ {
		coarse.sums(s, 0, int32(i))
		first := !s.mixed
		coarse.sums(s, int32(i), int32(coarse.n-1))
		if first && !s.mixed {
			parted = true
		}
	}
	if !parted {
		t.Errorf("no cut of the %d-block chain parts l1 from l3", coarse.n-1)
	}
}

package pipeline_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/pipeline"
)

// TestChoose has auto keep a plan of the caller's choosing: the slowest
// candidate that fits, its devices renamed, and a strategy the search
// pruned run after all; the plan is written as auto writes its own.
func TestChoose(t *testing.T) {
	var offered *pipeline.Choice
	var kept string
	opts := pipeline.Options{ModelPath: "../testdata/models/resnet50.onnx", ClusterPath: "../testdata/clusters/4xV100.yaml"}
	opts.Choose = func(ctx context.Context, c *pipeline.Choice) (pipeline.Pick, error) {
		offered = c
		if c.Best < 0 || !c.Candidates[c.Best].Fits || len(c.Pruned) == 0 {
			t.Fatalf("best %d of %d candidates, %d pruned", c.Best, len(c.Candidates), len(c.Pruned))
		}
		if len(c.Graph.Ops) != len(c.Candidates[0].Plan.Device) {
			t.Fatalf("a candidate places %d ops, the plan's graph has %d", len(c.Candidates[0].Plan.Device), len(c.Graph.Ops))
		}
		if _, err := c.Rename(0, []int{0, 0, 1, 2}); err == nil {
			t.Error("a renaming that is no permutation was taken")
		}
		// A pruned placement strategy, run after all.
		pruned := c.Pruned[0].Strategy
		i, err := c.Evaluate(ctx, pruned)
		if err != nil || i < 0 || c.Candidates[i].Strategy != pruned || slices.ContainsFunc(c.Pruned, func(p pipeline.Pruned) bool { return p.Strategy == pruned }) {
			t.Fatalf("evaluating %s: candidate %d, %v", pruned, i, err)
		}
		slowest := -1
		for i, cand := range c.Candidates {
			if cand.Fits && (slowest < 0 || cand.Sim.Step > c.Candidates[slowest].Sim.Step) {
				slowest = i
			}
		}
		// Its devices renamed: gpu0's work on gpu3 and the others' one
		// up; the cluster is symmetric, so the step stays.
		renamed, err := c.Rename(slowest, []int{3, 0, 1, 2})
		if err != nil {
			t.Fatal(err)
		}
		if !renamed.Renamed || renamed.Sim.Step != c.Candidates[slowest].Sim.Step {
			t.Fatalf("renamed: step %g, was %g", renamed.Sim.Step, c.Candidates[slowest].Sim.Step)
		}
		c.Candidates[slowest] = renamed
		kept = renamed.Strategy
		why := map[string]string{}
		for _, cand := range c.Candidates {
			why[cand.Strategy] = "not the caller's choice"
		}
		return pipeline.Pick{Candidate: slowest, Why: why}, nil
	}
	res, err := pipeline.Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	p := res.Plan
	if offered == nil || p.Strategy != pipeline.Auto+":"+kept {
		t.Fatalf("the plan is %s, the caller kept %s", p.Strategy, kept)
	}
	used := map[string]bool{}
	for _, op := range p.Ops {
		used[op.Device] = true
	}
	if !used["gpu3"] {
		t.Errorf("the renamed plan puts no op on gpu3: %v", used)
	}
	for _, c := range p.Candidates {
		if c.Strategy != kept && c.Fits && c.Why != "not the caller's choice" {
			t.Errorf("candidate %s: why %q", c.Strategy, c.Why)
		}
		if c.Strategy == offered.Candidates[len(offered.Candidates)-1].Strategy && strings.HasPrefix(c.Why, "pruned") {
			t.Errorf("candidate %s was run, but the plan says %q", c.Strategy, c.Why)
		}
	}
}

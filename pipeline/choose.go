package pipeline

import (
	"context"
	"fmt"
	"slices"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/strategy"
)

// Choice is what auto offers Options.Choose once its search is done: every
// outcome that has a simulated plan, on the graph the plan lists, and the
// means to rename a candidate's devices or to run a strategy the search
// pruned. A caller with its own objective (package replan: the step over
// many steps plus the cost of moving state) picks the plan to keep from
// it; auto then writes that plan as it writes its own.
type Choice struct {
	// Graph is the graph the plan lists (the training step's ops, before
	// fusion); Cluster the cluster planned on; Batch the step's batch.
	Graph   *graph.Graph
	Cluster *cluster.Cluster
	Batch   int64
	// Candidates are the outcomes that have a simulated plan, in the
	// order auto ran them; Best is auto's own pick among them (the
	// fastest that fits).
	Candidates []Candidate
	Best       int
	// Pruned are the strategies the search skipped because their
	// family's bound proved they cannot beat Best's step; Failed those
	// that found no plan (not applicable, or none that fits).
	Pruned []Pruned
	Failed []Failed

	r   *run
	cfg strategy.Config
}

// Candidate is one plan auto's search found.
type Candidate struct {
	Strategy string
	Family   string
	// Shape summarises the plan, as the plan's candidates list does.
	Shape string
	// Plan is the candidate on Choice.Graph: each op's device and stage,
	// the stages' replicas and sharding, and the tensor-parallel split
	// (on Choice.Graph).
	Plan *sim.Plan
	Sim  *sim.Result
	Fits bool
	// Renamed says Plan is the search's plan with its devices renamed
	// (Choice.Rename).
	Renamed bool

	// outcome is the run's outcome the candidate is, as the search left
	// it or renamed (on the placed graph).
	outcome int
	placed  strategy.Outcome
}

// Pruned is a strategy auto's search did not run.
type Pruned struct {
	Strategy string
	Family   string
	// BoundMS is the least step any plan of the family takes, in ms.
	BoundMS float64
}

// Failed is a strategy that found no plan.
type Failed struct {
	Strategy string
	Family   string
	Err      error
}

// Pick is what Options.Choose keeps.
type Pick struct {
	// Candidate indexes Choice.Candidates.
	Candidate int
	// Why, by strategy name, says why each candidate was not kept, for
	// the plan's candidates list; a strategy it lacks keeps auto's text.
	Why map[string]string
}

// choose offers the search's outcomes to Options.Choose and keeps its
// pick: the outcome's index in r.outcomes.
func (r *run) choose(ctx context.Context, cfg strategy.Config, best int) (int, error) {
	c := &Choice{Graph: r.fineGraph(), Cluster: r.cluster, Batch: r.problem.Batch, Best: -1, r: r, cfg: cfg}
	for i, o := range r.outcomes {
		if o.Pruned != "" {
			c.Pruned = append(c.Pruned, Pruned{Strategy: o.Strategy, Family: o.Family,
				BoundMS: plan.MS(strategy.FamilyBound(r.problem, o.Family))})
			continue
		}
		if o.Sim == nil || o.Plan == nil {
			c.Failed = append(c.Failed, Failed{Strategy: o.Strategy, Family: o.Family, Err: o.Err})
			continue
		}
		if i == best {
			c.Best = len(c.Candidates)
		}
		c.Candidates = append(c.Candidates, r.candidate(i, o))
	}
	pick, err := r.opts.Choose(ctx, c)
	if err != nil {
		return 0, err
	}
	if pick.Candidate < 0 || pick.Candidate >= len(c.Candidates) {
		return 0, fmt.Errorf("the chooser picked candidate %d of %d", pick.Candidate, len(c.Candidates))
	}
	cand := &c.Candidates[pick.Candidate]
	if !cand.Fits {
		return 0, fmt.Errorf("the chooser picked %s, whose plan does not fit", cand.Strategy)
	}
	r.outcomes[cand.outcome] = cand.placed
	r.why = pick.Why
	return cand.outcome, nil
}

// fineGraph is the graph the plan lists: the placed graph, or before
// fusion the graph fused.
func (r *run) fineGraph() *graph.Graph {
	if r.fused != nil {
		return r.fused.coarse.Fine
	}
	return r.model.Graph
}

// candidate is outcome i (o, which may be renamed) as offered.
func (r *run) candidate(i int, o strategy.Outcome) Candidate {
	return Candidate{Strategy: o.Strategy, Family: o.Family, Shape: shape(o.Plan, o.Sim, len(r.cluster.Devices)),
		Plan: r.onFine(o), Sim: o.Sim, Fits: o.Fits, outcome: i, placed: o}
}

// onFine is an outcome's plan on the graph the plan lists, as assemble
// expands it (see expandFusion).
func (r *run) onFine(o strategy.Outcome) *sim.Plan {
	pl := *o.Plan
	fs := r.fused
	if fs == nil {
		return &pl
	}
	if pl.Split != nil && o.Tensor != nil {
		pl.Split = o.Tensor.Split
	}
	pl.Device = graph.Expand(fs.coarse, pl.Device)
	if pl.Priority != nil {
		pl.Priority = graph.Expand(fs.coarse, pl.Priority)
	}
	if pl.OpStage != nil {
		pl.OpStage = graph.Expand(fs.coarse, pl.OpStage)
	}
	return &pl
}

// Rename returns candidate i with its devices renamed: the work of device
// d goes to device perm[d] (perm a permutation of the cluster's device
// indices), simulated again. The caller may put it in place of the
// candidate it came from; it fits or not as the simulator finds.
func (c *Choice) Rename(i int, perm []int) (Candidate, error) {
	if i < 0 || i >= len(c.Candidates) {
		return Candidate{}, fmt.Errorf("candidate %d of %d", i, len(c.Candidates))
	}
	nd := len(c.Cluster.Devices)
	if len(perm) != nd {
		return Candidate{}, fmt.Errorf("a renaming of %d devices; the cluster has %d", len(perm), nd)
	}
	seen := make([]bool, nd)
	for _, d := range perm {
		if d < 0 || d >= nd || seen[d] {
			return Candidate{}, fmt.Errorf("the renaming %v is no permutation of the cluster's %d devices", perm, nd)
		}
		seen[d] = true
	}
	from := c.Candidates[i]
	o := from.placed
	o.Plan = renamed(o.Plan, perm, nd)
	r := c.r
	if r.problem.Rules != nil {
		if err := r.problem.Rules.Check(o.Plan); err != nil {
			return Candidate{}, err
		}
	}
	res, err := r.problem.Simulate(o.Plan)
	if err != nil {
		return Candidate{}, err
	}
	o.Sim, o.Fits = res, r.problem.Fits(res)
	out := r.candidate(from.outcome, o)
	out.Renamed = true
	return out, nil
}

// renamed is pl with device d's work on perm[d].
func renamed(pl *sim.Plan, perm []int, nd int) *sim.Plan {
	out := *pl
	out.Device = make([]int, len(pl.Device))
	for op, d := range pl.Device {
		out.Device[op] = perm[d]
	}
	stages := pl.StageDevices(nd)
	out.Stages = make([]sim.Stage, len(stages))
	for s, st := range stages {
		st.Replicas = slices.Clone(st.Replicas)
		for k, rep := range st.Replicas {
			st.Replicas[k] = make([]int, len(rep))
			for j, d := range rep {
				st.Replicas[k][j] = perm[d]
			}
		}
		out.Stages[s] = st
	}
	if pl.Stages == nil && len(out.Stages) == 1 {
		// One stage of the devices used: in index order, as StageDevices
		// gives it.
		slices.Sort(out.Stages[0].Replicas[0])
	}
	return &out
}

// Evaluate runs a strategy the search pruned (one of Pruned), as the
// search would have run it, and returns the index of its candidate in
// Candidates, or -1 when it found no plan (it is then one of Failed).
func (c *Choice) Evaluate(ctx context.Context, name string) (int, error) {
	r := c.r
	k := slices.IndexFunc(r.outcomes, func(o strategy.Outcome) bool { return o.Strategy == name && o.Pruned != "" })
	if k < 0 {
		return -1, fmt.Errorf("%s is not a strategy the search pruned", name)
	}
	o, err := strategy.EvaluateAfter(ctx, r.problem, c.cfg, name, r.outcomes[:k])
	if err != nil {
		return -1, err
	}
	if err := ctx.Err(); err != nil {
		return -1, err
	}
	r.outcomes[k] = o
	c.Pruned = slices.DeleteFunc(c.Pruned, func(p Pruned) bool { return p.Strategy == name })
	if o.Sim == nil || o.Plan == nil {
		c.Failed = append(c.Failed, Failed{Strategy: o.Strategy, Family: o.Family, Err: o.Err})
		return -1, nil
	}
	c.Candidates = append(c.Candidates, r.candidate(k, o))
	return len(c.Candidates) - 1, nil
}

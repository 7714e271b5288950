package strategy

import (
	"fmt"
	"math"
	"slices"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

// Recomputation modes a user allows (Config.Recompute).
const (
	RecomputeAuto = "auto"
	RecomputeNone = "none"
	RecomputeAll  = "all"
)

// ParseRecompute reads the activation recomputation a user allows
// replicated and pipelined plans: "auto" (or "") offers a recomputing
// variant of every such plan that does not fit, "none" never
// recomputes, "all" recomputes in every stage of every such plan.
func ParseRecompute(s string) (string, error) {
	switch s {
	case "", RecomputeAuto:
		return "", nil
	case RecomputeNone, RecomputeAll:
		return s, nil
	}
	return "", fmt.Errorf("unknown recompute %q: use auto, none or all", s)
}

// withRecompute is a copy of pl whose every stage recomputes, or nil
// when pl names no stages (a placement) or every stage already does.
func withRecompute(pl *sim.Plan) *sim.Plan {
	if pl.Stages == nil || !slices.ContainsFunc(pl.Stages, func(st sim.Stage) bool { return !st.Recompute }) {
		return nil
	}
	cp := *pl
	cp.Stages = slices.Clone(pl.Stages)
	for i := range cp.Stages {
		cp.Stages[i].Recompute = true
	}
	return &cp
}

const recomputeNote = "activations are recomputed: each stage frees what its modules save for backward after the forward pass and runs their forward again before their backward (activation checkpointing per module)"

// training reports whether g has backward ops, so recomputation can
// change anything.
func training(g *graph.Graph) bool {
	return slices.ContainsFunc(g.Ops, func(op graph.Op) bool { return op.Phase == graph.Backward })
}

// residentOverflows reports whether some device of a simulated plan
// cannot hold even its resident tensors (parameters, their copies and
// optimizer state, at the plan's sharding): no micro-batch count and no
// recomputation, which only shrink activations, makes it fit.
func residentOverflows(p *Problem, res *sim.Result) bool {
	for d, b := range res.ResidentMemory {
		if b > p.Costs.Cluster.Devices[d].Memory {
			return true
		}
	}
	return false
}

// fastestFit is the shortest step among best and the simulated props
// that fit.
func fastestFit(p *Problem, props []Proposal, best float64) float64 {
	for _, pr := range props {
		if pr.Sim != nil && p.Fits(pr.Sim) {
			best = min(best, pr.Sim.Step)
		}
	}
	return best
}

// recomputeVariants is props under mode: unchanged for "none" (and for a
// graph without backward ops); for "all", each plan with stages
// recomputing in every stage; for auto (""), props followed, after each
// plan with stages that does not fit, by its recomputing variant, unless
// the plan's step is already no shorter than one of props that fits.
// Recomputation costs a forward pass and saves only memory, so a plan
// that fits gains nothing by it, and neither does one slower than a plan
// that fits. Plans without a result are simulated
// with simulate (their result kept for the judge).
func recomputeVariants(p *Problem, props []Proposal, mode string, simulate func(*sim.Plan) (*sim.Result, error)) []Proposal {
	return variantsUnder(p, props, mode, simulate, math.Inf(1))
}

// variantsUnder is recomputeVariants with best, the step of a plan that
// fits found elsewhere (+Inf: none), bounding the variants worth
// simulating too.
func variantsUnder(p *Problem, props []Proposal, mode string, simulate func(*sim.Plan) (*sim.Result, error), best float64) []Proposal {
	if mode == RecomputeNone || !training(p.Graph) {
		return props
	}
	// Recomputing only adds work: a variant of a plan whose step is
	// already no shorter than one that fits cannot win, and is not
	// simulated.
	best = fastestFit(p, props, best)
	var out []Proposal
	for _, pr := range props {
		rc := withRecompute(pr.Plan)
		if rc == nil {
			out = append(out, pr)
			continue
		}
		v := pr
		v.Plan, v.Sim, v.Estimate = rc, nil, 0 // the partitioner's model knows no recomputation
		v.Notes = append(slices.Clone(pr.Notes), recomputeNote)
		if mode == RecomputeAll {
			out = append(out, v)
			continue
		}
		if pr.Sim == nil {
			pr.Sim, _ = simulate(pr.Plan)
		}
		out = append(out, pr)
		if pr.Sim != nil && !p.Fits(pr.Sim) && pr.Sim.Step < best && !residentOverflows(p, pr.Sim) {
			v.Sim, _ = simulate(v.Plan)
			out = append(out, v)
		}
	}
	return out
}

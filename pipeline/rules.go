package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/constraint"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/partition"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/sim"
)

// rulesState carries the user's rules from the rules stage to the
// stages that honour them.
type rulesState struct {
	res *constraint.Resolved
	// cut is each op's piece under the cut rules (nil: none), on the
	// graph the rules were resolved on.
	cut []string
	// given is the cluster before the limit and reserve rules.
	given *cluster.Cluster
	// checker checks plans of the graph placement sees; apart are the
	// separate rules on that graph.
	checker *constraint.Checker
	apart   []placer.Apart
	prefer  []placer.Preference
}

// resolveRules binds the user's rules (Options.Constraints) to the
// training step and the cluster: every later stage plans on the cluster
// the limit and reserve rules leave, with the colocate rules in the ops'
// Colocate keys. A rule that binds nothing is an input error; rules no
// plan can meet are a *constraint.ConflictError.
func resolveRules(_ context.Context, r *run) error {
	set := r.opts.Constraints
	if set == nil || len(set.Rules) == 0 {
		return nil
	}
	if r.opts.Strategies.Pipeline.OpCuts && hasCut(set) {
		return &InputError{errors.New("cutting pipeline stages between any ops contradicts the cut rules; drop one or the other")}
	}
	res, err := constraint.Resolve(set, r.model.Graph, r.cluster)
	if err != nil {
		var conflict *constraint.ConflictError
		if errors.As(err, &conflict) {
			return err
		}
		return &InputError{fmt.Errorf("%s: %w", r.opts.ModelPath, err)}
	}
	res.ApplyColocation()
	rs := &rulesState{res: res, given: r.cluster}
	g := r.model.Graph
	rs.cut = res.CutKeys(func() []string { return partition.ModuleKeys(g) })
	r.cluster = res.Cluster
	r.rules = rs
	return nil
}

func hasCut(set *constraint.Set) bool {
	for i := range set.Rules {
		if set.Rules[i].Kind == constraint.Cut {
			return true
		}
	}
	return false
}

// fusionSets narrows sets, the devices (or device types) fusion lets each
// op share, by the rules: the result is per device of c, and its keys keep
// ops the rules bind differently apart.
func (rs *rulesState) fusionSets(g *graph.Graph, c *cluster.Cluster, model cost.Model, fixed []int) *graph.DeviceSets {
	sets := runnableDevices(g, c, model, fixed)
	if a := rs.res.Allowed; a != nil {
		for i := range sets.Bits {
			sets.Bits[i] &= a.Bits[i]
		}
	}
	sets.Keys = rs.res.FusionKeys(rs.cut)
	return sets
}

// bind hands the rules to the problem placement solves, on the graph it
// places (of maps each op the rules were resolved on to its op there; nil:
// the same graph).
func (rs *rulesState) bind(table *cost.Table, of []graph.OpID) *cost.Table {
	n := len(table.Graph.Ops)
	allowed, apart := rs.res.OnGraph(n, of)
	if allowed != nil {
		table = table.WithAllowed(allowed)
	}
	for _, a := range apart {
		rs.apart = append(rs.apart, placer.Apart{Rule: a.Rule, Group: a.Group})
	}
	rs.checker = rs.res.Checker(of, rs.cut)
	rs.prefer = rs.preferences(n, of)
	return table
}

// preferences is the prefer rules for the placers, on the graph of n
// ops whose op of[x] runs resolved op x (of nil: the resolved graph); nil
// without such rules.
func (rs *rulesState) preferences(n int, of []graph.OpID) []placer.Preference {
	res := rs.res
	var out []placer.Preference
	for _, b := range res.Bindings {
		if b.Rule.Kind != constraint.Prefer {
			continue
		}
		pr := placer.Preference{Ops: make([]int32, n), Devices: make([]bool, len(res.Cluster.Devices)), Not: b.Rule.Not, Weight: b.Rule.Weight / 1000}
		for _, op := range b.Ops {
			if of != nil {
				op = of[op]
			}
			pr.Ops[op]++
		}
		for _, d := range b.Devices {
			pr.Devices[d] = true
		}
		out = append(out, pr)
	}
	return out
}

// pieces is each placed op's piece under the cut rules, nil without any.
func (rs *rulesState) pieces(r *run) []string {
	if rs.cut == nil {
		return nil
	}
	if r.fused == nil {
		return rs.cut
	}
	return partition.CoarseKeys(r.fused.coarse, rs.cut)
}

// report is the plan's account of the rules: what each bound, and what
// the soft ones cost the kept plan.
func (rs *rulesState) report(pl *sim.Plan) []plan.Rule {
	res := rs.res
	against := map[*constraint.Rule]constraint.Against{}
	for _, a := range rs.checker.Against(pl) {
		against[a.Rule] = a
	}
	var out []plan.Rule
	for _, b := range res.Bindings {
		rule := b.Rule
		pr := plan.Rule{Rule: rule.String(), Source: rule.Source, Hard: rule.Kind != constraint.Prefer, Ops: len(b.Ops)}
		const examples = 3
		for _, op := range b.Ops[:min(examples, len(b.Ops))] {
			pr.Examples = append(pr.Examples, res.Graph.Ops[op].Name)
		}
		for _, d := range b.Devices {
			pr.Devices = append(pr.Devices, res.Cluster.Devices[d].Name)
		}
		ranOn := func() string {
			var names []string
			for _, d := range rs.checker.DevicesOf(pl, b.Ops) {
				names = append(names, res.Cluster.Devices[d].Name)
			}
			return "the ops run on " + strings.Join(names, ", ")
		}
		switch rule.Kind {
		case constraint.Pin, constraint.Colocate:
			pr.Effect = ranOn()
		case constraint.Avoid:
			if len(b.Devices) == 0 {
				pr.Effect = "its target is not in the cluster the plan uses"
			} else {
				pr.Effect = ranOn()
			}
		case constraint.Prefer:
			if a, ok := against[rule]; ok {
				pr.Against, pr.PenaltyMS = a.Ops, float64(a.Ops)*rule.Weight
				pr.Effect = fmt.Sprintf("%d of %d ops run against it", a.Ops, len(b.Ops))
			} else {
				pr.Effect = "every selected op follows it"
			}
		case constraint.Limit:
			pr.Effect = fmt.Sprintf("the plan uses %d of %d devices", len(res.Cluster.Devices), len(rs.given.Devices))
			if len(res.Removed) > 0 {
				pr.Effect += " (left out: " + strings.Join(res.Removed, ", ") + ")"
			}
		case constraint.Reserve:
			pr.Effect = "memory shown is what is left"
		case constraint.Cut:
			pr.Effect = "stages start only where it allows"
		case constraint.Separate:
			var parts []string
			for k, ops := range b.Groups {
				var names []string
				for _, d := range rs.checker.DevicesOf(pl, ops) {
					names = append(names, res.Cluster.Devices[d].Name)
				}
				parts = append(parts, fmt.Sprintf("group %d on %s", k+1, strings.Join(names, ", ")))
			}
			pr.Effect = strings.Join(parts, "; ")
		}
		out = append(out, pr)
	}
	return out
}

// placeUnderRules is the place stage; a failure to fit says which rules
// took memory or devices away, since the figures it quotes are what the
// rules left.
func placeUnderRules(ctx context.Context, r *run) error {
	err := place(ctx, r)
	if err == nil || r.rules == nil {
		return err
	}
	var inf *placer.InfeasibleError
	if !errors.As(err, &inf) {
		return err
	}
	var took []string
	for _, b := range r.rules.res.Bindings {
		if k := b.Rule.Kind; k == constraint.Reserve || k == constraint.Limit {
			took = append(took, b.Rule.Describe())
		}
	}
	if len(took) == 0 {
		return err
	}
	return fmt.Errorf("%w; the cluster's figures are what these rules leave: %s", err, strings.Join(took, "; "))
}

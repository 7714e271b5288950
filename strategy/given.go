package strategy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
)

// GivenStrategy is the strategy that plans the placement a user gave
// (Problem.Given): it simulates exactly that placement, and has a
// placer place the ops it leaves out when asked to (Given.Fill).
const GivenStrategy = "given"

func init() {
	Register(GivenStrategy, FamilyPlacement, "the placement you give (a file mapping ops, modules or name patterns to devices, or an earlier plan), simulated as it is; a placer may fill in the ops it leaves out", func(cfg Config) Strategy {
		return given{cfg: cfg.Placer}
	})
}

// Given is a placement a user gave, on the problem's graph.
type Given struct {
	// Source names where the placement came from (a file), for messages.
	Source string
	// Plan is the placement: Device is each op's device, -1 for an op
	// the placement leaves out; Priority, when set, the order of the ops
	// of one device (a plan file's, from its ops' start times). A plan
	// file's shape comes with it: its stages, replicas, micro-batches
	// and schedule.
	Plan sim.Plan
	// Fill names the placer that places the ops Plan leaves out, with the
	// given ops pinned where the placement puts them; "" refuses a
	// placement that leaves any op out.
	Fill string
	// Notes say where the placement came from and what Fill placed, for
	// the plan's table; when nil, the strategy says how many ops Fill
	// placed.
	Notes []string
	// Shards are a plan file's ops' tensor-parallel splits by op name
	// (the original graph's ops), for a plan with tensor-parallel stages:
	// the split is solved again for the stages' degree and must agree.
	Shards map[string]string
}

// Family is the family of the given plan's shape (shapeFamily).
func (g *Given) Family() string { return shapeFamily(&g.Plan) }

// shapeFamily is the family a plan's shape belongs to: a pipeline of
// several stages, data parallelism over replicas of one device, a hybrid
// of replicas of several devices, or a placement.
func shapeFamily(pl *sim.Plan) string {
	if slices.ContainsFunc(pl.Stages, func(st sim.Stage) bool { return st.Tensor > 1 }) {
		return FamilyTensor
	}
	if len(pl.Stages) > 1 {
		return FamilyPipeline
	}
	if len(pl.Stages) == 1 && len(pl.Stages[0].Replicas) > 1 {
		if len(pl.Stages[0].Replicas[0]) > 1 {
			return FamilyHybrid
		}
		return FamilyDataParallel
	}
	return FamilyPlacement
}

// PlacementError is a given placement or configuration the problem
// cannot run as given: it leaves ops out with no placer to fill them in,
// puts an op on a device that cannot run it, or asks for more devices
// than the cluster has. The mistake is in the input.
type PlacementError struct{ Err error }

func (e *PlacementError) Error() string { return e.Err.Error() }
func (e *PlacementError) Unwrap() error { return e.Err }

type given struct{ cfg placer.Config }

func (s given) Propose(ctx context.Context, p *Problem) ([]Proposal, error) {
	g := p.Given
	if g == nil {
		return nil, fmt.Errorf("%s: %w: no placement was given", GivenStrategy, ErrNotApplicable)
	}
	ops := p.Graph.Ops
	if len(g.Plan.Device) != len(ops) {
		return nil, fmt.Errorf("%s: the given placement covers %d ops, the graph has %d", GivenStrategy, len(g.Plan.Device), len(ops))
	}
	pl := g.Plan
	pl.Device = slices.Clone(g.Plan.Device)
	var missing []graph.OpID
	for op, d := range pl.Device {
		switch {
		case d < 0:
			missing = append(missing, graph.OpID(op))
		case d >= p.Costs.NumDevices():
			return nil, fmt.Errorf("%s: op %q is given device %d; the cluster has %d", GivenStrategy, ops[op].Name, d, p.Costs.NumDevices())
		case !p.Costs.CanRun(graph.OpID(op), d):
			dev := &p.Costs.Cluster.Devices[d]
			if !math.IsInf(p.Costs.OpTime(graph.OpID(op), d), 1) {
				return nil, &PlacementError{fmt.Errorf("%s puts op %q on %s, which the rules (pin, avoid) keep it off", g.Source, ops[op].Name, dev.Name)}
			}
			return nil, &PlacementError{fmt.Errorf("%s puts op %q on %s, whose device type %s cannot run it (it has no time there)", g.Source, ops[op].Name, dev.Name, dev.Type.Name)}
		}
	}
	if err := givenApart(p, g.Source, pl.Device); err != nil {
		return nil, err
	}
	notes := slices.Clone(g.Notes)
	if len(missing) > 0 {
		if g.Fill == "" {
			return nil, &PlacementError{fmt.Errorf("%s leaves %s of %d unplaced (%s): give them devices, or name a placer to place them", g.Source, plural(len(missing), "op"), len(ops), p.Graph.QuoteNames(missing))}
		}
		if fam := g.Family(); fam != FamilyPlacement || pl.MicroBatches > 1 {
			return nil, &PlacementError{fmt.Errorf("%s leaves %s unplaced, and a placer fills in a placement only (one stage, one replica, one micro-batch), not this %s plan", g.Source, plural(len(missing), "op"), fam)}
		}
		filled, err := fill(ctx, p, pl.Device, g.Fill, s.cfg)
		if err != nil {
			return nil, err
		}
		pl.Placement = filled
		if len(notes) == 0 { // a caller's notes say what was filled in
			notes = append(notes, fmt.Sprintf("%s of %d given, %d placed by %s", plural(len(ops)-len(missing), "op"), len(ops), len(missing), g.Fill))
		}
	}
	prop := Proposal{Plan: &pl, Family: g.Family(), Notes: notes}
	if err := givenSplit(p, g, &prop); err != nil {
		return nil, err
	}
	return []Proposal{prop}, nil
}

// givenSplit gives a plan of tensor-parallel stages its split: solved
// again for the stages' degree (the search is deterministic), and held
// to the shards the plan file names, so a file whose splits were edited
// is refused rather than scored as something else.
func givenSplit(p *Problem, g *Given, prop *Proposal) error {
	pl := prop.Plan
	var first *sim.Stage // the first tensor-parallel stage
	for i := range pl.Stages {
		st := &pl.Stages[i]
		switch {
		case st.Tensor < 2:
		case first == nil:
			first = st
		case st.Tensor != first.Tensor:
			return &PlacementError{fmt.Errorf("%s: stages[%d] is tensor-parallel over %d devices, an earlier stage over %d: one degree per plan", g.Source, i, st.Tensor, first.Tensor)}
		}
	}
	if first == nil {
		return nil
	}
	t := first.Tensor
	// A plan whose search allowed token splits names some: solved
	// again the same way (a token search that chose none was not
	// proposed, the plain one was).
	tokens := false
	for _, sh := range g.Shards {
		tokens = tokens || strings.HasSuffix(sh, "tokens")
	}
	sol, split, err := tensorParallel{}.solve(p, first.Replicas[0], t, tokens)
	if err != nil {
		return &PlacementError{fmt.Errorf("%s: its stages are tensor-parallel over %d devices, but %w", g.Source, t, err)}
	}
	fine := p.Graph
	if p.Fine != nil {
		fine = p.Fine.Coarse.Fine
	}
	for i := range fine.Ops {
		name := fine.Ops[i].Name
		if want, ok := g.Shards[name]; ok && want != sol.Choice[i] {
			return &PlacementError{fmt.Errorf("%s says op %q is split %q; the search for groups of %d splits it %q (the file's splits were edited, or made by another version): plan again", g.Source, name, want, t, sol.Choice[i])}
		}
	}
	pl.Split, prop.Tensor = split, sol
	return nil
}

// givenApart refuses a given placement that puts ops of two groups of a
// separate rule on one device (ops it leaves out, -1, aside), so the
// message names the rule and the file rather than the placer that fills
// in the rest.
func givenApart(p *Problem, source string, devices []int) error {
	for _, a := range p.Apart {
		owner := map[int]graph.OpID{}
		for op, d := range devices {
			x := a.Group[op]
			if d < 0 || x < 0 {
				continue
			}
			if o, ok := owner[d]; ok && a.Group[o] != x {
				return &PlacementError{fmt.Errorf("%s puts op %q and op %q on %s, which %s keeps apart", source, p.Graph.Ops[o].Name, p.Graph.Ops[op].Name, p.Costs.Cluster.Devices[d].Name, a.Rule)}
			}
			owner[d] = graph.OpID(op)
		}
	}
	return nil
}

// fill places the ops devices leaves out (-1) with the named placer, the
// others pinned to their devices, and returns the placer's placement
// (its order included).
func fill(ctx context.Context, p *Problem, devices []int, name string, cfg placer.Config) (sim.Placement, error) {
	pl, err := newPlacer(name, cfg)
	if err != nil {
		return sim.Placement{}, &PlacementError{fmt.Errorf("filling in the placement: %w", err)}
	}
	// The pins go on a copy of the graph's ops, so no other strategy of
	// the problem sees them.
	pinned := *p.Graph
	pinned.Ops = slices.Clone(p.Graph.Ops)
	for op, d := range devices {
		if d >= 0 {
			pinned.Ops[op].Device = p.Costs.Cluster.Devices[d].Name
		}
	}
	prob := *p.Problem
	prob.Graph = &pinned
	placed, err := pl.Place(ctx, &prob)
	if err != nil {
		var inf *placer.InfeasibleError
		if errors.As(err, &inf) || ctx.Err() != nil {
			return sim.Placement{}, err
		}
		return sim.Placement{}, &PlacementError{fmt.Errorf("%s cannot fill in the given placement: %w", name, err)}
	}
	for op, d := range devices {
		if d >= 0 && placed.Device[op] != d {
			return sim.Placement{}, fmt.Errorf("%s moved op %q, pinned to %s, to %s", name, p.Graph.Ops[op].Name,
				p.Costs.Cluster.Devices[d].Name, p.Costs.Cluster.Devices[placed.Device[op]].Name)
		}
	}
	return placed, nil
}

// plural is "1 op" or "n ops".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

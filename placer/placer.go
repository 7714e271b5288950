// Package placer decides which device runs each op. Every algorithm sits
// behind the Placer interface and registers itself by name, so adding one
// is adding one file.
package placer

import (
	"context"
	"fmt"
	"slices"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/registry"
	"github.com/opplace/opplace/sim"
)

// Problem is what every placer receives: the graph, its edges and order,
// and the cost of every op on every device.
type Problem struct {
	Graph *graph.Graph
	Adj   *graph.Adjacency
	// Order is a topological order; placers break ties by position in it.
	Order []graph.OpID
	Costs *cost.Table
	// Apart are the user's separate rules: ops of different groups of
	// one never share a device. The user's other placement rules reach
	// placers through Costs (CanRun) and the ops' Colocate keys.
	Apart []Apart
	// Prefer are the user's soft rules: what placing an op on a device
	// adds to the objective plans are chosen by (see Penalty). The list
	// placers weigh it into their choice of device.
	Prefer []Preference
	// Record has the list placers simulate their placement with its
	// timeline recorded (sim.Plan.Record): set while the one strategy of
	// a plan proposes, so the plan does not simulate it again.
	Record bool
}

// Preference is one soft rule on the placed graph: Ops[op] counts the
// ops of placed op op it selects (a fused op may hold several), each of
// which adds Weight seconds when placed on a device whose Devices entry
// equals Not (on a device outside the target for "rather on", inside it
// for "rather not").
type Preference struct {
	Ops     []int32
	Devices []bool
	Not     bool
	Weight  float64
}

// Penalty is what the soft rules add for op on device d, in seconds.
func (p *Problem) Penalty(op graph.OpID, d int) float64 {
	var s float64
	for i := range p.Prefer {
		pr := &p.Prefer[i]
		if n := pr.Ops[op]; n > 0 && pr.Devices[d] == pr.Not {
			s += float64(n) * pr.Weight
		}
	}
	return s
}

// Apart is one separate rule: Group[op] is op's group (0, 1, ...; at
// most 64) or -1 for an op in none; two ops of different groups never
// share a device.
type Apart struct {
	// Rule names the rule, for messages.
	Rule  string
	Group []int8
}

// Placer assigns ops to devices under each device's memory.
type Placer interface {
	// Place returns a placement whose ops fit in memory, or an error; an
	// *InfeasibleError when the placer found no way to fit the graph.
	Place(ctx context.Context, p *Problem) (sim.Placement, error)
}

// Judged is implemented by placers that simulate the placement they
// return, as every list placer does to check that it fits (see
// placeFitting): PlaceJudged is Place that also returns the simulator's
// result for the placement, so a caller that scores it need not
// simulate it again.
type Judged interface {
	PlaceJudged(ctx context.Context, p *Problem) (sim.Placement, *sim.Result, error)
}

// WarmStarted is implemented by placers that can start their search from
// another placer's placement (ilp gives it to Cbc as its first
// incumbent), so a search with a limit ends no worse than where it
// began, in its own model.
type WarmStarted interface {
	WarmStart(sim.Placement)
}

// placed is Place's share of what PlaceJudged returns.
func placed(pl sim.Placement, _ *sim.Result, err error) (sim.Placement, error) { return pl, err }

// Factory makes a placer.
type Factory func() Placer

var placers = registry.New[Placer]("placer")

// Register adds a placer under name; it panics on a duplicate name, which
// is a programming error caught at init.
func Register(name, summary string, f Factory) { placers.Register(name, summary, f) }

// New makes the placer registered under name.
func New(name string) (Placer, error) { return placers.New(name) }

// Names lists the registered placers, sorted.
func Names() []string { return placers.Names() }

// Summary is the one-line description a placer registered with.
func Summary(name string) string { return placers.Summary(name) }

// NewProblem derives the edges and a topological order of g and wraps them
// with the costs.
func NewProblem(g *graph.Graph, costs *cost.Table) (*Problem, error) {
	adj := g.BuildAdjacency()
	order, err := g.TopoOrder(adj)
	if err != nil {
		return nil, err
	}
	return &Problem{Graph: g, Adj: adj, Order: order, Costs: costs}, nil
}

// Simulate scores a placement of the problem.
func (p *Problem) Simulate(pl sim.Placement) (*sim.Result, error) {
	return sim.Simulate(p.Costs, p.Adj, p.Order, pl)
}

// Fits reports whether a simulated placement stays within every device's
// memory.
func (p *Problem) Fits(res *sim.Result) bool {
	for d, peak := range res.PeakMemory {
		if peak > p.Costs.Cluster.Devices[d].Memory {
			return false
		}
	}
	return true
}

// pinned returns the device each op is pinned to (by Op.Device) or -1,
// and an error naming an op pinned to a device the cluster lacks.
func (p *Problem) pinned() ([]int, error) {
	pins := make([]int, len(p.Graph.Ops))
	for i := range pins {
		pins[i] = -1
		name := p.Graph.Ops[i].Device
		if name == "" {
			continue
		}
		d, ok := p.Costs.Cluster.DeviceIndex(name)
		if !ok {
			return nil, fmt.Errorf("op %q is pinned to device %q, which the cluster does not have", p.Graph.Ops[i].Name, name)
		}
		pins[i] = d
	}
	return pins, nil
}

// InfeasibleError says no plan that fits the cluster's memory was found.
// Proved tells the two cases apart that a pre-launch gate must not
// confuse: the memory bound rules out every plan of every strategy, or
// the strategies tried found none although the bound allows one (a
// heuristic got stuck, a solver's model is stricter than the
// simulator's, or the plans that would fit, with deeper gradient
// accumulation, say, are not in the space searched).
type InfeasibleError struct {
	// Need is a lower bound on the memory any plan needs: every
	// parameter and constant once, plus the most any op's other inputs,
	// outputs and scratch take (see InfeasibleAt).
	Need int64
	// Have is the cluster's total memory.
	Have int64
	// LargestOp needs LargestOpBytes on one device; LargestDevice is the
	// most one device holds.
	LargestOp      string
	LargestOpBytes int64
	LargestDevice  int64
	// At says at what division of the step the bound is taken ("" for
	// none: the whole batch on whole ops, as placements run it).
	At string
	// Proved is set when the bound alone rules out every plan (Need above
	// Have, or the largest op above the largest device): no strategy can
	// fit, whatever its search. A bound taken without a division (At "")
	// proves it for placements only; the strategy package takes it where
	// it holds for every plan of the space (strategy.Infeasible).
	Proved bool
	// Strategy names the strategy that was asked for and failed; "" when
	// the error sums up several (auto).
	Strategy string
	// Alternative is the first strategy found to fit after Strategy
	// failed; "" when none was tried or none fits.
	Alternative string
	// Detail says where the placer got stuck.
	Detail string
	// Hint names a plan outside what was searched that fits (ZeRO-3
	// across hosts, which auto does not offer); "" for none.
	Hint string
}

func (e *InfeasibleError) Error() string {
	at := ""
	if e.At != "" {
		at = ", " + e.At
	}
	bound := fmt.Sprintf("a plan needs at least %s (parameters once plus the largest op's working set%s), the cluster has %s in total",
		cluster.FormatBytes(e.Need), at, cluster.FormatBytes(e.Have))
	switch {
	case e.LargestOpBytes > e.LargestDevice:
		bound += fmt.Sprintf("; op %q alone needs %s but the largest device holds %s", e.LargestOp, cluster.FormatBytes(e.LargestOpBytes), cluster.FormatBytes(e.LargestDevice))
	case e.At != "" && e.LargestOp != "":
		bound += fmt.Sprintf("; there the largest op, %q, needs %s and the largest device holds %s", e.LargestOp, cluster.FormatBytes(e.LargestOpBytes), cluster.FormatBytes(e.LargestDevice))
	}
	var msg string
	switch {
	case e.Proved:
		msg = "the model does not fit the cluster: " + bound
	case e.Strategy != "":
		msg = fmt.Sprintf("strategy %s found no plan that fits the cluster's memory, though no bound rules one out: %s", e.Strategy, bound)
	default:
		msg = "no strategy found a plan that fits the cluster's memory, though no bound rules one out: " + bound
	}
	if e.Detail != "" {
		msg += "; " + e.Detail
	}
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	if e.Alternative != "" {
		return msg + fmt.Sprintf("; strategy %s finds a plan that fits: plan with it or with auto", e.Alternative)
	}
	return msg + "; use devices with more memory, more devices, or a smaller batch"
}

// Infeasible builds the error for problem p with the given detail, its
// memory bound that of placements (InfeasibleAt without a division).
func Infeasible(p *Problem, detail string) *InfeasibleError {
	return InfeasibleAt(p, detail, nil)
}

// deviceClasses groups devices that are interchangeable (same type and
// memory), returning one representative per class, lowest index first.
func deviceClasses(t *cost.Table) []int {
	var reps []int
	for _, cl := range t.Classes() {
		reps = append(reps, slices.Min(cl))
	}
	return reps
}

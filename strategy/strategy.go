// Package strategy is opplace's plan space: every way of running a step
// on a cluster (operator placement, data parallelism, pipelines, their
// hybrids) is a Strategy that proposes sim.Plans, registered by name, and
// every proposal is scored by one judge, the simulator. Auto searches the
// whole space and keeps the fastest plan that fits.
//
// Placers (package placer) and pipeline partitioners (package partition)
// are algorithms; this package turns each into a strategy, so adding a
// placer or a partitioner is still adding one file, and adding a family
// of plans is adding one file here.
package strategy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/internal/registry"
	"github.com/opplace/opplace/partition"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
)

// Families of strategies, as listed in comparisons.
const (
	FamilyPlacement    = "placement"
	FamilyDataParallel = "data-parallel"
	FamilyPipeline     = "pipeline"
	FamilyHybrid       = "hybrid"
)

// Config configures the strategies that take options.
type Config struct {
	// Pipeline tunes the partitioners: schedule, objective, micro-batches
	// and exact's limits.
	Pipeline partition.Options
	// Placer configures placers that take options (ilp).
	Placer placer.Config
	// Sharding is the ZeRO level replicated stages may use: "" lets
	// every replicating strategy offer its variants (dp: none, zero1,
	// zero2, zero3; hybrids, pipelines and tensor: none, zero2), "none",
	// "zero1", "zero2" or "zero3" only that one (see ParseSharding).
	Sharding string
	// Recompute is the activation recomputation replicated and
	// pipelined plans may use: "" (auto) adds a recomputing variant of
	// every such plan that does not fit, "none" never recomputes, "all"
	// recomputes in every stage (see ParseRecompute, sim.Stage.Recompute).
	Recompute string
	// Tensor is the tensor-parallel degree the tensor strategy may use:
	// "" for every power of two a device class allows, "none" for no
	// tensor parallelism, or one degree (see ParseTensor).
	Tensor string
	// Parallel is the configuration strategy parallel plans (nil: none
	// given); other strategies ignore it.
	Parallel *Parallel
}

// Problem is what every strategy receives: the graph, its order, its
// costs on the cluster and the batch a step processes.
type Problem struct {
	*placer.Problem
	// Batch is the global batch of one step (the graph inputs' leading
	// dimension), or 0 when unknown; micro-batches and replicas split it.
	Batch int64
	// Bound is the lower bound of any plan of the space: the work spread
	// perfectly over the cluster (see cost.LowerBound).
	Bound cost.Bound
	// Given is the placement strategy given plans (GivenStrategy); nil
	// when none was given. Other strategies ignore it.
	Given *Given
	// Rules are the user's rules every plan is held to (nil: none). The
	// placement rules reach the strategies through Costs (CanRun), the
	// ops' Colocate keys and Apart; the judge also checks every proposal
	// against Rules, so no plan that breaks one is ever kept.
	Rules Rules
	// CutRequired says the pipeline stages must cut between the pieces
	// Modules gives (the user's cut rules), never between ops.
	CutRequired bool
	// Modules is each op's module for the pipeline strategies' cuts (see
	// partition.ModuleKeys); nil: taken from the graph's op names. A
	// caller that placed a fused graph gives the modules of the original
	// ops (partition.CoarseModuleKeys).
	Modules []string

	// Fine is the graph before fusion when the problem's graph is fused
	// (nil: it is not), for the strategies that decide per original op.
	Fine *Fine

	// bounds are what the lower bounds of every family share (see
	// lowerBounds), worked out at the first asking.
	bounds *boundFacts
	// parts shares partition problems between the pipeline strategies
	// (nil: none shared).
	parts *partCache
	// simulator judges every plan of the problem (nil: sim.Run).
	simulator *sim.Simulator
	// finest is the memory bound's division, worked out at the first
	// asking (nil: each time; see Finest).
	finest *finestOnce
	// proxy marks a problem standing for another on a cluster of proxy
	// devices (the tensor strategy's groups, each one device with the
	// split's op times): its plans are partitioned, not judged.
	proxy bool
}

// NewProblem wraps a placement problem with the step's batch.
func NewProblem(p *placer.Problem, batch int64) *Problem {
	return &Problem{Problem: p, Batch: batch, Bound: cost.LowerBound(p.Costs, p.Adj, p.Order), parts: &partCache{}, bounds: &boundFacts{},
		simulator: sim.New(p.Costs, p.Adj, p.Order), finest: &finestOnce{}}
}

// Simulate runs the simulator, the judge of every strategy, on a plan of
// the problem.
func (p *Problem) Simulate(pl *sim.Plan) (*sim.Result, error) {
	if p.simulator == nil {
		return sim.Run(p.Costs, p.Adj, p.Order, pl)
	}
	res, err := p.simulator.Run(pl)
	if checkBounds && err == nil {
		if lb, berr := p.simulator.ComputeBound(pl); berr != nil || lb > res.Step*(1+1e-9)+1e-12 {
			panic(fmt.Sprintf("sim.ComputeBound %v (%v) above the simulated step %v", lb, berr, res.Step))
		}
	}
	return res, err
}

// computeBound is sim.ComputeBound of pl, 0 without a simulator.
func (p *Problem) computeBound(pl *sim.Plan) (float64, error) {
	if p.simulator == nil {
		return 0, nil
	}
	return p.simulator.ComputeBound(pl)
}

// checkBounds makes every simulation also check that sim.ComputeBound,
// which the judge prunes by, is no longer than the step: on in test
// binaries.
var checkBounds = testing.Testing()

// Rules are the user's rules as the judge applies them.
type Rules interface {
	// Check returns the hard rule a plan breaks, or nil.
	Check(*sim.Plan) error
	// Penalty is what the soft rules add to the plan's step, in seconds.
	Penalty(*sim.Plan) float64
}

// Proposal is one plan a strategy puts to the judge.
type Proposal struct {
	Plan *sim.Plan
	// Estimate is the strategy's own prediction of the step in seconds
	// (a partitioner's analytic model), or 0 when it has none.
	Estimate float64
	// Pipeline is the partition behind a pipeline plan.
	Pipeline *partition.Plan
	// Notes are what the strategy has to say about this proposal.
	Notes []string
	// Sim, when set, is the simulator's result for Plan, which the
	// strategy already needed: the judge does not simulate it again.
	Sim *sim.Result
	// Family, when set, is the family of Plan's shape, where it is not
	// the strategy's own (a given plan file's pipeline).
	Family string
	// Tensor is the split behind a plan of tensor-parallel stages.
	Tensor *TensorSolution
}

// Strategy proposes plans for a problem. It returns its proposals, best
// first by its own reckoning; the judge simulates each and keeps the
// fastest that fits. A strategy that finds no plan returns an error: an
// *placer.InfeasibleError or *partition.InfeasibleError when nothing it
// tried fits in memory.
type Strategy interface {
	Propose(ctx context.Context, p *Problem) ([]Proposal, error)
}

// Factory makes a strategy from its configuration.
type Factory func(Config) Strategy

type entry struct {
	family  string
	factory Factory
}

var strategies = registry.New[entry]("strategy")

// Register adds a strategy under name in a family; a duplicate name
// panics (a programming error caught at init).
func Register(name, family, summary string, f Factory) {
	strategies.Register(name, summary, func() entry { return entry{family, f} })
}

// New makes the strategy registered under name.
func New(name string, cfg Config) (Strategy, error) {
	e, err := strategies.New(name)
	if err != nil {
		return nil, err
	}
	return e.factory(cfg), nil
}

// Names lists every registered strategy, sorted.
func Names() []string { return strategies.Names() }

// Summary is the one-line description a strategy registered with.
func Summary(name string) string { return strategies.Summary(name) }

// Family is the family a strategy belongs to, or "" for an unknown name.
func Family(name string) string {
	e, err := strategies.New(name)
	if err != nil {
		return ""
	}
	return e.family
}

// Outcome is one strategy's judged result on a problem.
type Outcome struct {
	Strategy string
	Family   string
	// Plan is the proposal the judge kept and Sim its simulated step; nil
	// when the strategy failed.
	Plan *sim.Plan
	Sim  *sim.Result
	Fits bool
	// Err is why the strategy failed or, for a plan that overflows a
	// device, an *placer.InfeasibleError saying where.
	Err error
	// Solve is the strategy's own time plus the judge's (not
	// deterministic).
	Solve time.Duration
	// Estimate is the strategy's own prediction of the kept plan's step
	// in seconds, 0 when it has none.
	Estimate float64
	Notes    []string
	Pipeline *partition.Plan
	// Tensor is the split behind a plan of tensor-parallel stages.
	Tensor *TensorSolution
	// Pruned is set when auto skipped the strategy because a bound proved
	// it cannot beat the best plan found before it.
	Pruned string
	// Penalty is what the user's soft rules add to the kept plan's step
	// (Rules.Penalty), in seconds.
	Penalty float64
}

// Objective is what plans are chosen by: the simulated step plus the
// soft rules' penalty, in seconds.
func (o *Outcome) Objective() float64 { return o.Sim.Step + o.Penalty }

// Evaluate runs a strategy and judges its proposals. A memory failure
// comes out as an *placer.InfeasibleError with the bound of the whole
// space (see Infeasible) that names the strategy.
func Evaluate(ctx context.Context, p *Problem, name string, s Strategy) Outcome {
	o := Outcome{Strategy: name, Family: Family(name)}
	begin := time.Now()
	defer func() { o.Solve = time.Since(begin) }()
	props, err := s.Propose(ctx, p)
	if n, ok := s.(placer.Noter); ok {
		o.Notes = append(o.Notes, n.Notes()...)
	}
	if err != nil {
		o.Err = failed(p, name, err)
		o.Solve = time.Since(begin)
		return o
	}
	o = judge(p, o, props)
	o.Err = failed(p, name, o.Err)
	o.Solve = time.Since(begin)
	return o
}

// judge simulates every proposal and keeps the fastest that fits, else
// the first, with an error saying where it overflows.
//
// Proposals the strategy simulated already are judged first; the others
// are then simulated from the least compute bound (sim.ComputeBound) up,
// and one whose bound and penalty exceed the best plan that fits so far
// is not simulated: it cannot be kept. The plan kept is the one judging
// them all in order would keep.
func judge(p *Problem, o Outcome, props []Proposal) Outcome {
	type judged struct {
		res *sim.Result
		err error
	}
	out := make([]judged, len(props))
	penalty := make([]float64, len(props)) // the soft rules' (Rules.Penalty)
	if p.Rules != nil {
		for i, pr := range props {
			penalty[i] = p.Rules.Penalty(pr.Plan)
		}
	}
	best := math.Inf(1) // the least objective of a plan that fits so far
	try := func(i int) {
		pr := props[i]
		res, err := pr.Sim, p.SplitsBatch(pr.Plan)
		if res == nil && err == nil {
			res, err = p.Simulate(pr.Plan)
		}
		if err == nil && p.Rules != nil {
			err = p.Rules.Check(pr.Plan)
		}
		out[i] = judged{res, err}
		if err == nil && p.Fits(res) {
			best = min(best, res.Step+penalty[i])
		}
	}
	var later []int
	bounds := make([]float64, len(props))
	for i, pr := range props {
		if pr.Sim != nil || p.simulator == nil {
			try(i)
			continue
		}
		lb, err := p.simulator.ComputeBound(pr.Plan)
		if err != nil {
			lb = 0
		}
		bounds[i] = lb + penalty[i]
		later = append(later, i)
	}
	slices.SortStableFunc(later, func(a, b int) int { return cmp.Compare(bounds[a], bounds[b]) })
	skipped := make([]bool, len(props))
	for _, i := range later {
		if bounds[i] > best {
			skipped[i] = true
			continue
		}
		try(i)
	}
	var overflowing *Outcome
	notes := o.Notes // the strategy's own; each proposal adds its own
	for i, pr := range props {
		if skipped[i] {
			continue
		}
		res, err := out[i].res, out[i].err
		if err != nil {
			if o.Sim == nil && overflowing == nil {
				o.Err = err
			}
			continue
		}
		c := o
		c.Plan, c.Sim, c.Estimate, c.Pipeline, c.Tensor, c.Err = pr.Plan, res, pr.Estimate, pr.Pipeline, pr.Tensor, nil
		c.Penalty = penalty[i]
		c.Notes = append(slices.Clone(notes), pr.Notes...)
		if pr.Family != "" {
			c.Family = pr.Family
		}
		c.Fits = p.Fits(res)
		if !c.Fits {
			if overflowing == nil || c.Objective() < overflowing.Objective() {
				c.Err = Overflow(p.Problem, o.Strategy, res)
				overflowing = &c
			}
			continue
		}
		if o.Sim == nil || !o.Fits || c.Objective() < o.Objective() {
			o = c
		}
	}
	if o.Sim == nil && overflowing != nil {
		return *overflowing
	}
	return o
}

// Overflow explains a plan whose simulated peak exceeds a device.
func Overflow(p *placer.Problem, strategy string, res *sim.Result) error {
	worst, over := -1, int64(math.MinInt64)
	for d, peak := range res.PeakMemory {
		if o := peak - p.Costs.Cluster.Devices[d].Memory; o > over {
			worst, over = d, o
		}
	}
	d := p.Costs.Cluster.Devices[worst]
	return placer.Infeasible(p, fmt.Sprintf("%s's plan peaks at %s on %s, which holds %s",
		strategy, cluster.FormatBytes(res.PeakMemory[worst]), d.Name, cluster.FormatBytes(d.Memory)))
}

// ErrNotApplicable marks a strategy that has nothing to propose for a
// problem (data parallelism on a cluster with one device of each type).
var ErrNotApplicable = errors.New("not applicable")

// pinned reports whether any op is pinned to a device (TensorFlow device
// fields kept with --respect-devices): only placement strategies honour
// pins, so the families that choose devices themselves step aside.
func pinned(p *Problem, strategy string) error {
	for i := range p.Graph.Ops {
		if p.Graph.Ops[i].Device != "" {
			return fmt.Errorf("%s: %w: op %q is pinned to %s, and only placement strategies honour pins", strategy, ErrNotApplicable, p.Graph.Ops[i].Name, p.Graph.Ops[i].Device)
		}
	}
	return nil
}

// Alternatives are the strategies Explain tries, in order, after an asked
// strategy found no plan that fits: cheap ones first, so naming one that
// does fit costs seconds, not a search of the whole space.
var Alternatives = []string{"m-topo", "m-etf", "heft", "dp", PipelinePrefix + "pipedream"}

// Explain turns the failure of the strategy a user asked for into the
// error to report. A memory failure becomes one *placer.InfeasibleError
// naming the strategy; unless the memory bound proves that no plan fits,
// it also names the first of Alternatives that finds a plan that fits, so
// that "does not fit" never hides a plan that exists. Other errors are
// returned as they are.
func Explain(ctx context.Context, p *Problem, cfg Config, asked string, err error) error {
	var inf *placer.InfeasibleError
	if !errors.As(Infeasible(p, err), &inf) {
		return err
	}
	e := *inf
	e.Strategy, e.Alternative = asked, ""
	if e.Proved {
		return &e
	}
	for _, name := range Alternatives {
		if name == asked || !slices.Contains(Names(), name) {
			continue
		}
		s, err := New(name, cfg)
		if err != nil {
			continue
		}
		if o := Evaluate(ctx, p, name, s); o.Err == nil && o.Fits {
			e.Alternative = name
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return withZeRO3Hint(ctx, p, cfg, &e)
}

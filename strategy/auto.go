package strategy

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/opplace/opplace/internal/progress"
	"github.com/opplace/opplace/placer"
)

// Auto is the strategy name that searches the whole plan space.
const Auto = "auto"

// AutoStrategies are what Auto runs, in this order (which also breaks
// ties): the families whose plans split the batch first, since they are
// cheap to search and set the mark that bounds prune the rest against;
// then the placers, and the local search from the best of their
// placements; then the hybrids.
//
// The list is explicit, so a placer registered later is not in it until
// added. m-etf-baechi and m-sct-baechi are deliberately left out: they
// reproduce Baechi's published code, oddities included (a memory check
// that ignores received tensors, so plans that do not fit), to measure
// opplace's placers against, not to plan with.
var AutoStrategies = []string{
	"dp", "pipeline:pipedream", "pipeline:exact", "tensor",
	"single", "m-etf", "heft", "m-sct", "m-topo", "expert", "ilp", "local",
	"dp+m-etf", "dp+heft",
}

// AutoExactTimeLimit is the time auto gives the exact partitioner when
// the configuration sets none: exact keeps the best split found by then
// (its pipedream pass at worst), so auto stays seconds on graphs whose
// proof takes longer; --strategy pipeline:exact searches up to its own
// 30 s limit.
const AutoExactTimeLimit = 2 * time.Second

// AutoILPTimeLimit and AutoILPNodes are what auto gives the ilp placer
// when the configuration sets none. The node limit ends the search on
// most graphs (the same answer on every machine); the time limit caps it
// on a slow machine or a large model (then the note says so, and the
// plan may differ between runs). ilp starts from the best placement
// before it, so it can only add a better one.
const (
	AutoILPTimeLimit = 2 * time.Second
	AutoILPNodes     = 50
)

// AutoRefineWork is the work auto gives the local search when the
// configuration sets none: 10^6 simulated ops, 1.2-2.7 s here at most
// (placer.DefaultRefineWork), so auto stays seconds; --strategy local
// searches ten times longer. Past 10,000 ops auto's budget leaves the
// search too few tries and it is not applicable.
const AutoRefineWork = 1_000_000

// SpaceBound is the lower bound every plan of a family pays; family ""
// means the whole space (auto). It is every registered bound
// (lowerBounds) of the family, each a part; the largest binds.
//
// Every plan does all the work, spread at best perfectly over the
// cluster. A placement runs the whole batch at once, so it also takes the
// critical path with every op at its fastest. A plan that splits the
// batch runs each op on at least 1/batch of it, and an op's time shrinks
// at most in proportion to its share, so it takes at least the critical
// path divided by the batch: with a batch of 1 nothing splits. The
// memory-forced communication and LP relaxation bounds hold for plans
// that fit (docs/model.md proves each).
func SpaceBound(p *Problem, family string) Bound {
	var b Bound
	for _, lb := range lowerBounds {
		part := lb.fn(p, family)
		if part.Kind == "" {
			part.Kind = lb.kind
		}
		part.Fitting = lb.fitting
		b.Parts = append(b.Parts, part)
	}
	return b
}

// familyBound is a lower bound on the step of every fitting plan of a
// family, in seconds.
//
// A placement runs the whole batch through the graph once, so its step is
// at least the critical path with every op at its fastest (and the work
// bound). A hybrid of r >= 2 replicas of k >= 2 devices runs 1/r of the
// batch per replica, r at most half the largest device class: its step is
// at least the critical path times 1/r (every op's time shrinks at most
// in proportion to its share of the batch). Auto compares it only with
// plans that fit, so the bounds that hold for fitting plans count.
func familyBound(p *Problem, family string) float64 {
	b := SpaceBound(p, family).Seconds()
	if family == FamilyHybrid {
		largest := 0
		for _, cl := range p.Costs.Classes() {
			largest = max(largest, len(cl))
		}
		if r := largest / 2; r >= 2 {
			b = max(b, p.Bound.Throughput, p.Bound.CriticalPath/float64(r))
		} else {
			b = max(b, p.Bound.Seconds())
		}
	}
	return b
}

// FamilyBound is the bound auto prunes a family's strategies by: no
// fitting plan of the family takes less, in seconds (SpaceBound's, with
// a hybrid's replicas bounded by the largest device class).
func FamilyBound(p *Problem, family string) float64 { return familyBound(p, family) }

// Search runs the named strategies (AutoStrategies when names is nil) and
// returns every outcome in run order and the index of the fastest that
// fits. A strategy is skipped, its outcome saying why, when its family's
// bound proves it cannot beat the best fitting plan of the strategies
// before it. When none fits, the error combines every strategy's reason
// (an *placer.InfeasibleError when memory is why).
//
// The strategies run on up to GOMAXPROCS goroutines, and the result is
// the one running them one after another in order gives: which are
// skipped is decided afterwards, in order, from the outcomes of those
// before. A goroutine does not start a strategy that the outcomes already
// known prove will be skipped (a fitting plan before it at or under its
// bound); one skipped so that turns out to be needed after all (it
// cannot be, while the bounds hold) is run then.
//
// A Seeded strategy (local) builds on the plans before it, so it runs
// after all of them, on their outcomes.
func Search(ctx context.Context, p *Problem, cfg Config, names []string) ([]Outcome, int, error) {
	if names == nil {
		names = AutoStrategies
	}
	cfg = autoConfig(cfg)
	strategies := make([]Strategy, len(names))
	bounds := make([]float64, len(names))
	for i, name := range names {
		s, err := New(name, cfg)
		if err != nil {
			return nil, -1, err
		}
		strategies[i], bounds[i] = s, familyBound(p, Family(name))
	}
	task := progress.From(ctx).Start("auto", int64(len(names)))
	defer task.Done()
	ran := runAhead(ctx, p, names, strategies, bounds, task)
	if err := ctx.Err(); err != nil {
		return nil, -1, err
	}
	best := -1
	outs := make([]Outcome, 0, len(names))
	var fails []placer.Failure
	for i, name := range names {
		fam := Family(name)
		if best >= 0 && bounds[i] >= outs[best].Objective() {
			outs = append(outs, Outcome{Strategy: name, Family: fam,
				Pruned: fmt.Sprintf("any %s plan takes at least %.3f ms, %s already takes %.3f ms", fam, bounds[i]*1e3, outs[best].Strategy, outs[best].Sim.Step*1e3)})
			continue
		}
		if ran[i] == nil {
			s := strategies[i]
			if sd, ok := s.(Seeded); ok {
				s = seededWith{sd, outs}
			}
			o := Evaluate(ctx, p, name, s)
			if err := ctx.Err(); err != nil {
				return nil, -1, err
			}
			ran[i] = &o
		}
		o := *ran[i]
		outs = append(outs, o)
		if o.Sim != nil && o.Fits && (best < 0 || o.Objective() < outs[best].Objective()) {
			best = len(outs) - 1
		}
		if o.Err != nil && !errors.Is(o.Err, ErrNotApplicable) {
			fails = append(fails, placer.Failure{Strategy: name, Err: Infeasible(p, o.Err)})
		}
	}
	if best < 0 {
		if len(fails) == 0 {
			return outs, -1, fmt.Errorf("no strategy applies to this problem")
		}
		return outs, -1, withZeRO3Hint(ctx, p, cfg, placer.CombineFailures(fails))
	}
	outs[best] = Refine(p, cfg, outs[best])
	return outs, best, nil
}

// autoConfig is cfg with auto's limits where it sets none.
func autoConfig(cfg Config) Config {
	if cfg.Pipeline.TimeLimit == 0 {
		cfg.Pipeline.TimeLimit = AutoExactTimeLimit
	}
	if cfg.Placer.RefineWork == 0 {
		cfg.Placer.RefineWork = AutoRefineWork
	}
	if cfg.Placer.TimeLimit == 0 {
		cfg.Placer.TimeLimit = AutoILPTimeLimit
	}
	if cfg.Placer.Nodes == 0 {
		cfg.Placer.Nodes = AutoILPNodes
	}
	return cfg
}

// EvaluateAfter runs the strategy registered under name on p as Search
// runs it, with auto's limits where cfg sets none and a Seeded strategy
// (local) built on the outcomes before it: for a caller that runs a
// strategy the search pruned (pipeline.Choice.Evaluate).
func EvaluateAfter(ctx context.Context, p *Problem, cfg Config, name string, before []Outcome) (Outcome, error) {
	cfg = autoConfig(cfg)
	s, err := New(name, cfg)
	if err != nil {
		return Outcome{}, err
	}
	if sd, ok := s.(Seeded); ok {
		s = seededWith{sd, before}
	}
	return Evaluate(ctx, p, name, s), nil
}

// runAhead evaluates the strategies on up to GOMAXPROCS goroutines,
// taking them in order, and returns their outcomes; an outcome is nil
// where the strategy was not run because a fitting plan of a strategy
// before it already takes no longer than its bound (or ctx was done).
func runAhead(ctx context.Context, p *Problem, names []string, strategies []Strategy, bounds []float64, task progress.Task) []*Outcome {
	ran := make([]*Outcome, len(names))
	var (
		mu   sync.Mutex
		next int
		wg   sync.WaitGroup
	)
	// claim hands out the next strategy worth running, or -1.
	claim := func() int {
		mu.Lock()
		defer mu.Unlock()
		for next < len(names) && ctx.Err() == nil {
			i := next
			next++
			if _, seeded := strategies[i].(Seeded); seeded {
				task.Add(1)
				continue // it runs after those before it, in Search
			}
			dominated := false
			for j := 0; j < i && !dominated; j++ {
				o := ran[j]
				dominated = o != nil && o.Sim != nil && o.Fits && o.Objective() <= bounds[i]
			}
			if !dominated {
				return i
			}
			task.Add(1)
		}
		return -1
	}
	for range min(runtime.GOMAXPROCS(0), len(names)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := claim(); i >= 0; i = claim() {
				o := Evaluate(ctx, p, names[i], strategies[i])
				mu.Lock()
				ran[i] = &o
				mu.Unlock()
				task.Add(1)
			}
		}()
	}
	wg.Wait()
	return ran
}

// seededWith runs a Seeded strategy on the outcomes before it.
type seededWith struct {
	Seeded
	before []Outcome
}

func (s seededWith) Propose(ctx context.Context, p *Problem) ([]Proposal, error) {
	return s.ProposeFrom(ctx, p, s.before)
}

// Notes passes on the seeded strategy's notes (ilp's solver status),
// which the wrapper would otherwise hide from Evaluate.
func (s seededWith) Notes() []string {
	if n, ok := s.Seeded.(placer.Noter); ok {
		return n.Notes()
	}
	return nil
}

package strategy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/internal/progress"
	"github.com/opplace/opplace/partition"
	"github.com/opplace/opplace/placer"
)

// Auto is the strategy name that searches the whole plan space.
const Auto = "auto"

// AutoStrategies are what Auto runs, in this order (which also breaks
// ties): the families whose plans split the batch first, since they are
// cheap to search and set the mark that bounds prune the rest against;
// then the placers; then the hybrids.
var AutoStrategies = []string{
	"dp", "pipeline:pipedream", "pipeline:exact",
	"single", "m-etf", "heft", "m-sct", "m-topo", "expert",
	"dp+m-etf", "dp+heft",
}

// AutoExactTimeLimit is the time auto gives the exact partitioner when
// the configuration sets none: exact keeps the best split found by then
// (its pipedream pass at worst), so auto stays seconds on graphs whose
// proof takes longer; --strategy pipeline:exact searches up to its own
// 30 s limit.
const AutoExactTimeLimit = 2 * time.Second

// SpaceBound is the lower bound every plan of a family pays, and which
// part of it binds; family "" means the whole space (auto).
//
// Every plan does all the work, spread at best perfectly over the
// cluster. A placement runs the whole batch at once, so it also takes the
// critical path with every op at its fastest. A plan that splits the
// batch runs each op on at least 1/batch of it, and an op's time shrinks
// at most in proportion to its share, so it takes at least the critical
// path divided by the batch: with a batch of 1 nothing splits.
func SpaceBound(p *Problem, family string) (cost.Bound, string) {
	b := p.Bound
	if family != FamilyPlacement {
		if p.Batch > 0 {
			b.CriticalPath /= float64(p.Batch)
		} else {
			b.CriticalPath = 0
		}
	}
	kind := "work"
	if b.CriticalPath > b.Throughput {
		kind = "critical path"
		if family != FamilyPlacement {
			kind = "critical path / batch"
		}
	}
	return b, kind
}

// familyBound is a lower bound on the step of every plan of a family, in
// seconds, or 0 when none is known beyond the problem's work bound.
//
// A placement runs the whole batch through the graph once, so its step is
// at least the critical path with every op at its fastest (and the work
// bound). A hybrid of r >= 2 replicas of k >= 2 devices runs 1/r of the
// batch per replica, r at most half the largest device class: its step is
// at least the critical path times 1/r (every op's time shrinks at most
// in proportion to its share of the batch).
func familyBound(p *Problem, family string) float64 {
	switch family {
	case FamilyPlacement:
		return p.Bound.Seconds()
	case FamilyHybrid:
		largest := 0
		for _, cl := range p.Costs.Cluster.Classes() {
			largest = max(largest, len(cl))
		}
		if r := largest / 2; r >= 2 {
			return max(p.Bound.Throughput, p.Bound.CriticalPath/float64(r))
		}
		return p.Bound.Seconds()
	}
	b, _ := SpaceBound(p, family)
	return b.Seconds()
}

// Search runs the named strategies (AutoStrategies when names is nil) in
// order, skipping a family once a bound proves it cannot beat the best
// fitting plan found so far, and returns every outcome in run order and
// the index of the fastest that fits. When none fits, the error combines
// every strategy's reason (an *placer.InfeasibleError when memory is why).
func Search(ctx context.Context, p *Problem, cfg Config, names []string) ([]Outcome, int, error) {
	if names == nil {
		names = AutoStrategies
	}
	if cfg.Pipeline.TimeLimit == 0 {
		cfg.Pipeline.TimeLimit = AutoExactTimeLimit
	}
	best := -1
	var outs []Outcome
	var fails []placer.Failure
	task := progress.From(ctx).Start("auto", int64(len(names)))
	defer task.Done()
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return outs, -1, err
		}
		s, err := New(name, cfg)
		if err != nil {
			return outs, -1, err
		}
		fam := Family(name)
		if best >= 0 {
			if lb := familyBound(p, fam); lb >= outs[best].Sim.Step {
				outs = append(outs, Outcome{Strategy: name, Family: fam,
					Pruned: fmt.Sprintf("any %s plan takes at least %.3f ms, %s already takes %.3f ms", fam, lb*1e3, outs[best].Strategy, outs[best].Sim.Step*1e3)})
				task.Add(1)
				continue
			}
		}
		o := Evaluate(ctx, p, name, s)
		if ctx.Err() != nil {
			return outs, -1, ctx.Err()
		}
		outs = append(outs, o)
		if o.Sim != nil && o.Fits && (best < 0 || o.Sim.Step < outs[best].Sim.Step) {
			best = len(outs) - 1
		}
		if o.Err != nil && !errors.Is(o.Err, ErrNotApplicable) {
			fails = append(fails, placer.Failure{Strategy: name, Err: Infeasible(p, o.Err)})
		}
		task.Add(1)
	}
	if best < 0 {
		if len(fails) == 0 {
			return outs, -1, fmt.Errorf("no strategy applies to this problem")
		}
		return outs, -1, placer.CombineFailures(fails)
	}
	return outs, best, nil
}

// Infeasible turns a partitioner's memory failure into the placement
// problem's *placer.InfeasibleError, so every strategy's failure reads
// and exits alike; other errors are returned as they are.
func Infeasible(p *Problem, err error) error {
	var pinf *partition.InfeasibleError
	if errors.As(err, &pinf) {
		return placer.Infeasible(p.Problem, fmt.Sprintf("pipeline partitioner %s: no split fits in device memory: %s", pinf.Partitioner, pinf.Detail))
	}
	return err
}

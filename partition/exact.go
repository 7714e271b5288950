package partition

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/opplace/opplace/internal/progress"
)

func init() {
	Register("exact", "exact optimum over every contiguous split (downsets of the DAG), device types and replica counts, after merging tiny side branches (optimality gap reported); falls back to pipedream past a size or time limit", func() Partitioner { return exact{} })
}

// exact runs the shared dynamic programme on every downset of the unit
// DAG (Tarnawski et al. 2020), so a stage may be any convex piece of the
// graph rather than a range of one topological order.
//
// Before enumerating it merges side branches whose compute is under
// Options.Epsilon of the total into a neighbour (reduce.go), which keeps
// the downsets of ONNX exports in the hundreds, and it certifies the
// result: a second pass over the same downsets with the merged units
// made free gives a lower bound on every split of the unit graph, so the
// plan states how far from the optimum it can be (Plan.Exact). When the
// downsets still pass Options.MaxIdeals it merges more (4ε, then 16ε),
// and then returns the pipedream plan with a warning.
//
// Each micro-batch count is searched under the pipedream optimum for
// that count, and the better of the two is kept, so exact is never worse
// than pipedream (nor gpipe, which pipedream's search contains).
type exact struct{}

// maxCoarsen is how many times exact multiplies ε by 4 when the
// downsets are too many.
const maxCoarsen = 2

func (exact) Partition(ctx context.Context, p *Problem) (*Plan, error) {
	// The pipedream pass comes first: every M is searched under its
	// optimum, and it is the fallback, so falling back costs nothing
	// more. The time limit counts from its end, so a pass shared with a
	// pipedream run alongside (auto) costs exact's search no time while
	// it waits for it.
	cp, err := p.chainPass(ctx, "exact: pipedream pass", time.Time{})
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(p.Options.TimeLimit)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	chain, chains := cp.lat, cp.sols
	plans := make([]*Plan, len(chains))
	for i, s := range chains {
		if s != nil {
			plans[i] = p.report("exact", s)
			if cp.warn != "" {
				plans[i].Warnings = append(plans[i].Warnings, "exact: its pipedream pass: "+cp.warn)
			}
		}
	}
	fallback := func(why string) (*Plan, error) {
		pl := bestPlan(plans)
		if pl == nil {
			return nil, &InfeasibleError{Partitioner: "exact", Detail: p.tried(p.microBatchCandidates()), Rules: p.ruled()}
		}
		pl.Warnings = append(pl.Warnings, "exact: "+why+"; used the pipedream split instead")
		return pl, nil
	}
	tooLate := func() (*Plan, error) {
		return fallback(fmt.Sprintf("the %v time limit passed while enumerating downsets", p.Options.TimeLimit))
	}
	if p.uniform() {
		return fallback(fmt.Sprintf("on %d devices of one type the stages are searched by degree (uniform stages over one topological order), not over every downset and device count", p.Costs.NumDevices()))
	}
	eps := p.Options.Epsilon
	var red *reduction
	var l *lattice
	enumerated := sync.OnceFunc(progress.From(ctx).Start("exact: enumerating downsets", 0).Done)
	defer enumerated()
	// Search the unit graph itself when its downsets are few enough: the
	// plan is then proven optimal with no reduction at all.
	if eps > 0 {
		var err error
		if l, err = idealLatticeBy(p.u, p.m, p.Options.SearchIdeals, deadline); errors.Is(err, errDeadline) {
			return tooLate()
		} else if err != nil && !errors.Is(err, errTooManyIdeals) {
			return nil, err
		}
	}
	for try := 0; l == nil; try++ {
		u, m := p.u, p.m
		if red = reduce(p.u, p.m, eps); red != nil {
			u, m = red.real, red.m
		}
		var err error
		l, err = idealLatticeBy(u, m, p.Options.MaxIdeals, deadline)
		if errors.Is(err, errDeadline) {
			return tooLate()
		}
		if err == nil && (l.n <= p.Options.SearchIdeals || eps <= 0 || try == maxCoarsen) {
			break
		}
		if err == nil { // searchable, but merging more is faster
			l = nil
			eps *= 4
			continue
		}
		if !errors.Is(err, errTooManyIdeals) {
			return nil, err
		}
		if eps <= 0 || try == maxCoarsen {
			return fallback(fmt.Sprintf("the graph has more than %d downsets even with side branches under %.3g%% of the compute merged more than exact searches", p.Options.MaxIdeals, 100*eps))
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		eps *= 4
	}
	enumerated()
	res := newResources(p.m)
	if states := int64(l.n) * int64(res.live) * int64(min(p.Options.MaxMicroBatches, p.Costs.NumDevices())+1); states > 100_000_000 {
		return fallback(fmt.Sprintf("%d downsets x %d device-count vectors is too many states", l.n, res.live))
	}
	pl, timedOut, err := exactOverM(ctx, p, chain, chains, plans, l, deadline)
	if err != nil {
		return nil, err
	}
	info := &ExactInfo{Units: p.u.n, ReducedUnits: l.units, Downsets: l.n, Epsilon: eps, LowerBoundMs: ms(pl.value), Optimal: red == nil}
	if red == nil {
		info.Epsilon = 0
	}
	pl.Exact = info
	if timedOut > 0 {
		info.Optimal, info.LowerBoundMs = false, 0
		pl.Warnings = append(pl.Warnings, fmt.Sprintf("exact: the search passed its %v time limit at %d micro-batches; from there on the plan is pipedream's", p.Options.TimeLimit, timedOut))
		return pl, nil
	}
	if red == nil {
		return pl, nil
	}
	// The proof: the reduced optimum is a split of the unit graph, so
	// under its value the search on the unit graph's own downsets prunes
	// hard, and either finds a better split or shows there is none.
	if ok, err := p.proveOnUnits(ctx, pl, info, deadline); err != nil {
		return nil, err
	} else if ok {
		return pl, nil
	}
	// When pure sources are what makes the downsets too many, a bound
	// charging each to its consumer's stage, and a split built from it,
	// may close the gap (sources.go).
	ok, srcLB, err := p.sourceBound(ctx, pl, info, deadline)
	if err != nil {
		return nil, err
	} else if ok {
		return pl, nil
	}
	// The certificate: the relaxed optimum at the plan's M bounds every
	// split of the unit graph from below.
	rl := l.reweight(red.relaxU, red.relaxM)
	bounding := progress.From(ctx).Start("exact: bounding the gap", 0)
	lb, err := solveBounded(p, rl, pl.MicroBatches, pl.value, deadline, nil)
	bounding.Done()
	if err == nil && lb == nil && srcLB > 0 || errors.Is(err, errDeadline) && srcLB > 0 {
		lb, err = &solution{value: srcLB}, nil
	}
	switch {
	case errors.Is(err, errDeadline) || err == nil && lb == nil:
		info.LowerBoundMs = 0
		pl.Warnings = append(pl.Warnings, fmt.Sprintf("exact: optimal over the graph reduced from %d to %d units; no time left to bound the loss from merging side branches under %.3g%% of the compute", p.u.n, l.units, 100*eps))
	case err != nil:
		return nil, err
	default:
		lb.value = max(lb.value, srcLB)
		info.LowerBoundMs = ms(lb.value)
		gap := 0.0
		if pl.value > 0 {
			gap = max(0, (pl.value-lb.value)/pl.value)
		}
		info.Gap = math.Round(gap*1e6) / 1e6
		info.Optimal = pl.value <= lb.value*(1+1e-9)
		if !info.Optimal {
			pl.Warnings = append(pl.Warnings, fmt.Sprintf("exact: optimal over the graph reduced from %d to %d units (side branches under %.3g%% of the compute merged); at most %.2f%% above the optimum, whose %s at %d micro-batches is at least %.6g ms", p.u.n, l.units, 100*eps, 100*gap, p.Options.Objective, pl.MicroBatches, ms(lb.value)))
		}
	}
	return pl, nil
}

// exactOverM solves each candidate micro-batch count M on the chain
// (pipedream) and on the downsets, keeping per M the split with the
// better objective, and returns the plan with the shortest simulated step
// (ties: fewer micro-batches), as bestOverM does.
//
// Under the throughput objective a step takes at least M times the
// bottleneck (the slowest stage runs M forwards and backwards, then its
// all-reduce), so once some M' is settled with step T, the search at M
// only needs splits with bottleneck ≤ T/M: a tighter bound that prunes
// hard. The Ms are settled in order of their pipedream steps so T is good
// early. An M whose search finds nothing under T/M cannot beat T, and is
// dropped. timedOut is the first M whose search passed the deadline
// (kept at the pipedream split), or 0.
func exactOverM(ctx context.Context, p *Problem, chain *lattice, chains []*solution, plans []*Plan, l *lattice, deadline time.Time) (pl *Plan, timedOut int, err error) {
	Ms := p.microBatchCandidates()
	plans = append([]*Plan(nil), plans...)
	order := make([]int, len(Ms))
	for i := range order {
		order[i] = i
	}
	stepOf := func(i int) float64 {
		if plans[i] == nil {
			return math.Inf(1)
		}
		return plans[i].step
	}
	sort.SliceStable(order, func(a, b int) bool { return stepOf(order[a]) < stepOf(order[b]) })
	best := math.Inf(1) // shortest step among settled Ms
	task := progress.From(ctx).Start("exact: downsets", int64(len(order)))
	defer task.Done()
	for _, i := range order {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		M, ch := Ms[i], chains[i]
		if timedOut == 0 {
			ub := heuristicUB(p, chain, M)
			if ch != nil {
				ub = min(ub, ch.value)
			}
			byStep := p.Options.Objective == Throughput && best/float64(M) < ub
			if byStep {
				ub = best / float64(M) * (1 + 1e-9)
			}
			s, err := solveBounded(p, l, M, ub, deadline, nil)
			switch {
			case errors.Is(err, errDeadline):
				timedOut = M
			case err != nil:
				return nil, 0, err
			case s != nil && (ch == nil || s.value < ch.value):
				plans[i] = p.report("exact", s)
			case s == nil && byStep:
				plans[i] = nil // every split at M steps longer than best
			}
		}
		if plans[i] != nil {
			best = min(best, plans[i].step)
		}
		task.Add(1)
	}
	if pl = bestPlan(plans); pl == nil {
		return nil, 0, &InfeasibleError{Partitioner: "exact", Detail: p.tried(Ms), Rules: p.ruled()}
	}
	return pl, timedOut, nil
}

// bestPlan is the plan with the shortest simulated step (ties: the
// first, i.e. fewer micro-batches), or nil when there is none. It
// returns a copy, so its warnings can grow.
func bestPlan(plans []*Plan) *Plan {
	var pl *Plan
	for _, x := range plans {
		if x != nil && (pl == nil || x.step < pl.step*(1-1e-12)) {
			pl = x
		}
	}
	if pl == nil {
		return nil
	}
	c := *pl
	c.Warnings = append([]string(nil), pl.Warnings...)
	return &c
}

// proveUnits turns proveOnUnits on; the tests turn it off to check the
// relaxation's certificate on its own.
var proveUnits = true

// proveWork is the work budget (device-count vectors of stages costed,
// as solve counts it) of the search on the unit graph's downsets that
// proves a plan found on the reduced graph optimal: twice what the
// Inception-V3 layer graph of dnn-partitioning needs (151 million, a few
// seconds). Past it, exact bounds the plan by the relaxation instead.
const proveWork = 300_000_000

// proveOnUnits searches the downsets of the unit graph itself, when they
// are at most Options.MaxIdeals, at the plan's M under the plan's value
// (found on the reduced graph, and a split of the unit graph), so every
// split worse than the plan is pruned. The search either returns the
// plan's value or a better split, which then replaces the plan: either
// way the result is the optimum over the unit graph, with no slack from
// the reduction. It reports false (and leaves pl as it was) when the
// downsets are too many or the search passes its work budget or the
// deadline.
func (p *Problem) proveOnUnits(ctx context.Context, pl *Plan, info *ExactInfo, deadline time.Time) (bool, error) {
	if !proveUnits {
		return false, nil
	}
	task := progress.From(ctx).Start("exact: searching the unit graph under the reduced optimum", 0)
	defer task.Done()
	ul, err := idealLatticeBy(p.u, p.m, p.Options.MaxIdeals, deadline)
	if errors.Is(err, errTooManyIdeals) || errors.Is(err, errDeadline) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	work := int64(proveWork)
	s, err := solve(p, ul, pl.MicroBatches, pl.value, deadline, &work)
	if errors.Is(err, errWork) || errors.Is(err, errDeadline) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if s != nil && s.value < pl.value*(1-1e-12) {
		// Within one M, splits are chosen by the objective, as in
		// exactOverM (its simulated step may be longer: with one
		// micro-batch the step is the sum of the stages, the objective
		// their maximum).
		np := p.report("exact", s)
		np.Warnings = append(np.Warnings, pl.Warnings...)
		*pl = *np
	}
	*info = ExactInfo{Units: p.u.n, ReducedUnits: p.u.n, Downsets: ul.n, LowerBoundMs: ms(pl.value), Optimal: true}
	pl.Exact = info
	return true, nil
}

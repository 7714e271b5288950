package partition

import (
	"context"
	"errors"
	"fmt"
	"time"
)

func init() {
	Register("exact", "exact optimum over every contiguous split (downsets of the DAG), device types and replica counts; falls back to pipedream past a size or time limit", func() Partitioner { return exact{} })
}

// exact runs the shared dynamic programme on every downset of the unit
// DAG (Tarnawski et al. 2020), so a stage may be any convex piece of the
// graph rather than a range of one topological order. The pipedream
// optimum bounds the search, which skips any stage or remainder whose
// compute alone exceeds it. Past Options.MaxIdeals downsets or
// Options.TimeLimit it returns the pipedream plan with a warning.
type exact struct{}

func (exact) Partition(ctx context.Context, p *Problem) (*Plan, error) {
	chain := chainLattice(p.u, p.m)
	deadline := time.Now().Add(p.Options.TimeLimit)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	fallback := func(why string) (*Plan, error) {
		pl, err := pipeDream{}.Partition(ctx, p)
		if err != nil {
			return nil, err
		}
		pl.Partitioner = "exact"
		pl.Warnings = append(pl.Warnings, "exact: "+why+"; used the pipedream split instead")
		return pl, nil
	}
	l, err := idealLattice(p.u, p.m, p.Options.MaxIdeals)
	if errors.Is(err, errTooManyIdeals) {
		return fallback(fmt.Sprintf("the graph has more than %d downsets (raise MaxIdeals to search them)", p.Options.MaxIdeals))
	}
	res := newResources(p.m)
	if states := int64(l.n) * int64(res.n) * int64(min(p.Options.MaxMicroBatches, p.Costs.NumDevices())+1); states > 100_000_000 {
		return fallback(fmt.Sprintf("%d downsets x %d device-count vectors is too many states", l.n, res.n))
	}
	timedOut := false
	pl, err := p.bestOverM(ctx, "exact", func(M int) (*solution, error) {
		if timedOut {
			return nil, nil
		}
		ub := heuristicUB(p, chain, M)
		ch, err := solveBounded(p, chain, M, ub, deadline)
		if err == nil && ch != nil {
			ub = min(ub, ch.value)
		}
		s, err := solveBounded(p, l, M, ub, deadline)
		if errors.Is(err, errDeadline) {
			timedOut = true
			return nil, nil
		}
		return s, err
	})
	if timedOut {
		return fallback(fmt.Sprintf("the search passed its %v time limit", p.Options.TimeLimit))
	}
	return pl, err
}

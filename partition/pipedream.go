package partition

import (
	"context"
	"time"
)

func init() {
	Register("pipedream", "PipeDream: dynamic programme over prefixes of one topological order choosing stage boundaries, device types and replica counts", func() Partitioner { return pipeDream{} })
}

// pipeDream cuts the stable topological order of the units into
// contiguous stages (PipeDream, SOSP 2019, generalised to device classes
// and memory): the shared dynamic programme on the chain lattice. Every
// prefix of a topological order is a downset, so every cut is valid.
type pipeDream struct{}

func (pipeDream) Partition(ctx context.Context, p *Problem) (*Plan, error) {
	var pl *Plan
	warn, err := chainSearch(p, func(l *lattice, work *int64) (err error) {
		pl, err = p.bestOverM(ctx, "pipedream", func(M int) (*solution, error) {
			return solveChain(ctx, p, l, M, work)
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	if warn != "" {
		pl.Warnings = append(pl.Warnings, "pipedream: "+warn)
	}
	return pl, nil
}

func solveChain(ctx context.Context, p *Problem, l *lattice, M int, work *int64) (*solution, error) {
	ub := heuristicUB(p, l, M)
	var deadline time.Time
	if d, ok := ctx.Deadline(); ok {
		deadline = d
	}
	return solveBounded(p, l, M, ub, deadline, work)
}

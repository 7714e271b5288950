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
	l := chainLattice(p.u, p.m)
	return p.bestOverM(ctx, "pipedream", func(M int) (*solution, error) {
		return solveChain(ctx, p, l, M)
	})
}

func solveChain(ctx context.Context, p *Problem, l *lattice, M int) (*solution, error) {
	ub := heuristicUB(p, l, M)
	var deadline time.Time
	if d, ok := ctx.Deadline(); ok {
		deadline = d
	}
	return solveBounded(p, l, M, ub, deadline)
}

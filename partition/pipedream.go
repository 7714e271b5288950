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
	var deadline time.Time
	if d, ok := ctx.Deadline(); ok {
		deadline = d
	}
	cp, err := p.chainPass(ctx, "pipedream: micro-batch counts", deadline)
	if err != nil {
		return nil, err
	}
	var pl *Plan
	for _, s := range cp.sols {
		if s == nil {
			continue
		}
		if x := p.report("pipedream", s); pl == nil || x.step < pl.step*(1-1e-12) {
			pl = x
		}
	}
	if pl == nil {
		return nil, &InfeasibleError{Partitioner: "pipedream", Detail: p.tried(p.microBatchCandidates()), Rules: p.ruled()}
	}
	if cp.warn != "" {
		pl.Warnings = append(pl.Warnings, "pipedream: "+cp.warn)
	}
	return pl, nil
}

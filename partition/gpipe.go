package partition

import (
	"context"
	"math"
)

func init() {
	Register("gpipe", "GPipe: topological order split into one stage per device of the largest device class, balanced by compute time", func() Partitioner { return gpipe{} })
}

// gpipe is GPipe's (and torchgpipe's) partitioning: the units in
// topological order cut into as many stages as the largest class has
// devices (fewer when there are fewer units), one device each, minimising
// the largest stage compute. It ignores communication and memory when
// choosing cuts; the plan reports both, and fails when a stage does not
// fit.
type gpipe struct{}

func (gpipe) Partition(ctx context.Context, p *Problem) (*Plan, error) {
	l := chainLattice(p.u, p.m)
	k := 0
	for i, cl := range p.m.classes {
		if len(cl.devices) > len(p.m.classes[k].devices) {
			k = i
		}
	}
	cnt := len(p.m.classes[k].devices)
	s := min(cnt, p.u.n)
	cuts := balancedSplit(l, k, s)
	return p.bestOverM(ctx, "gpipe", func(M int) (*solution, error) {
		st := make([]solStage, s)
		for i := range st {
			st[i] = solStage{from: cuts[i], to: cuts[i+1], class: k, r: 1, pos: i}
		}
		v := evaluate(p, l, M, st)
		if math.IsInf(v, 1) {
			return nil, nil
		}
		return &solution{M: M, value: v, stages: st, lat: l}, nil
	})
}

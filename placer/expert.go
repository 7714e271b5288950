package placer

import (
	"context"
	"math"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

func init() {
	Register("expert", "the hand-written layer-wise split: contiguous topological blocks of balanced compute, one per device", func() Placer { return listPlacer(placeExpert) })
}

// placeExpert is the split practitioners write by hand ("layers 0-11 on GPU 0,
// 12-23 on GPU 1, ..."): the topological order cut into contiguous blocks,
// one per device in index order, each with a share of the compute
// proportional to the device's speed. An op goes to the next device early
// when it does not fit the current one; an op the block's device may not
// run goes to its fastest allowed device. It is the baseline a placer
// should beat when the graph does not fit one device.
//
// The cut counts whole colocation groups: the first op of a group met in
// topological order (in training, the forward op) brings the compute of
// all its members (its gradient and update ops too), and the later
// members follow it without counting again. So a training step is cut on
// the forward order into blocks balanced by forward+backward+update
// compute across all devices, as a hand-written pipeline split is,
// rather than the forward pass alone filling the first third of them.
func placeExpert(ctx context.Context, s *listState) (sim.Placement, error) {
	p := s.p
	t := p.Costs
	// speed[d]: the work (in fastest-device seconds) d does per second.
	speed := make([]float64, s.nd)
	var work float64
	for d := range speed {
		var fast, here float64
		for i := range p.Graph.Ops {
			op := graph.OpID(i)
			if tm := t.OpTime(op, d); !math.IsInf(tm, 1) {
				fast += t.FastestTime(op)
				here += tm
			}
		}
		speed[d] = 1
		if here > 0 {
			speed[d] = fast / here
		}
	}
	var totalSpeed float64
	for _, v := range speed {
		totalSpeed += v
	}
	// classWork: each colocation class's compute, counted where its
	// first op is met.
	classWork := make([]float64, len(s.lim.allowed))
	for i := range p.Graph.Ops {
		f := t.FastestTime(graph.OpID(i))
		work += f
		classWork[s.lim.class[i]] += f
	}
	// Block k ends where the cumulative work reaches bound[k].
	bound := make([]float64, s.nd)
	var acc float64
	for d, v := range speed {
		acc += v
		bound[d] = work * acc / totalSpeed
	}
	cur := 0
	var done float64
	for i, op := range p.Order {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return sim.Placement{}, err
			}
		}
		f := 0.0
		if c := s.lim.class[op]; s.classDev[c] < 0 {
			f = classWork[c]
		}
		for cur < s.nd-1 && done+f/2 > bound[cur] {
			cur++
		}
		done += f
		d := -1
		if s.eligible(op, cur) && s.fits(op, cur, s.startOn(op, cur)) {
			d = cur
		} else if cands := s.candidates(op); len(cands) == 1 || !s.lim.allows(op, cur) || s.apart.clash(op, cur) {
			// Pinned, colocated elsewhere, not runnable here or kept apart
			// from what is here: its own fastest allowed device, without
			// ending the block.
			for _, c := range cands {
				if s.fits(op, c, s.startOn(op, c)) && (d < 0 || t.OpTime(op, c) < t.OpTime(op, d)) {
					d = c
				}
			}
		} else {
			// Out of memory: end the block early.
			for c := cur + 1; c < s.nd && d < 0; c++ {
				if s.eligible(op, c) && s.fits(op, c, s.startOn(op, c)) {
					d, cur = c, c
				}
			}
		}
		if d < 0 {
			return sim.Placement{}, s.noRoom(op)
		}
		s.schedule(op, d, s.startOn(op, d))
	}
	return s.placement(), nil
}

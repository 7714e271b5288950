package placer

import (
	"context"
	"slices"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

func init() {
	Register("heft", "HEFT: ops by upward rank, each on the device where it finishes first, filling idle gaps", func() Placer { return listPlacer(placeHEFT) })
}

// placeHEFT is Topcuoglu et al.'s Heterogeneous Earliest Finish Time, with
// memory: ops are taken in decreasing upward rank,
//
//	rank(i) = mean time of i + max over successors j of (mean transfer of i's
//	          output to j + rank(j)),
//
// means taken over the devices i may use and over the ordered pairs of
// distinct devices; each op goes to the eligible device (pins, device
// types, colocation, memory as m-ETF tracks it) where it finishes
// earliest, starting in the first idle gap long enough after its inputs
// arrive. Ties go to the lower device index; equal ranks to the earlier
// topological position, so a predecessor always comes first.
func placeHEFT(ctx context.Context, s *listState) (sim.Placement, error) {
	p := s.p
	order := heftOrder(p, s)
	busy := make([]*timeline, s.nd)
	for d := range busy {
		busy[d] = newTimeline()
	}
	start := make([]float64, len(p.Graph.Ops))
	for i, op := range order {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return sim.Placement{}, err
			}
		}
		bestDev, bestStart, bestEnd := -1, 0.0, 0.0
		bestCost := 0.0 // finish plus the soft rules' penalty
		for _, d := range s.candidates(op) {
			dur := p.Costs.OpTime(op, d)
			st := busy[d].earliest(s.dataReady(op, d), dur)
			cost := st + dur
			if p.Prefer != nil {
				cost += p.Penalty(op, d)
			}
			if bestDev >= 0 && cost >= bestCost {
				continue
			}
			if !s.fits(op, d, st) {
				continue
			}
			bestDev, bestStart, bestEnd, bestCost = d, st, st+dur, cost
		}
		if bestDev < 0 {
			return sim.Placement{}, s.noRoom(op)
		}
		busy[bestDev].insert(bestStart, bestEnd)
		start[op] = bestStart
		s.schedule(op, bestDev, bestStart)
	}
	pl := s.placement()
	// The simulator runs each device's ready ops by priority: order them
	// by their planned start, so gap insertions take effect.
	// (slices.SortStableFunc is sort.SliceStable's algorithm, the cmp
	// negative exactly where its less was true, without reflection.)
	byStart := slices.Clone(p.Order)
	slices.SortStableFunc(byStart, func(a, b graph.OpID) int { return lessCmp(start[a] < start[b]) })
	for i, op := range byStart {
		pl.Priority[op] = int32(i)
	}
	return pl, nil
}

// heftOrder is the ops by decreasing upward rank, ties by topological
// position.
func heftOrder(p *Problem, s *listState) []graph.OpID {
	g, t := p.Graph, p.Costs
	n := len(g.Ops)
	lat, perByte := meanLink(p)
	rank := make([]float64, n)
	for i := n - 1; i >= 0; i-- {
		op := p.Order[i]
		var tail float64
		for _, out := range g.Ops[op].Outputs {
			b := g.Tensors[out].Bytes()
			comm := 0.0
			if b > 0 {
				comm = lat + float64(b)*perByte
			}
			for _, c := range g.Tensors[out].Consumers {
				tail = max(tail, comm+rank[c])
			}
		}
		for _, succ := range p.Adj.Succs(op) {
			tail = max(tail, rank[succ]) // control edges carry no data
		}
		var sum float64
		devs := s.lim.devices(op)
		for _, d := range devs {
			sum += t.OpTime(op, d)
		}
		rank[op] = sum/float64(len(devs)) + tail
	}
	order := slices.Clone(p.Order)
	slices.SortStableFunc(order, func(a, b graph.OpID) int { return lessCmp(rank[a] > rank[b]) })
	return order
}

// lessCmp turns a less result into a cmp one for the stable sorts, which
// only ask whether cmp is negative.
func lessCmp(less bool) int {
	if less {
		return -1
	}
	return 0
}

// meanLink is the mean latency and seconds per byte over the ordered
// pairs of distinct devices (zero on one device).
func meanLink(p *Problem) (lat, perByte float64) {
	nd := p.Costs.NumDevices()
	if nd < 2 {
		return 0, 0
	}
	const probe = 1 << 30
	for a := 0; a < nd; a++ {
		for b := 0; b < nd; b++ {
			if a == b {
				continue
			}
			l := p.Costs.Cluster.Path(a, b)
			lat += l.Latency
			perByte += p.Costs.Transfer(a, b, probe)/probe - l.Latency/probe
		}
	}
	pairs := float64(nd * (nd - 1))
	return lat / pairs, perByte / pairs
}

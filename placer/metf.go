package placer

import (
	"context"
	"github.com/opplace/opplace/internal/minheap"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

func init() {
	Register("m-etf", "Baechi's memory-constrained earliest-task-first list scheduling", func() Placer { return listPlacer(etf) })
}

// etf is Baechi's m-ETF: repeatedly start the (ready op, device) pair
// with the earliest start time, max(device free, inputs arrived), ties by
// topological position then device index. A device is eligible only if
// the op may run there (pins, device types, colocation) and the op's new
// resident inputs, received inputs, outputs and scratch fit there at the
// instants the simulator would allocate them. Inputs arrive and memory
// is held and freed as in the simulator, on the predicted times (see
// listState.dataReady and listState.fits), and the placement is checked
// by simulating it (placeFitting).
//
// The search costs about O(n·d·log n) for n ops on d devices: each device
// keeps its ready ops in two heaps, those whose data arrives after the
// device is free (by arrival, then position) and those already waiting
// (by position); scheduled or no-longer-eligible ops are dropped lazily.
// An op's data-ready time on a device only grows as other ops' transfers
// fill the channels (see listState.dataReady), so a heap key is a lower
// bound, refreshed when its entry comes to the top: the top after
// refreshing is the true minimum.
func etf(ctx context.Context, s *listState) (sim.Placement, error) {
	p := s.p
	later := make([]*minheap.Heap[entry], s.nd)   // data arrives after the device is free
	waiting := make([]*minheap.Heap[entry], s.nd) // data already there: by position
	for d := range later {
		later[d], waiting[d] = minheap.New(less), minheap.New(less)
	}
	var skipped []entry
	push := func() {
		for _, op := range s.fresh {
			for _, d := range s.candidates(op) {
				later[d].Push(entry{s.dataReady(op, d), s.pos[op], op})
			}
		}
		s.fresh = s.fresh[:0]
	}
	// best finds device d's fitting op with the earliest start.
	best := func(d int) (graph.OpID, float64) {
		for later[d].Len() > 0 && later[d].Peek().key <= s.devFree[d] {
			e := later[d].Pop()
			waiting[d].Push(entry{0, e.pos, e.op})
		}
		for _, h := range []*minheap.Heap[entry]{waiting[d], later[d]} {
			skipped = skipped[:0]
			found := graph.OpID(-1)
			start := 0.0
			for h.Len() > 0 {
				e := h.Peek()
				if s.dev[e.op] >= 0 || !s.eligible(e.op, d) {
					h.Pop() // scheduled, or its class went elsewhere
					continue
				}
				ready := s.dataReady(e.op, d)
				switch {
				case h == waiting[d] && ready > s.devFree[d]:
					h.Pop() // its channels filled up: it waits for data again
					later[d].Push(entry{ready, e.pos, e.op})
					continue
				case h == later[d] && ready > e.key:
					h.Pop()
					h.Push(entry{ready, e.pos, e.op})
					continue
				}
				if at := max(ready, s.devFree[d]); s.fits(e.op, d, at) {
					found, start = e.op, at
					break
				}
				skipped = append(skipped, h.Pop())
			}
			for _, e := range skipped {
				h.Push(e)
			}
			if found >= 0 {
				return found, start
			}
		}
		return -1, 0
	}
	push()
	for step := 0; step < len(p.Graph.Ops); step++ {
		if step%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return sim.Placement{}, err
			}
		}
		bestOp, bestDev, bestStart := graph.OpID(-1), -1, 0.0
		for d := 0; d < s.nd; d++ {
			op, start := best(d)
			if op < 0 {
				continue
			}
			// The soft rules' penalty weighs on the device choice; it
			// is zero without them, leaving plain earliest-start order.
			if bestOp < 0 || start+p.Penalty(op, d) < bestStart+p.Penalty(bestOp, bestDev) ||
				start == bestStart && p.Penalty(op, d) == p.Penalty(bestOp, bestDev) && s.pos[op] < s.pos[bestOp] {
				bestOp, bestDev, bestStart = op, d, start
			}
		}
		if bestOp < 0 {
			return sim.Placement{}, s.stuck(nil)
		}
		s.schedule(bestOp, bestDev, bestStart)
		push()
	}
	return s.placement(), nil
}

// entry is a ready op keyed for one device's heap.
type entry struct {
	key float64
	pos int32
	op  graph.OpID
}

// less orders a device's heap entries by key, then topological position.
func less(a, b entry) bool { return a.key < b.key || a.key == b.key && a.pos < b.pos }

package placer

import (
	"context"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

func init() {
	Register("m-topo", "Baechi's m-TOPO: fill devices in topological order, each up to an even share of the model's memory", func() Placer { return listPlacer(placeTopo) })
}

// placeTopo is Baechi's m-TOPO: walk a topological order and fill the devices
// one at a time, moving on once a device holds its share, (memory the
// whole model places) / (devices) + (largest op's working set). An op the
// current device may not run, or whose memory does not fit there at that
// moment, goes to the next device that takes it; the last device has no
// share cap. It ignores time entirely: the balanced-memory baseline.
func placeTopo(ctx context.Context, s *listState) (sim.Placement, error) {
	p := s.p
	var total, largest int64
	for i := range p.Graph.Tensors {
		t := &p.Graph.Tensors[i]
		if t.Producer == graph.NoOp && len(t.Consumers) > 0 {
			total += t.Bytes()
		}
	}
	for i := range p.Graph.Ops {
		op := graph.OpID(i)
		total += p.Costs.OutputBytes(op) + p.Costs.TempBytes(op)
		largest = max(largest, p.Costs.WorkingSet(op))
	}
	share := total/int64(s.nd) + largest
	placed := make([]int64, s.nd) // memory placed so far, never freed
	cur := 0
	for i, op := range p.Order {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return sim.Placement{}, err
			}
		}
		cands := s.candidates(op)
		d := -1
		for pass := 0; pass < 2 && d < 0; pass++ {
			for _, c := range cands {
				if pass == 0 && c < cur {
					continue // pass 0 fills forward from the current device
				}
				need := s.need(op, c)
				if pass == 0 && c < s.nd-1 && placed[c]+need > share {
					if c == cur {
						cur++
					}
					continue
				}
				if s.fits(op, c, s.startOn(op, c)) {
					d = c
					break
				}
				if pass == 0 && c == cur && cur < s.nd-1 {
					cur++
				}
			}
		}
		if d < 0 {
			return sim.Placement{}, s.noRoom(op)
		}
		placed[d] += s.need(op, d)
		s.schedule(op, d, s.startOn(op, d))
	}
	return s.placement(), nil
}

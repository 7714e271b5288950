package sim

import (
	"cmp"
	"slices"

	"github.com/opplace/opplace/graph"
)

// ComputeBound is a lower bound on the step Run finds for plan p,
// without running it. Each op's runs are timed as Run times them (its
// share of the micro-batch, of a tensor-parallel split and of a ZeRO
// update, and the launch every run pays), and each op is released no
// earlier than the longest path of single runs to it (every op at its
// own speed, nothing waiting, transfers free): a device still holding
// the work released at r or later ends no earlier than r plus that
// work. So the bound is, over devices and release times r, the largest
// r + the device's work released at r or later. At r = 0 it is the
// busiest device's compute; in a pipeline the later stages also wait
// for the first micro-batch to reach them and the first stages for its
// gradient to come back (the fill and drain of the schedule).
// Transfers, collectives, syncs, recomputation and idle time are left
// out, which only lengthen the step. It costs a pass over the ops and
// a sort per device, where Run costs one pass per micro-batch and more:
// a search can skip simulating a plan whose bound is no shorter than a
// plan it has.
func (sm *Simulator) ComputeBound(p *Plan) (float64, error) {
	t := sm.t
	g := t.Graph
	nd := t.NumDevices()
	opStage, stages, err := p.normalise(g, nd)
	if err != nil {
		return 0, err
	}
	f := sm.facts()
	M := p.microBatches()
	tp := tensorDegree(stages, nd)
	n := len(g.Ops)
	one := make([]float64, n)  // one run
	work := make([]float64, n) // every run
	for op := range g.Ops {
		d := p.Device[op]
		one[op] = runTime(f, t, p.Split, graph.OpID(op), d, tp[d], &stages[opStage[op]], M)
		work[op] = one[op]
		if f.perMB[op] {
			work[op] *= float64(M)
		}
	}
	release := make([]float64, n)
	for _, op := range sm.order {
		var r float64
		for _, in := range f.inputs[op] {
			if q := g.Tensors[in].Producer; q != graph.NoOp {
				r = max(r, release[q]+one[q])
			}
		}
		for _, c := range f.ctrl[op] {
			r = max(r, release[c]+one[c])
		}
		release[op] = r
	}
	ops := make([][]graph.OpID, nd)
	for op := range g.Ops {
		if work[op] > 0 {
			d := p.Device[op]
			ops[d] = append(ops[d], graph.OpID(op))
		}
	}
	var most float64
	for _, list := range ops {
		// Latest release first: the work released at or after each.
		slices.SortFunc(list, func(a, b graph.OpID) int { return cmp.Compare(release[b], release[a]) })
		var after float64
		for _, op := range list {
			after += work[op]
			most = max(most, release[op]+after)
		}
	}
	return most, nil
}

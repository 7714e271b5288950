package sim

import (
	"cmp"
	"math"
	"slices"

	"github.com/opplace/opplace/graph"
)

// ComputeBound is a lower bound on the step Run finds for plan p,
// without running it. Each op's runs are timed as Run times them (its
// share of the micro-batch, of a tensor-parallel split and of a ZeRO
// update, the launch every run pays, and the tensor-parallel syncs that
// stop its kernel), and each op is released no earlier than the longest
// path of single runs to it (every op at its own speed, nothing waiting,
// transfers free): a device still holding the work released at r or
// later ends no earlier than r plus that work. So the bound is, over
// devices and release times r, the largest r + the device's work
// released at r or later. At r = 0 it is the busiest device's compute;
// in a pipeline the later stages also wait for the first micro-batch to
// reach them and the first stages for its gradient to come back (the
// fill and drain of the schedule).
//
// A recomputing stage's device also runs each segment's forward again
// per micro-batch (every saved activation is dropped after its forward
// readers, which the device runs in an earlier slot than any backward
// op): that work counts as released with the segment's first backward
// reader. And a tensor-parallel group's first device runs its syncs one
// after another on its stream, the first no earlier than the first op
// that syncs has run once: the step is no shorter than that release
// plus every sync on the stream.
//
// And each device runs its slots of the stages' schedule (SlotOrder) one
// after another, so the drain of a pipeline is counted as slotBound
// counts it.
//
// Transfers, collectives other than tensor-parallel syncs, and idle
// time are left out, which only lengthen the step. It costs a pass over
// the ops and a sort per device, where Run costs one pass per
// micro-batch and more: a search can skip simulating a plan whose bound
// is no shorter than a plan it has.
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
	// One micro-batch of p's size: its runs and syncs as Run prices
	// them, its recomputed segments as Run forms them.
	s := newState(t, f, p, opStage, stages, 1)
	n := len(g.Ops)
	one := make([]float64, n)  // one run
	work := make([]float64, n) // every run
	for op := range g.Ops {
		id := graph.OpID(op)
		d := p.Device[op]
		one[op] = s.computeTime(id, d)
		if s.innerSync != nil {
			one[op] += s.innerSync[op]
		}
		work[op] = one[op]
		if f.perMB[op] {
			work[op] *= float64(M)
		}
		if s.innerLast != nil {
			work[op] += s.innerLast[op]
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
	perRun := make([]float64, n) // one run and the recomputation before it
	copy(perRun, one)
	var segReaders [][]graph.OpID
	if rc := s.rc; rc != nil {
		segReaders = rc.backwardReaders(s)
		for sg, readers := range segReaders {
			first := graph.NoOp
			for _, c := range readers {
				if first == graph.NoOp || release[c] < release[first] {
					first = c
				}
			}
			if first != graph.NoOp {
				work[first] += rc.time[sg] * float64(M)
				perRun[first] += rc.time[sg]
			}
		}
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
	most = max(most, s.slotBound(p.Schedule, one, perRun, segReaders))
	return max(most, s.streamBound(release, one, M)), nil
}

// streamBound is, over the tensor-parallel streams, the earliest a
// stream's first sync can start (its op's release plus one run) plus
// every sync the stream runs in a step of M micro-batches; s simulates
// one micro-batch of the step's size.
func (s *state) streamBound(release, one []float64, M int) float64 {
	if s.syncLeft == nil {
		return 0
	}
	total := make([]float64, s.nd)
	first := make([]float64, s.nd)
	for d := range first {
		first[d] = math.Inf(1)
	}
	for op, syncs := range s.split.Syncs {
		d := s.dev[op]
		if s.tp[d] < 2 {
			continue
		}
		id := graph.OpID(op)
		group := s.stages[s.opStage[op]].Replicas[0]
		for _, y := range syncs {
			if s.within(id, y) {
				continue // inside the kernel: in the op's runs
			}
			_, dur := s.syncCost(id, y, group)
			if s.perMB[op] && !s.syncOnce(id, y) {
				dur *= float64(M)
			}
			total[d] += dur
			first[d] = min(first[d], release[op]+one[op])
		}
	}
	var most float64
	for d, x := range total {
		if x > 0 {
			most = max(most, first[d]+x)
		}
	}
	return most
}

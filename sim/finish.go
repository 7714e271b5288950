package sim

import (
	"math"
	"slices"

	"github.com/opplace/opplace/graph"
)

// finish fills in what the step's events leave out of the result: each
// device's memory peak (and, when recorded, its memory over the step),
// the transfers and collectives in order, the stages' figures and the
// figures of the devices that mirror another.
func (s *state) finish() {
	res := s.res
	s.finishMemory()
	slices.SortStableFunc(res.Transfers, func(a, b Transfer) int {
		if c := compareTimes(a.Start, b.Start); c != 0 {
			return c
		}
		switch {
		case a.Tensor != b.Tensor:
			return int(a.Tensor - b.Tensor)
		case a.MicroBatch != b.MicroBatch:
			return a.MicroBatch - b.MicroBatch
		}
		return a.To - b.To
	})
	slices.SortStableFunc(res.Collectives, func(a, b Collective) int {
		if c := compareTimes(a.Start, b.Start); c != 0 {
			return c
		}
		return a.Devices[0] - b.Devices[0]
	})
	for _, t := range res.Transfers {
		res.TransferBytes += t.Bytes
	}
	for _, c := range res.Collectives {
		res.CollectiveBytes += c.Bytes
	}
	// Per-stage figures from the first replica's devices.
	compute := make([]float64, s.nd)
	update := make([]float64, s.nd)
	for op := range s.g.Ops {
		d := s.dev[op]
		dur := s.computeTime(graph.OpID(op), d) * float64(s.tasksOf(graph.OpID(op)))
		if s.innerSync != nil {
			dur += s.innerSync[op]*float64(s.tasksOf(graph.OpID(op))) + s.innerLast[op]
		}
		if s.perMB[op] {
			compute[d] += dur
		} else {
			update[d] += dur
		}
	}
	if s.rc != nil {
		for d, x := range s.rc.extra {
			compute[d] += x
		}
	}
	var busy float64
	for st := range s.stages {
		sr := &res.Stages[st]
		sr.Start = math.Inf(1)
		for _, d := range s.stages[st].Replicas[0] {
			sr.Compute = max(sr.Compute, compute[d])
			sr.Update = max(sr.Update, update[d])
			sr.PeakMemory = max(sr.PeakMemory, res.PeakMemory[d])
			if s.syncSpans != nil {
				sr.TensorSyncExposed = max(sr.TensorSyncExposed, uncovered(s.syncSpans[d], s.busySpans[d]))
			}
		}
		busy += sr.Compute + sr.Update
	}
	for op := range s.g.Ops {
		sr := &res.Stages[s.opStage[op]]
		sr.Start = min(sr.Start, res.Start[op])
		sr.End = max(sr.End, res.End[op])
	}
	for st := range res.Stages {
		if math.IsInf(res.Stages[st].Start, 1) {
			res.Stages[st].Start = 0
		}
	}
	if len(s.stages) > 1 && res.Step > 0 {
		res.Bubble = 1 - busy/(float64(len(s.stages))*res.Step)
	}
	// A tensor-parallel group's members mirror its first device, and
	// replicas mirror their first replica's devices.
	for _, st := range s.stages {
		if st.Tensor < 2 {
			continue
		}
		f := st.Replicas[0][0]
		for _, d := range st.Replicas[0][1:] {
			res.PeakMemory[d], res.ResidentMemory[d], res.Busy[d] = res.PeakMemory[f], res.ResidentMemory[f], res.Busy[f]
			if res.Memory != nil {
				res.Memory[d] = res.Memory[f]
			}
		}
	}
	for _, st := range s.stages {
		for _, rep := range st.Replicas[1:] {
			for i, d := range rep {
				f := st.Replicas[0][i]
				res.PeakMemory[d], res.ResidentMemory[d], res.Busy[d] = res.PeakMemory[f], res.ResidentMemory[f], res.Busy[f]
				if res.Memory != nil {
					res.Memory[d] = res.Memory[f]
				}
			}
		}
	}
}

// compareTimes is -1 when time a is before b, 1 when after, else 0.
func compareTimes(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

package sim

import (
	"github.com/opplace/opplace/graph"
)

// slots are the stages' schedules as each device follows them (see
// schedule).
type slots struct {
	nslots    int
	slot      []int32 // per task
	remaining []int32 // per device*nslots+slot: tasks left in the slot
	cur       []int32 // per device: the slot it runs
	devLeft   []int32 // tasks left per device

	// Per stage*M+mb: whether the micro-batch started on the stage and
	// how many of its tasks there are left; live[st] counts the stage's
	// micro-batches started and not finished.
	mbStarted []bool
	mbLeft    []int32
	live      []int
}

// schedule numbers every stage's slots and assigns each task its slot.
func (s *state) schedule(sched Schedule) {
	S, M := len(s.stages), s.M
	var slotIndex [][]int32
	slotIndex, s.nslots = slotOrders(sched, s.training, S, M)
	nd := s.nd
	s.slot = make([]int32, len(s.taskOp))
	s.remaining = make([]int32, nd*s.nslots)
	s.cur = make([]int32, nd)
	s.devLeft = make([]int32, nd)
	s.mbStarted = make([]bool, S*M)
	s.mbLeft = make([]int32, S*M)
	s.live = make([]int, S)
	for op := range s.g.Ops {
		st, phase := s.opStage[op], s.g.Ops[op].Phase
		idx := slotIndex[st]
		for k := s.taskBase[op]; k < s.taskBase[op+1]; k++ {
			mb := int(k - s.taskBase[op])
			sl := slotOf(phase, s.training, idx, M, s.nslots, mb)
			s.slot[k] = sl
			d := s.dev[op]
			s.remaining[d*s.nslots+int(sl)]++
			s.devLeft[d]++
			if s.perMB[op] {
				s.mbLeft[st*M+mb]++
			}
		}
	}
	for d := 0; d < nd; d++ {
		s.advance(d)
	}
}

// slotOrders is each of S stages' order of its slots (SlotOrder) in a
// step of M micro-batches, and how many slots a device runs: M, or 2M
// when training.
func slotOrders(sched Schedule, training bool, S, M int) ([][]int32, int) {
	orders := make([][]int32, S)
	for i := range orders {
		orders[i] = SlotOrder(sched, training, S, i, M)
	}
	if training {
		return orders, 2 * M
	}
	return orders, M
}

// slotOf is the slot of a run for micro-batch mb of an op of the given
// phase, in its stage's order idx of M micro-batches and nslots slots:
// an update runs in the last slot, a backward op in its micro-batch's
// backward pass, every other op in its forward pass (an op run once per
// step, with the first micro-batch's).
func slotOf(phase graph.Phase, training bool, idx []int32, M, nslots, mb int) int32 {
	const fwd, bwd = 0, 1
	switch {
	case phase == graph.Update:
		return int32(nslots - 1)
	case phase == graph.Backward && training:
		return idx[bwd*M+mb]
	default:
		return idx[fwd*M+mb]
	}
}

// advance moves device d's slot past the slots it has finished.
func (sl *slots) advance(d int) {
	for int(sl.cur[d]) < sl.nslots-1 && sl.remaining[d*sl.nslots+int(sl.cur[d])] == 0 {
		sl.cur[d]++
	}
}

// SlotOrder is the order stage i of S runs its slots in: idx[kind*M+mb]
// is the slot of micro-batch mb's forward (kind 0) or backward (kind 1)
// pass. Inference runs the M forwards; GPipe all forwards, then all
// backwards; 1F1B min(S-i-1, M) warm-up forwards, then one forward and
// one backward in turn, then the backwards left. It is the one schedule
// of the step: the simulator runs it, and the pipeline partitioners'
// analytic estimate (package partition) follows it.
func SlotOrder(sched Schedule, training bool, S, i, M int) []int32 {
	const fwd, bwd = 0, 1
	idx := make([]int32, 2*M)
	k := int32(0)
	put := func(kind, mb int) { idx[kind*M+mb] = k; k++ }
	switch {
	case !training:
		for m := 0; m < M; m++ {
			put(fwd, m)
		}
	case sched == GPipe:
		for m := 0; m < M; m++ {
			put(fwd, m)
		}
		for m := 0; m < M; m++ {
			put(bwd, m)
		}
	default:
		w := min(S-i-1, M)
		for m := 0; m < w; m++ {
			put(fwd, m)
		}
		for j := 0; j < M-w; j++ {
			put(fwd, w+j)
			put(bwd, j)
		}
		for m := M - w; m < M; m++ {
			put(bwd, m)
		}
	}
	return idx
}

// Pass is one pass of a micro-batch through a stage: its forward or its
// backward.
type Pass struct {
	Backward   bool
	MicroBatch int
}

// Passes is SlotOrder as the sequence of passes stage i of S runs, in
// order (M forwards, and M backwards when training).
func Passes(sched Schedule, training bool, S, i, M int) []Pass {
	idx := SlotOrder(sched, training, S, i, M)
	n := M
	if training {
		n = 2 * M
	}
	out := make([]Pass, n)
	for kind := 0; kind*M < n; kind++ {
		for mb := 0; mb < M; mb++ {
			out[idx[kind*M+mb]] = Pass{Backward: kind == 1, MicroBatch: mb}
		}
	}
	return out
}

// InFlight is the most micro-batches whose activations stage i of S
// holds at once under the schedule: those whose forward it ran and whose
// backward it has not (one when not training: a forward frees its
// inputs). A stage's activation memory is this many micro-batches of its
// stash, as the simulator's schedule lays them out.
func InFlight(sched Schedule, training bool, S, i, M int) int {
	if !training {
		return min(M, 1)
	}
	live, most := 0, 0
	for _, p := range Passes(sched, training, S, i, M) {
		if p.Backward {
			live--
		} else {
			live++
			most = max(most, live)
		}
	}
	return most
}

package sim

import (
	"slices"

	"github.com/opplace/opplace/graph"
)

// tensorSyncs are the books of tensor parallelism: split is the plan's;
// tp[d] the degree of d's group (1: none); syncLeft[inst] counts the
// syncs a finished instance still waits for before its readers may use
// it (nil when no group syncs). innerSync[op] is the time of the syncs
// on tensors inside op (a fused kernel's intermediates) for one of its
// runs, which its task time includes, and innerLast[op] that of those on
// a tensor with one instance per step, which only its last run's
// includes (nil when there are none).
type tensorSyncs struct {
	split     *TensorSplit
	tp        []int
	syncLeft  []int32
	innerSync []float64
	innerLast []float64
	// busySpans[d] and syncSpans[d] are when a group's first device d
	// computed and when its stream synced, each in time order, for
	// TensorSyncExposed.
	busySpans, syncSpans [][]span
}

// setTensorSyncs sets up the tensor parallelism of s's plan, whose
// split is split, once its stages and instances are numbered.
func (s *state) setTensorSyncs(split *TensorSplit) {
	s.split, s.tp = split, tensorDegree(s.stages, s.nd)
	if split != nil && split.Syncs != nil && slices.ContainsFunc(s.tp, func(t int) bool { return t > 1 }) {
		s.syncLeft = make([]int32, len(s.instT))
		s.busySpans, s.syncSpans = make([][]span, s.nd), make([][]span, s.nd)
		s.innerSyncTimes()
		s.reserveSyncs()
	}
}

// reserveSyncs sizes the lists a step of tensor-parallel syncs fills
// (the collectives, and each first device's busy and sync spans) to what
// they will hold, so the hundreds of thousands of syncs of a large
// model's step are not copied as their lists grow.
func (s *state) reserveSyncs() {
	runs := make([]int, s.nd)
	syncs := make([]int, s.nd)
	var all int
	for op := range s.g.Ops {
		d := s.dev[op]
		if s.tp[d] < 2 {
			continue
		}
		n := s.tasksOf(graph.OpID(op))
		runs[d] += n
		for _, y := range s.split.Syncs[op] {
			k := n
			if s.syncOnce(graph.OpID(op), y) {
				k = 1
			}
			all += k
			if !s.within(graph.OpID(op), y) {
				syncs[d] += k
			}
		}
	}
	for d := range runs {
		if runs[d] > 0 {
			s.busySpans[d] = make([]span, 0, runs[d])
			s.syncSpans[d] = make([]span, 0, syncs[d])
		}
	}
	s.res.Collectives = make([]Collective, 0, all)
}

// span is an interval of simulated time.
type span struct{ start, end float64 }

// uncovered is the length of syncs not covered by busy, both sorted by
// start and each free of overlaps within itself.
func uncovered(syncs, busy []span) float64 {
	var out float64
	j := 0
	for _, y := range syncs {
		left := y.end - y.start
		for j < len(busy) && busy[j].end <= y.start {
			j++
		}
		for k := j; k < len(busy) && busy[k].start < y.end; k++ {
			left -= min(busy[k].end, y.end) - max(busy[k].start, y.start)
		}
		out += max(left, 0)
	}
	return out
}

// runSyncTime is how long one run of op on device d syncs, its syncs
// run once per step left out.
func (s *state) runSyncTime(op graph.OpID, d int) float64 {
	if s.syncLeft == nil || s.tp[d] < 2 {
		return 0
	}
	group := s.stages[s.opStage[op]].Replicas[0]
	var t float64
	for _, y := range s.split.Syncs[op] {
		if !s.syncOnce(op, y) {
			_, dur := s.syncCost(op, y, group)
			t += dur
		}
	}
	return t
}

// syncCost is the bytes one run of op moves in sync y over group (its
// stage's first replica), and how long that takes, priced once per stage
// and size (GroupCollectives).
func (s *state) syncCost(op graph.OpID, y Sync, group []int) (int64, float64) {
	b := ceilDiv(y.Bytes, s.syncDiv(op, y))
	st := s.opStage[op]
	if s.syncTimes == nil {
		s.syncTimes = make([]*GroupCollectives, len(s.stages))
	}
	if s.syncTimes[st] == nil {
		s.syncTimes[st] = NewGroupCollectives(s.c, group)
	}
	return b, s.syncTimes[st].Time(y.Kind, b)
}

// innerSyncTimes works out innerSync and innerLast: the syncs on tensors
// an op computes but does not write, which stop its kernel.
func (s *state) innerSyncTimes() {
	for op, syncs := range s.split.Syncs {
		d := s.dev[op]
		if s.tp[d] < 2 {
			continue
		}
		group := s.stages[s.opStage[op]].Replicas[0]
		for _, y := range syncs {
			if !s.within(graph.OpID(op), y) {
				continue
			}
			if s.innerSync == nil {
				s.innerSync = make([]float64, len(s.g.Ops))
				s.innerLast = make([]float64, len(s.g.Ops))
			}
			_, t := s.syncCost(graph.OpID(op), y, group)
			if s.syncOnce(graph.OpID(op), y) {
				s.innerLast[op] += t
			} else {
				s.innerSync[op] += t
			}
		}
	}
}

// within reports whether sync y runs inside op's kernel.
func (s *state) within(op graph.OpID, y Sync) bool {
	return y.Within || !slices.Contains(s.g.Ops[op].Outputs, y.Tensor)
}

// syncOnce reports whether sync y of op runs once per step, with op's
// last run: op runs per micro-batch but y's tensor has one instance per
// step (a weight gradient the runs sum into, reduced once it is whole).
func (s *state) syncOnce(op graph.OpID, y Sync) bool {
	return s.perMB[op] && s.perStep[y.Tensor]
}

// syncDiv is the share of its tensor sync y of op moves in one run, as
// 1/div: a micro-batch's and replica's for an op run per micro-batch,
// the whole tensor for a sync run once per step.
func (s *state) syncDiv(op graph.OpID, y Sync) int64 {
	if !s.perMB[op] || s.perStep[y.Tensor] {
		return 1
	}
	return int64(s.replicas[s.devStage[s.dev[op]]] * s.div)
}

// divided reports whether device d holds 1/tp of tensor t: d is in a
// tensor-parallel group and the split divides t.
func (s *state) divided(t graph.TensorID, d int) bool {
	return s.tp[d] > 1 && s.split != nil && s.split.Divided != nil && s.split.Divided[t]
}

// recordInnerSyncs lists run mb's syncs inside op, the last ending when
// the op does, among the step's collectives.
func (s *state) recordInnerSyncs(op graph.OpID, st, mb int, end float64) {
	inner := s.innerSync[op]
	last := mb == s.tasksOf(op)-1
	if last {
		inner += s.innerLast[op]
	}
	if inner == 0 {
		return
	}
	group := s.stages[st].Replicas[0]
	start := end - inner
	for _, y := range s.split.Syncs[op] {
		if !s.within(op, y) || (s.syncOnce(op, y) && !last) {
			continue
		}
		b, dur := s.syncCost(op, y, group)
		s.recordSync(st, y, b, start, start+dur)
		start += dur
	}
}

// recordSync lists a sync of b bytes by stage st's first group, from
// start to end, among the step's collectives and the stage's sums.
func (s *state) recordSync(st int, y Sync, b int64, start, end float64) {
	s.res.Collectives = append(s.res.Collectives, Collective{Kind: y.Kind, Stage: st, Devices: s.stages[st].Replicas[0], Bytes: b, Start: start, End: end, Tensor: y.Tensor})
	sr := &s.res.Stages[st]
	sr.TensorSync += end - start
	sr.TensorSyncBytes += b
}

// launchSyncs starts the tensor-parallel syncs op's group runs on out's
// finished instance inst, one after another on d's tensor-parallel stream,
// and reports whether there are any. The device goes on computing: only
// out's readers wait for the last sync, as Megatron-LM's asynchronous
// tensor-parallel all-reduce lets the weight gradient's GEMM run while
// the input gradient is reduced. A sync on a tensor with one instance
// per step (a weight gradient summed over the micro-batches) runs once,
// when its last run finishes.
func (s *state) launchSyncs(op graph.OpID, out graph.TensorID, inst int32, d int, now float64) bool {
	if s.syncLeft == nil || s.tp[d] < 2 {
		return false
	}
	st := s.opStage[op]
	group := s.stages[st].Replicas[0]
	n := int32(0)
	for _, y := range s.split.Syncs[op] {
		if y.Tensor != out || y.Within {
			continue
		}
		b, dur := s.syncCost(op, y, group)
		start, end := s.occupy(s.syncChannels(d, group), now, dur)
		s.recordSync(st, y, b, start, end)
		s.syncSpans[d] = append(s.syncSpans[d], span{start, end})
		s.push(event{time: end, kind: evSynced, id: inst, dev: int32(d)})
		n++
	}
	s.syncLeft[inst] += n
	return n > 0
}

// synced counts one of an instance's syncs done; after the last, its
// readers may use it.
func (s *state) synced(inst int32, d int, now float64) {
	s.res.Step = max(s.res.Step, now)
	s.syncLeft[inst]--
	if s.syncLeft[inst] == 0 {
		s.produced(graph.TensorID(s.instT[inst]), inst, d, now)
	}
}

// syncChannels are the channels a tensor-parallel sync device d runs
// with the devices of its group occupies: d's tensor-parallel stream and
// the fabric or network cards its ring crosses. Not d's send and receive
// channels: NCCL's kernels move a sync's data over the group's links
// themselves, beside the copies of transfers.
//
// A device syncs with one group (its stage's first replica) all step, so
// its channels are worked out once per run.
func (s *state) syncChannels(d int, group []int) []int {
	if s.syncChans == nil {
		s.syncChans = map[int][]int{}
	}
	if res, ok := s.syncChans[d]; ok {
		return res
	}
	res := s.ringChannels([]int{tensorChannel(s.nd, len(s.c.Hosts), d)}, d, group)
	s.syncChans[d] = res
	return res
}

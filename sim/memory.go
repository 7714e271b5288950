package sim

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/minheap"
)

// memEvent is one allocation (delta > 0) or release on a device.
type memEvent struct {
	time  float64
	seq   int64
	dev   int32
	delta int64
}

func memBefore(a, b memEvent) bool {
	if a.time != b.time {
		return a.time < b.time
	}
	return a.seq < b.seq
}

// memory keeps each device's bytes in use and its peak as the step runs,
// and what still holds each tensor instance on each device. Changes are
// counted in time order, ties by when they were made: a change at the
// engine's current time is counted at once; one dated later (a transfer
// that waits for its channel allocates its copy when it starts) waits in
// memPending until the engine's clock reaches it. So no log of the step's
// changes is kept (32 bytes a change, sorted at the end: on a 200,000-op
// chain at 4 micro-batches, 800,000 op runs, tens of megabytes a run).
type memory struct {
	clock      float64 // the engine's current time
	inUse      []int64 // per device
	peak       []int64 // per device
	memPending *minheap.Heap[memEvent]
	// samples is each device's memory over the step, when the plan asks
	// to Record it.
	samples [][]MemorySample
	// log is every change, kept only when checkMemory is set.
	log []memEvent
	// left[inst*ns+devSlot[dev]] counts the readers and copies out that
	// instance inst's copy on dev waits for before it is freed; -1 once
	// freed. Only the ns devices some op is placed on hold copies (the
	// other replicas of a stage mirror its first), so the table grows
	// with the devices the plan places ops on, not the cluster's: one
	// row per instance for data parallelism on any number of devices.
	left     []int32
	devSlot  []int32
	ns       int
	accAlloc []bool // per instance: accumulator allocated
}

// checkMemory makes every run also keep the log of its memory changes and
// check the peaks counted as it ran against the log replayed in time
// order: on in test binaries.
var checkMemory = testing.Testing()

// newMemory is the empty books of a step of ni tensor instances on nd
// devices, of which those placement names hold copies.
func newMemory(ni, nd int, placement []int) memory {
	slot := make([]int32, nd)
	for d := range slot {
		slot[d] = -1
	}
	ns := 0
	for _, d := range placement {
		if slot[d] < 0 {
			slot[d] = int32(ns)
			ns++
		}
	}
	return memory{
		inUse:      make([]int64, nd),
		peak:       make([]int64, nd),
		memPending: minheap.New(memBefore),
		left:       make([]int32, ni*ns),
		devSlot:    slot,
		ns:         ns,
		accAlloc:   make([]bool, ni),
	}
}

// leftAt is where left counts instance inst's copy on device d.
func (m *memory) leftAt(inst int32, d int) int {
	return int(inst)*m.ns + int(m.devSlot[d])
}

// memBytes is the size of tensor t's instance on device d.
func (s *state) memBytes(t graph.TensorID, d int) int64 {
	tn := &s.g.Tensors[t]
	b := s.bytes[t]
	if s.divided(t, d) {
		b = ceilDiv(b, int64(s.tp[d]))
	}
	switch {
	case tn.Kind.IsResident():
		if s.optState[t] || s.fs != nil && s.fs.gathered[t] {
			if z, r := s.sharding(d); z >= ZeRO1 && (s.optState[t] || z == ZeRO3) {
				return ceilDiv(b, int64(r)) // this replica's shard
			}
		}
		return b
	case tn.Producer == graph.NoOp: // a graph input: the replica's share
		if st := s.devStage[d]; st >= 0 {
			return ceilDiv(b, int64(s.replicas[st]))
		}
		return b
	case s.perStep[t]:
		if s.fs != nil && s.fs.gathered[t] && s.fullyShards(d) {
			_, r := s.sharding(d)
			return ceilDiv(b, int64(r)) // a weight's cast, kept sharded
		}
		if gb := s.gradOf[t]; gb >= 0 {
			buf := &s.buffers[gb]
			if buf.leader != t {
				return 0
			}
			for _, m := range buf.members {
				mb := s.bytes[m]
				if s.divided(m, d) {
					mb = ceilDiv(mb, int64(s.tp[d]))
				}
				b = max(b, mb)
			}
			if s.shrunk[t] || s.fullyShards(buf.src) {
				_, r := s.sharding(buf.src)
				return ceilDiv(b, int64(r))
			}
		}
		return b
	}
	if st := s.devStage[d]; st >= 0 {
		return ceilDiv(b, int64(s.replicas[st]*s.div))
	}
	return b
}

// ceilDiv is a/b rounded up.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// alloc counts bytes allocated (freed, when negative) on dev at time,
// which is the engine's current time or later.
func (s *state) alloc(time float64, dev int, bytes int64) {
	if bytes == 0 {
		return
	}
	e := memEvent{time, s.seq, int32(dev), bytes}
	s.seq++
	if checkMemory {
		s.log = append(s.log, e)
	}
	if time > s.clock {
		s.memPending.Push(e)
		return
	}
	s.countUntil(time)
	s.count(e)
}

// countUntil counts the pending changes dated up to time.
func (s *state) countUntil(time float64) {
	for s.memPending.Len() > 0 && s.memPending.Peek().time <= time {
		s.count(s.memPending.Pop())
	}
}

// count applies one change to its device's bytes in use, peak and,
// when recorded, memory over the step.
func (s *state) count(e memEvent) {
	d := int(e.dev)
	s.inUse[d] += e.delta
	s.peak[d] = max(s.peak[d], s.inUse[d])
	if s.samples != nil {
		// One sample per instant: later changes at the same time
		// overwrite it.
		samples := s.samples[d]
		if n := len(samples); n > 0 && samples[n-1].Time == e.time {
			samples[n-1].Bytes = s.inUse[d]
		} else {
			s.samples[d] = append(samples, MemorySample{e.time, s.inUse[d]})
		}
	}
}

// tempBytes is the scratch one run of op takes on device d.
func (s *state) tempBytes(op graph.OpID, d int) int64 {
	b := s.t.TempBytes(op)
	if s.perMB[op] && b > 0 {
		return ceilDiv(b, int64(s.replicas[s.devStage[d]]*s.div))
	}
	return b
}

// release counts one reader or copy of inst on d done.
func (s *state) release(inst int32, d int, now float64) {
	s.left[s.leftAt(inst, d)]--
	s.maybeFree(inst, d, now)
}

// maybeFree releases an instance's copy on dev once nothing there needs
// it.
func (s *state) maybeFree(inst int32, dev int, now float64) {
	i := s.leftAt(inst, dev)
	if s.left[i] != 0 {
		return
	}
	s.left[i] = -1 // freed; never again
	t := graph.TensorID(s.instT[inst])
	tn := &s.g.Tensors[t]
	if s.isOutput[t] && tn.Producer != graph.NoOp && s.dev[tn.Producer] == dev {
		return // graph outputs stay until the step ends
	}
	s.alloc(now, dev, -s.memBytes(t, dev))
}

// finishMemory counts the changes still pending into each device's peak
// and, when the plan asks to Record the step, its memory over it.
func (s *state) finishMemory() {
	s.countUntil(math.Inf(1))
	copy(s.res.PeakMemory, s.peak)
	if s.samples != nil {
		copy(s.res.Memory, s.samples)
	}
	if checkMemory {
		s.checkPeaks()
	}
}

// checkPeaks replays the log of memory changes in time order and panics
// if a device's peak differs from the one counted as the step ran: the
// changes came out of order, a bug in the engine.
func (s *state) checkPeaks() {
	log := slices.Clone(s.log)
	slices.SortFunc(log, func(a, b memEvent) int {
		if memBefore(a, b) {
			return -1
		}
		if memBefore(b, a) {
			return 1
		}
		return 0
	})
	cur, peak := make([]int64, s.nd), make([]int64, s.nd)
	for _, e := range log {
		cur[e.dev] += e.delta
		peak[e.dev] = max(peak[e.dev], cur[e.dev])
	}
	if !slices.Equal(peak, s.peak) {
		panic(fmt.Sprintf("sim: memory peaks counted out of order: %v, the log replayed gives %v", s.peak, peak))
	}
}

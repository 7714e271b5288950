package sim

import (
	"slices"

	"github.com/opplace/opplace/graph"
)

// memEvent is one allocation (delta > 0) or release on a device.
type memEvent struct {
	time  float64
	seq   int64
	dev   int
	delta int64
}

// memory is the log of every allocation and release, replayed in time
// order once the step is done, and what still holds each tensor
// instance on each device.
type memory struct {
	mem []memEvent
	// left[inst*nd+dev] counts the readers and copies out that instance
	// inst's copy on dev waits for before it is freed; -1 once freed.
	left     []int32
	accAlloc []bool // per instance: accumulator allocated
}

// newMemory is the empty log and holds of a step of nt tasks and ni
// tensor instances on nd devices.
func newMemory(nt, ni, nd int) memory {
	return memory{
		left:     make([]int32, ni*nd),
		accAlloc: make([]bool, ni),
		// About one allocation and one release per task and per
		// instance: sized once, the log is not copied as it grows.
		mem: make([]memEvent, 0, 3*nt+2*ni),
	}
}

// memBytes is the size of tensor t's instance on device d.
func (s *state) memBytes(t graph.TensorID, d int) int64 {
	tn := &s.g.Tensors[t]
	b := tn.Bytes()
	if s.divided(t, d) {
		b = ceilDiv(b, int64(s.tp[d]))
	}
	switch {
	case tn.Kind.IsResident():
		if s.optState[t] {
			if z, r := s.sharding(d); z >= ZeRO1 {
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
		if gb := s.gradOf[t]; gb >= 0 {
			buf := &s.buffers[gb]
			if buf.leader != t {
				return 0
			}
			for _, m := range buf.members {
				mb := s.g.Tensors[m].Bytes()
				if s.divided(m, d) {
					mb = ceilDiv(mb, int64(s.tp[d]))
				}
				b = max(b, mb)
			}
			if s.shrunk[t] {
				_, r := s.sharding(buf.src)
				return ceilDiv(b, int64(r))
			}
		}
		return b
	}
	if st := s.devStage[d]; st >= 0 {
		return ceilDiv(b, int64(s.replicas[st]*s.M))
	}
	return b
}

// ceilDiv is a/b rounded up.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// alloc logs bytes allocated (freed, when negative) on dev at time.
func (s *state) alloc(time float64, dev int, bytes int64) {
	if bytes != 0 {
		s.mem = append(s.mem, memEvent{time, s.seq, dev, bytes})
		s.seq++
	}
}

// tempBytes is the scratch one run of op takes on device d.
func (s *state) tempBytes(op graph.OpID, d int) int64 {
	b := s.t.TempBytes(op)
	if s.perMB[op] && b > 0 {
		return ceilDiv(b, int64(s.replicas[s.devStage[d]]*s.M))
	}
	return b
}

// release counts one reader or copy of inst on d done.
func (s *state) release(inst int32, d int, now float64) {
	s.left[int(inst)*s.nd+d]--
	s.maybeFree(inst, d, now)
}

// maybeFree releases an instance's copy on dev once nothing there needs
// it.
func (s *state) maybeFree(inst int32, dev int, now float64) {
	i := int(inst)*s.nd + dev
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

// replayMemory replays the memory log in time order into each device's
// peak and, when the plan asks to Record the step, its memory over it.
func (s *state) replayMemory() {
	res := s.res
	slices.SortFunc(s.mem, func(a, b memEvent) int {
		if a.time != b.time {
			if a.time < b.time {
				return -1
			}
			return 1
		}
		return int(a.seq - b.seq)
	})
	cur := make([]int64, s.nd)
	for _, m := range s.mem {
		cur[m.dev] += m.delta
		res.PeakMemory[m.dev] = max(res.PeakMemory[m.dev], cur[m.dev])
		if res.Memory != nil {
			// One sample per instant: later changes at the same time
			// overwrite it.
			samples := res.Memory[m.dev]
			if n := len(samples); n > 0 && samples[n-1].Time == m.time {
				samples[n-1].Bytes = cur[m.dev]
			} else {
				res.Memory[m.dev] = append(samples, MemorySample{m.time, cur[m.dev]})
			}
		}
	}
}

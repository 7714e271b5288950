package sim

import (
	"slices"

	"github.com/opplace/opplace/graph"
)

// gradBuffer is one parameter's gradient on one device: the sum of the
// gradients of its uses there.
type gradBuffer struct {
	leader  graph.TensorID // the member that carries the buffer's bytes
	members []graph.TensorID
	src     int // the device producing the members
	dst     int // the device of the update reading them
	left    int32
	// allocated is set once the first member's producer started.
	allocated bool
}

// grads are the plan's gradient buffers: every gradient of one parameter
// produced on one device adds into one buffer, as autograd accumulates
// into .grad, and a buffer read on another device crosses once.
type grads struct {
	gradOf  []int32 // per tensor: the buffer a weight gradient sums into, or -1
	buffers []gradBuffer
}

// gradBuffers groups the weight gradients into the plan's gradient
// buffers (gradOf, buffers).
func (s *state) gradBuffers() {
	g := s.g
	s.gradOf = make([]int32, len(g.Tensors))
	key := map[[2]int]int32{}
	for t := range g.Tensors {
		s.gradOf[t] = -1
		if !s.accum[t] || len(s.consumers[t]) != 1 {
			continue
		}
		u, src := s.consumers[t][0], s.dev[g.Tensors[t].Producer]
		k := [2]int{int(u), src}
		b, ok := key[k]
		if !ok {
			b = int32(len(s.buffers))
			key[k] = b
			s.buffers = append(s.buffers, gradBuffer{leader: graph.TensorID(t), src: src, dst: s.dev[u]})
		}
		s.buffers[b].members = append(s.buffers[b].members, graph.TensorID(t))
		s.buffers[b].left++
		s.gradOf[t] = b
	}
}

// produced hands over a finished (and synced) instance of out on d: to
// its gradient bucket, or to its readers.
func (s *state) produced(out graph.TensorID, inst int32, d int, now float64) {
	if b := s.bucketOf[inst]; b >= 0 {
		s.left[s.leftAt(inst, d)]++ // held until reduced
		s.buckets[b].left--
		if s.buckets[b].left == 0 {
			s.launchBuckets(d, now)
		}
		return
	}
	s.final(inst, d, now)
	if s.rc != nil {
		s.rc.drop(s, out, inst, now)
	}
}

// final makes a finished instance on its producer's device available:
// it is sent to every other device that reads it and handed to the
// readers on d.
func (s *state) final(inst int32, d int, now float64) {
	t := graph.TensorID(s.instT[inst])
	mb := int(inst - s.tensBase[t])
	if gb := s.gradOf[t]; gb >= 0 && s.buffers[gb].src != s.buffers[gb].dst {
		s.sendBuffer(gb, now)
		s.maybeFree(inst, d, now)
		return
	}
	for _, c32 := range s.readersOf(t, d) {
		cd := int(c32)
		bytes, dur := s.transfer(t, d, cd)
		start, end := s.occupy(Channels(s.c, d, cd, s.channelsBuf[:]), now, dur)
		s.left[s.leftAt(inst, d)]++ // the source copy lives until sent
		s.alloc(start, cd, s.memBytes(t, cd))
		s.res.Transfers = append(s.res.Transfers, Transfer{Tensor: t, MicroBatch: mb, From: d, To: cd, Bytes: bytes, Start: start, End: end})
		if st := s.devStage[d]; st >= 0 {
			s.res.Stages[st].Send += dur
		}
		s.push(event{time: end, kind: evArrived, id: inst, dev: int32(cd)})
	}
	s.arrivedLocal(inst, d)
	s.maybeFree(inst, d, now)
}

// readersOf is the devices other than d that read t, in order: worked
// out once per tensor, for d its producer's device, where every
// instance of t is made.
func (s *state) readersOf(t graph.TensorID, d int) []int32 {
	if s.readers == nil {
		s.readers = make([][]int32, len(s.g.Tensors))
		s.readersDone = make([]bool, len(s.g.Tensors))
	}
	if s.readersDone[t] {
		return s.readers[t]
	}
	var devs []int32
	for _, c := range s.consumers[t] {
		if cd := int32(s.dev[c]); int(cd) != d && !slices.Contains(devs, cd) {
			devs = append(devs, cd)
		}
	}
	slices.Sort(devs)
	if p := s.g.Tensors[t].Producer; p != graph.NoOp && s.dev[p] == d {
		s.readers[t], s.readersDone[t] = devs, true
	}
	return devs
}

// sendBuffer counts one more gradient of a buffer final and, once all
// are, sends the buffer to its update's device as one transfer.
func (s *state) sendBuffer(gb int32, now float64) {
	buf := &s.buffers[gb]
	buf.left--
	if buf.left > 0 {
		return
	}
	t := buf.leader
	bytes := s.memBytes(t, buf.src)
	start, end := s.occupy(Channels(s.c, buf.src, buf.dst, s.channelsBuf[:]), now, s.c.TransferTime(buf.src, buf.dst, bytes))
	s.alloc(start, buf.dst, bytes)
	s.res.Transfers = append(s.res.Transfers, Transfer{Tensor: t, From: buf.src, To: buf.dst, Bytes: bytes, Start: start, End: end})
	if st := s.devStage[buf.src]; st >= 0 {
		s.res.Stages[st].Send += end - start
	}
	s.push(event{time: end, kind: evBufferArrived, id: gb})
}

// bufferArrived hands every gradient of a buffer to the update on its
// device and frees the sender's copy.
func (s *state) bufferArrived(gb int32, now float64) {
	buf := &s.buffers[gb]
	s.res.Step = max(s.res.Step, now)
	for _, m := range buf.members {
		s.arrivedLocal(s.tensBase[m], buf.dst)
	}
	s.release(s.tensBase[buf.leader], buf.src, now)
}

// transfer is the bytes and time of moving tensor t's instance from a to
// b: one replica pair's share of a micro-batch.
func (s *state) transfer(t graph.TensorID, a, b int) (int64, float64) {
	bytes := s.bytes[t]
	if s.perStep[t] {
		return bytes, s.t.TensorTransfer(t, a, b)
	}
	ra, rb := 1, 1
	if st := s.devStage[a]; st >= 0 {
		ra = s.replicas[st]
	}
	if st := s.devStage[b]; st >= 0 {
		rb = s.replicas[st]
	}
	div := int64(s.div * min(ra, rb))
	if div == 1 {
		return bytes, s.t.TensorTransfer(t, a, b)
	}
	share := ceilDiv(bytes, div)
	return share, s.c.TransferTime(a, b, share)
}

// arrived hands a transferred instance to its readers on dev and
// releases the sender's copy.
func (s *state) arrived(inst int32, dev int, now float64) {
	s.res.Step = max(s.res.Step, now)
	t := s.instT[inst]
	src := s.dev[s.g.Tensors[t].Producer]
	s.release(inst, src, now)
	s.arrivedLocal(inst, dev)
}

// arrivedLocal hands an instance on dev to the readers there.
func (s *state) arrivedLocal(inst int32, dev int) {
	t := graph.TensorID(s.instT[inst])
	mb := int(inst - s.tensBase[t])
	for _, c := range s.consumers[t] {
		if s.dev[c] != dev {
			continue
		}
		switch {
		case !s.perMB[c]:
			s.satisfy(s.taskBase[c])
		case s.perStep[t]:
			for k := s.taskBase[c]; k < s.taskBase[c+1]; k++ {
				s.satisfy(k)
			}
		default:
			s.satisfy(s.taskBase[c] + int32(mb))
		}
	}
}

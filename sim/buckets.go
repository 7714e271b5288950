package sim

import (
	"slices"

	"github.com/opplace/opplace/graph"
)

// bucket is a set of weight gradients one device all-reduces with its
// counterparts in the other replicas of its stage.
type bucket struct {
	kind    CollectiveKind
	dev     int
	devices []int // one per replica, the first is dev
	stage   int
	bytes   int64
	members []int32 // tensor instances
	left    int32   // members not yet final
}

// ddp are the replicated stages' collectives: each device's gradient
// buckets, reduced in order as PyTorch DDP does, and under ZeRO the
// all-gathers of the updated parameters after them.
type ddp struct {
	buckets    []bucket
	bucketOf   []int32        // per instance: its bucket or -1
	devBuckets [][]int32      // per device: its buckets, in launch order
	nextBucket []int          // per device: its next bucket to launch
	updates    [][]graph.OpID // per device with buckets: its update ops
	inFlight   []bool         // per device: a bucket is running
	synthetic  []int32        // per device: bucket launched when its work is done, or -1
	// ZeRO: gradBuckets[d] is how many of devBuckets[d] reduce gradients
	// (the rest all-gather parameters once updLeft[d], the device's
	// update runs left, is 0); shrunk[t] marks a gradient buffer cut to
	// its shard by a reduce-scatter.
	gradBuckets []int
	updLeft     []int32
	shrunk      []bool
}

// buildBuckets groups each replicated device's weight gradients into
// all-reduce buckets in the order they are produced.
func (s *state) buildBuckets(pos []int32, bucketBytes int64) {
	if bucketBytes <= 0 {
		bucketBytes = DefaultBucketBytes
	}
	g := s.g
	nd := s.nd
	s.bucketOf = make([]int32, len(s.instT))
	for i := range s.bucketOf {
		s.bucketOf[i] = -1
	}
	s.devBuckets = make([][]int32, nd)
	s.nextBucket = make([]int, nd)
	s.inFlight = make([]bool, nd)
	s.synthetic = make([]int32, nd)
	for d := range s.synthetic {
		s.synthetic[d] = -1
	}
	s.gradBuckets = make([]int, nd)
	s.updLeft = make([]int32, nd)
	s.shrunk = make([]bool, len(g.Tensors))
	if !s.training {
		return
	}
	defer func() {
		s.updates = make([][]graph.OpID, nd)
		for op := range g.Ops {
			if d := s.dev[op]; g.Ops[op].Phase == graph.Update && len(s.devBuckets[d]) > 0 {
				s.updates[d] = append(s.updates[d], graph.OpID(op))
			}
		}
		for d := 0; d < nd; d++ {
			s.gradBuckets[d] = len(s.devBuckets[d])
			if z, _ := s.sharding(d); z >= ZeRO1 && len(s.updates[d]) > 0 {
				s.updLeft[d] = int32(len(s.updates[d]))
				s.buildGathers(d)
			}
		}
	}()
	grads := make([][]graph.TensorID, nd)
	anyAccum := false
	for t := range g.Tensors {
		if !s.accum[t] {
			continue
		}
		anyAccum = true
		d := s.dev[g.Tensors[t].Producer]
		if st := s.devStage[d]; st >= 0 && s.replicas[st] > 1 {
			grads[d] = append(grads[d], graph.TensorID(t))
		}
	}
	for d := 0; d < nd; d++ {
		st := s.devStage[d]
		if st < 0 || s.replicas[st] < 2 || s.fullyShards(d) {
			continue // fsdp.go reduces a fully sharded stage's gradients
		}
		if !anyAccum {
			// No optimizer ops: reduce the parameters the device reads
			// once its work is done.
			var bytes int64
			for t := range g.Tensors {
				if g.Tensors[t].Kind != graph.Parameter {
					continue
				}
				if slices.ContainsFunc(s.consumers[t], func(c graph.OpID) bool { return s.dev[c] == d }) {
					bytes += g.Tensors[t].Bytes()
				}
			}
			if bytes > 0 {
				s.synthetic[d] = int32(len(s.buckets))
				s.buckets = append(s.buckets, bucket{kind: AllReduce, dev: d, devices: s.ringOf(d), stage: st, bytes: bytes})
				s.devBuckets[d] = append(s.devBuckets[d], s.synthetic[d])
			}
			continue
		}
		kind := AllReduce
		if s.stages[st].Sharding == ZeRO2 {
			kind = ReduceScatter
		}
		ts := grads[d]
		slices.SortStableFunc(ts, func(a, b graph.TensorID) int {
			return int(pos[g.Tensors[a].Producer]) - int(pos[g.Tensors[b].Producer])
		})
		var cur *bucket
		for _, t := range ts {
			if cur == nil || cur.bytes >= bucketBytes {
				s.devBuckets[d] = append(s.devBuckets[d], int32(len(s.buckets)))
				s.buckets = append(s.buckets, bucket{kind: kind, dev: d, devices: s.ringOf(d), stage: st})
				cur = &s.buckets[len(s.buckets)-1]
			}
			inst := s.instance(t, 0)
			cur.members = append(cur.members, inst)
			cur.bytes += s.memBytes(t, d) // a shared buffer's bytes once
			cur.left++
			s.bucketOf[inst] = int32(len(s.buckets) - 1)
		}
	}
}

// ringOf is device d's counterparts in the replicas of its stage, one
// per replica, d first.
func (s *state) ringOf(d int) []int {
	st := s.stages[s.devStage[d]]
	i := slices.Index(st.Replicas[0], d)
	devs := make([]int, len(st.Replicas))
	for k, rep := range st.Replicas {
		devs[k] = rep[i]
	}
	return devs
}

// buildGathers appends to device d's buckets, after its gradient buckets,
// the all-gathers of the parameters its sharded updates write: one per
// gradient bucket, holding the parameters whose updates read that
// bucket's gradients (each parameter once), run in order once every
// update of d is done.
func (s *state) buildGathers(d int) {
	g := s.g
	seen := map[graph.TensorID]bool{}
	gb := s.devBuckets[d]
	for _, b := range gb {
		ag := bucket{kind: AllGather, dev: d, devices: s.buckets[b].devices, stage: s.buckets[b].stage}
		for _, inst := range s.buckets[b].members {
			for _, u := range s.consumers[s.instT[inst]] {
				if g.Ops[u].Phase != graph.Update {
					continue
				}
				for _, in := range s.inputs[u] {
					if g.Tensors[in].Kind == graph.Parameter && !s.optState[in] && !seen[in] {
						seen[in] = true
						ag.bytes += g.Tensors[in].Bytes()
					}
				}
			}
		}
		if ag.bytes > 0 {
			s.devBuckets[d] = append(s.devBuckets[d], int32(len(s.buckets)))
			s.buckets = append(s.buckets, ag)
		}
	}
}

// sharding is the ZeRO level of device d's stage and its replica count,
// NoSharding when the stage has one replica (or d none) or the step has
// no optimizer updates.
func (s *state) sharding(d int) (Sharding, int) {
	if st := s.devStage[d]; st >= 0 {
		return stageSharding(&s.stages[st], s.training)
	}
	return NoSharding, 1
}

// stageSharding is a stage's ZeRO level and replica count, NoSharding
// for no stage (nil), one replica, or a step with no optimizer updates.
func stageSharding(st *Stage, training bool) (Sharding, int) {
	if st == nil || len(st.Replicas) < 2 || !training {
		return NoSharding, 1
	}
	return st.Sharding, len(st.Replicas)
}

// launchBuckets starts device d's next all-reduce buckets, in order, as
// long as each is complete and none is running.
func (s *state) launchBuckets(d int, now float64) {
	if s.inFlight[d] || s.nextBucket[d] >= len(s.devBuckets[d]) {
		return
	}
	b := s.devBuckets[d][s.nextBucket[d]]
	bk := &s.buckets[b]
	if bk.left > 0 || (b == s.synthetic[d] && s.devLeft[d] > 0) || (bk.kind == AllGather && s.updLeft[d] > 0) {
		return
	}
	// The other members of a tensor-parallel group run the same
	// collective on their shards at once, through the same network cards.
	start, end := s.occupy(s.bucketChannels(d, bk.devices), now, collectiveTime(s.c, bk.kind, bk.devices, bk.bytes, s.groupOnHost(d)))
	s.inFlight[d] = true
	s.res.Collectives = append(s.res.Collectives, Collective{Kind: bk.kind, Stage: bk.stage, Devices: bk.devices, Bytes: bk.bytes, Start: start, End: end, Tensor: -1})
	sr := &s.res.Stages[bk.stage]
	sr.AllReduce += end - start
	sr.AllReduceBytes += bk.bytes
	s.push(event{time: end, kind: evReduced, id: b})
}

// groupOnHost is how many devices of d's tensor-parallel group share
// d's host (1 outside tensor parallelism): the collectives they run at
// once share its network card.
func (s *state) groupOnHost(d int) int {
	if s.tp[d] < 2 {
		return 1
	}
	n, h := 0, s.c.Devices[d].Host
	for _, m := range s.stages[s.devStage[d]].Replicas[0] {
		if s.c.Devices[m].Host == h {
			n++
		}
	}
	return n
}

// reduced finishes bucket b: its gradients are final on its device (a
// reduce-scatter's cut to the replica's shard), the updates may run once
// every gradient bucket of the device is reduced, and the next bucket
// starts.
func (s *state) reduced(b int32, now float64) {
	bk := &s.buckets[b]
	d := bk.dev
	s.res.Step = max(s.res.Step, now)
	for _, inst := range bk.members {
		if t := graph.TensorID(s.instT[inst]); bk.kind == ReduceScatter && !s.shrunk[t] {
			// The replica keeps its shard of the reduced gradients.
			full := s.memBytes(t, d)
			s.shrunk[t] = true
			s.alloc(now, d, s.memBytes(t, d)-full)
		}
		s.left[s.leftAt(inst, d)]--
		s.final(inst, d, now)
	}
	s.inFlight[d] = false
	s.nextBucket[d]++
	if s.nextBucket[d] == s.gradBuckets[d] {
		for _, op := range s.updates[d] {
			s.satisfy(s.taskBase[op])
		}
	}
	s.launchBuckets(d, now)
}

// bucketChannels are the channels a gradient bucket device d reduces
// with devs (d among them) occupies: d's collective stream, its send and
// receive channels, and the fabric or network cards its ring crosses.
func (s *state) bucketChannels(d int, devs []int) []int {
	nd := s.nd
	return s.ringChannels(append(s.channelsBuf[:0], streamChannel(nd, d), d, nd+d), d, devs)
}

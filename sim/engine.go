package sim

import (
	"fmt"
	"slices"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/minheap"
)

// event kinds.
const (
	evOpDone uint8 = iota
	evArrived
	evReduced
	evBufferArrived
	evSynced
	evGathered
	evScattered
)

type event struct {
	time float64
	seq  int64
	kind uint8
	// id is a task (evOpDone), an instance (evArrived, evSynced) or a
	// bucket (evReduced); dev the device a tensor arrived on or was
	// synced on.
	id  int32
	dev int32
}

// eventBefore orders events by time, then by when they were queued.
func eventBefore(a, b event) bool {
	if a.time != b.time {
		return a.time < b.time
	}
	return a.seq < b.seq
}

// state is one simulation of one plan. Beside the plan as every concern
// reads it, its books are kept per concern, each in a struct of its own
// file: the event engine (engine.go), the stages' slots (schedule.go),
// memory (memory.go), the channels that transfers and collectives occupy
// (channels.go), gradient buffers (transfer.go), data-parallel buckets
// and ZeRO (buckets.go), tensor-parallel syncs (tensor.go) and
// recomputation (recompute.go).
type state struct {
	*facts
	t     *cost.Table
	g     *graph.Graph
	c     *cluster.Cluster
	nd, M int
	// div is the number of micro-batches the step's batch is split into,
	// which sizes each run: M, except when a few micro-batches of a finer
	// split are simulated to extrapolate the step (extrapolate.go).
	div int
	// syncTimes prices syncCost's collectives per stage, syncChans holds
	// syncChannels' channels per device.
	syncTimes []*GroupCollectives
	syncChans map[int][]int

	// The plan: each op's device, priority and stage, and the stages.
	dev      []int
	prio     []int32
	opStage  []int
	stages   []Stage
	replicas []int // per stage
	devStage []int // per device: stage of a first-replica device, or -1

	engine
	slots
	memory
	links
	grads
	ddp
	tensorSyncs
	rc *recompute // nil when no stage recomputes
	fs *fsdp      // nil when no stage shards fully
	// sched is the plan's pipeline schedule.
	sched Schedule

	res *Result
}

// engine is the event loop's books: the numbering of tasks (an op's
// runs) and tensor instances, what each task still waits for, each
// device's ready and running tasks, and the events to come.
type engine struct {
	taskBase []int32 // per op: its first task; op's tasks are consecutive
	taskOp   []int32
	tensBase []int32 // per tensor: its first instance
	instT    []int32

	pending []int32 // per task: inputs and dependencies not yet there
	ready   []*minheap.Heap[int32]
	running []bool
	touched []bool // per device: gained ready tasks or finished one
	// touchedList lists the touched devices as they were marked;
	// touchedSpare is the other of the two lists startTouched swaps.
	touchedList, touchedSpare []int32
	prodLeft                  []int32 // per instance: producing tasks not finished

	events *minheap.Heap[event]
	seq    int64 // orders the events and memory changes of one instant
	done   int   // tasks finished
}

// newState sets up the simulation of plan p, its stages normalised.
func newState(t *cost.Table, f *facts, p *Plan, opStage []int, stages []Stage, M int) *state {
	g := t.Graph
	n, nd := len(g.Ops), t.NumDevices()
	s := &state{
		facts: f, t: t, g: g, c: t.Cluster, nd: nd, M: M, div: p.microBatches(),
		dev: p.Device, opStage: opStage, stages: stages,
		replicas: make([]int, len(stages)), devStage: make([]int, nd),
		res: &Result{
			Start: make([]float64, n), End: make([]float64, n),
			PeakMemory: make([]int64, nd), ResidentMemory: make([]int64, nd), Busy: make([]float64, nd),
			Stages: make([]StageResult, len(stages)), MicroBatches: M,
		},
	}
	for d := range s.devStage {
		s.devStage[d] = -1
	}
	for i, st := range stages {
		s.replicas[i] = len(st.Replicas)
		for _, d := range st.Replicas[0] {
			s.devStage[d] = i
		}
	}
	s.prio = p.Priority
	if s.prio == nil {
		s.prio = f.pos
	}
	s.gradBuffers()
	s.numberTasks()
	s.memory = newMemory(len(s.instT), nd, p.Device)
	s.setTensorSyncs(p.Split)
	s.schedule(p.Schedule)
	s.events = minheap.New(eventBefore)
	s.free = make([]float64, NumChannels(t.Cluster))
	s.ready = make([]*minheap.Heap[int32], nd)
	prio, slot := s.prio, s.slot
	taskOp := s.taskOp
	for i := range s.ready {
		s.ready[i] = minheap.New(func(a, b int32) bool {
			if slot[a] != slot[b] {
				return slot[a] < slot[b]
			}
			if pa, pb := prio[taskOp[a]], prio[taskOp[b]]; pa != pb {
				return pa < pb
			}
			return a < b
		})
	}
	s.running = make([]bool, nd)
	s.touched = make([]bool, nd)
	s.sched = p.Schedule
	s.buildBuckets(f.pos, p.BucketBytes)
	s.fs = newFSDP(s)
	s.rc = newRecompute(s)
	return s
}

// tasksOf is how many runs op has: one per micro-batch or one per step.
func (s *state) tasksOf(op graph.OpID) int {
	if s.perMB[op] {
		return s.M
	}
	return 1
}

// instancesOf is how many instances tensor t has: one per micro-batch or
// one per step.
func (s *state) instancesOf(t graph.TensorID) int {
	if s.perStep[t] {
		return 1
	}
	return s.M
}

// expand numbers the copies of n items, count(i) each, consecutively:
// base[i] is item i's first copy, owner[k] the item copy k belongs to.
func expand(n int, count func(int) int) (base, owner []int32) {
	base = make([]int32, n+1)
	for i := 0; i < n; i++ {
		base[i+1] = base[i] + int32(count(i))
	}
	owner = make([]int32, base[n])
	for i := 0; i < n; i++ {
		for k := base[i]; k < base[i+1]; k++ {
			owner[k] = int32(i)
		}
	}
	return base, owner
}

// numberTasks numbers the tasks (an op's runs: one per micro-batch or
// one per step) and the tensor instances.
func (s *state) numberTasks() {
	g := s.g
	s.taskBase, s.taskOp = expand(len(g.Ops), func(op int) int { return s.tasksOf(graph.OpID(op)) })
	s.tensBase, s.instT = expand(len(g.Tensors), func(t int) int { return s.instancesOf(graph.TensorID(t)) })
	s.prodLeft = make([]int32, len(s.instT))
	s.pending = make([]int32, len(s.taskOp))
}

// instance is tensor t's instance read or written by micro-batch mb.
func (s *state) instance(t graph.TensorID, mb int) int32 {
	if s.perStep[t] {
		return s.tensBase[t]
	}
	return s.tensBase[t] + int32(mb)
}

// taskTime is how long run mb of op takes on device d, the syncs inside
// it included (those run once per step with the last run).
func (s *state) taskTime(op graph.OpID, d, mb int) float64 {
	t := s.computeTime(op, d)
	if s.innerSync != nil {
		t += s.innerSync[op]
		if mb == s.tasksOf(op)-1 {
			t += s.innerLast[op]
		}
	}
	return t
}

// computeTime is how long one run of op computes on device d: its share
// of the micro-batch, of a tensor-parallel split and of a ZeRO update.
func (s *state) computeTime(op graph.OpID, d int) float64 {
	st := s.devStage[d]
	var stage *Stage
	if st >= 0 {
		stage = &s.stages[st]
	}
	return runTime(s.facts, s.t, s.split, op, d, s.tp[d], stage, s.div)
}

// runTime is how long one run of op takes on device d, of tensor-parallel
// degree tp under split, in stage (nil: none) at M micro-batches: the
// share of the op's work the run does (a micro-batch of one replica, a
// tensor member's shard, a ZeRO replica's part of an update) priced at
// the shape the run really has (cost.Shape: a small GEMM's under-use and
// the weights a replica reads whole do not shrink with its share), each
// run paying the launch again. Run times every run so, and ComputeBound
// sums them.
func runTime(f *facts, t *cost.Table, split *TensorSplit, op graph.OpID, d, tp int, stage *Stage, M int) float64 {
	share := split.Share(op, tp)
	weights := share
	switch {
	case f.perMB[op]:
		if stage != nil {
			share /= float64(len(stage.Replicas) * M)
		}
	case t.Graph.Ops[op].Phase == graph.Update:
		if z, r := stageSharding(stage, f.training); z >= ZeRO1 {
			// This replica's 1/r of the update: of its weights too.
			share /= float64(r)
			weights /= float64(r)
		}
	}
	return t.RunTime(op, d, share, weights)
}

// push queues event e after the events of its time queued before.
func (en *engine) push(e event) {
	e.seq = en.seq
	en.seq++
	en.events.Push(e)
}

// init counts what each task and instance waits for, places the
// parameters, constants and inputs on their readers, and readies the
// tasks that wait for nothing.
func (s *state) init() {
	g := s.g
	M := int32(s.M)
	for t := range g.Tensors {
		tid := graph.TensorID(t)
		tn := &g.Tensors[t]
		var devs []int
		for _, c := range s.consumers[t] {
			d := s.dev[c]
			if !slices.Contains(devs, d) {
				devs = append(devs, d)
			}
			switch {
			case !s.perMB[c] && !s.perStep[t]:
				for k := s.tensBase[t]; k < s.tensBase[t+1]; k++ {
					s.left[s.leftAt(k, d)]++
				}
			case s.perMB[c] && s.perStep[t]:
				s.left[s.leftAt(s.tensBase[t], d)] += M
			default:
				for k := s.tensBase[t]; k < s.tensBase[t+1]; k++ {
					s.left[s.leftAt(k, d)]++
				}
			}
		}
		if tn.Producer != graph.NoOp {
			if s.accum[t] {
				s.prodLeft[s.tensBase[t]] = M
			} else {
				for k := s.tensBase[t]; k < s.tensBase[t+1]; k++ {
					s.prodLeft[k] = 1
				}
			}
			continue
		}
		// Parameters, constants and inputs start on their readers.
		slices.Sort(devs)
		for _, d := range devs {
			b := s.memBytes(tid, d)
			s.alloc(0, d, b)
			if tn.Kind.IsResident() {
				s.res.ResidentMemory[d] += b
			}
		}
	}
	for _, buf := range s.buffers {
		if buf.src != buf.dst {
			s.left[s.leftAt(s.tensBase[buf.leader], buf.src)]++ // held until sent
		}
	}
	for op := range g.Ops {
		for k := s.taskBase[op]; k < s.taskBase[op+1]; k++ {
			var n int32
			for _, in := range s.inputs[op] {
				if g.Tensors[in].Producer == graph.NoOp {
					continue
				}
				if s.perMB[op] || s.perStep[in] {
					n++
				} else {
					n += M
				}
			}
			for _, d := range s.ctrl[op] {
				if !s.perMB[op] && s.perMB[d] {
					n += M
				} else {
					n++
				}
			}
			if g.Ops[op].Phase == graph.Update && len(s.devBuckets[s.dev[op]]) > 0 {
				n++ // DDP: the optimizer steps once every bucket is reduced
			}
			if s.fs != nil {
				if g.Ops[op].Phase == graph.Update && len(s.fs.updates[s.dev[op]]) > 0 {
					n++ // ZeRO-3: once every gradient is reduce-scattered
				}
				if s.fs.waits(g, graph.OpID(op), int(k-s.taskBase[op]), s.M) {
					n++ // ZeRO-3: once its unit's weights are gathered
				}
			}
			s.pending[k] = n
			if n == 0 {
				s.makeReady(k)
			}
		}
	}
}

// makeReady queues task k on its device.
func (s *state) makeReady(k int32) {
	d := s.dev[s.taskOp[k]]
	s.ready[d].Push(k)
	s.touch(d)
}

// touch marks device d for startTouched.
func (s *state) touch(d int) {
	if !s.touched[d] {
		s.touched[d] = true
		s.touchedList = append(s.touchedList, int32(d))
	}
}

// run processes events in time order until none is left, starting
// ready ops after each instant.
func (s *state) run() error {
	s.init()
	if s.fs != nil {
		s.fs.start(s)
	}
	s.startTouched(0)
	for s.events.Len() > 0 {
		now := s.events.Peek().time
		s.clock = now
		for s.events.Len() > 0 && s.events.Peek().time == now {
			e := s.events.Pop()
			switch e.kind {
			case evOpDone:
				s.opDone(e.id, now)
			case evArrived:
				s.arrived(e.id, int(e.dev), now)
			case evReduced:
				s.reduced(e.id, now)
			case evBufferArrived:
				s.bufferArrived(e.id, now)
			case evSynced:
				s.synced(e.id, int(e.dev), now)
			case evGathered:
				s.fs.gatheredAt(s, int(e.dev), e.id, now)
			case evScattered:
				s.fs.scattered(s, int(e.dev), e.id, now)
			}
		}
		s.startTouched(now)
		if s.fs != nil {
			s.fs.unstall(s, now)
		}
	}
	if total := len(s.taskOp); s.done != total {
		return fmt.Errorf("simulation stalled after %d of %d op runs: the graph has a cycle or a missing input, or the stages are not in order", s.done, total)
	}
	return nil
}

// startTouched starts the best ready op on every idle device that gained
// ready ops, after all events of one instant were processed, so priority
// decides among ops that became ready together.
//
// The devices touched are listed as they are marked and visited in
// device order, so an instant costs what it touched, not a pass over
// every device of the cluster.
func (s *state) startTouched(now float64) {
	list := s.touchedList
	slices.Sort(list)
	s.touchedList = s.touchedSpare[:0]
	defer func() { s.touchedSpare = list[:0] }()
	for _, d32 := range list {
		d := int(d32)
		s.touched[d] = false
		if s.running[d] || s.ready[d].Len() == 0 || s.slot[s.ready[d].Peek()] > s.cur[d] {
			continue
		}
		k := s.ready[d].Pop()
		op := graph.OpID(s.taskOp[k])
		mb := int(k - s.taskBase[op])
		dur := s.taskTime(op, d, mb)
		if s.rc != nil && s.g.Ops[op].Phase == graph.Backward {
			dur += s.rc.restore(s, op, mb, now)
		}
		if s.fs != nil && s.fs.opUnit[op] >= 0 {
			dur += s.fs.runStart(s, op, mb, d, now)
		}
		s.running[d] = true
		if k == s.taskBase[op] {
			s.res.Start[op] = now
		}
		if s.res.Runs != nil {
			s.res.Runs[k] = OpRun{Op: op, MicroBatch: mb, Device: d, Start: now, End: now + dur}
		}
		s.res.End[op] = now + dur
		s.res.Busy[d] += dur
		st := s.opStage[op]
		sr := &s.res.Stages[st]
		if s.innerSync != nil {
			s.recordInnerSyncs(op, st, mb, now+dur)
		}
		if s.busySpans != nil && s.tp[d] > 1 {
			s.busySpans[d] = append(s.busySpans[d], span{now, now + dur})
		}
		if s.perMB[op] {
			if i := st*s.M + mb; !s.mbStarted[i] {
				s.mbStarted[i] = true
				s.live[st]++
				sr.AliveMicroBatches = max(sr.AliveMicroBatches, s.live[st])
			}
		}
		var bytes int64
		for _, out := range s.g.Ops[op].Outputs {
			if gb := s.gradOf[out]; gb >= 0 {
				// The parameter's gradient buffer, once for all its uses.
				if buf := &s.buffers[gb]; !buf.allocated {
					buf.allocated = true
					bytes += s.memBytes(buf.leader, d)
				}
				continue
			}
			if s.accum[out] {
				inst := s.instance(out, mb)
				if s.accAlloc[inst] {
					continue
				}
				s.accAlloc[inst] = true
			}
			bytes += s.memBytes(out, d)
		}
		s.alloc(now, d, bytes+s.tempBytes(op, d))
		s.push(event{time: now + dur, kind: evOpDone, id: k})
	}
}

// opDone finishes task k at now: its outputs are synced, reduced or
// handed over, what it read is released and its successors count it.
func (s *state) opDone(k int32, now float64) {
	g := s.g
	op := graph.OpID(s.taskOp[k])
	mb := int(k - s.taskBase[op])
	d := s.dev[op]
	s.done++
	s.running[d] = false
	s.touch(d)
	s.res.Step = max(s.res.Step, now)
	s.alloc(now, d, -s.tempBytes(op, d))
	s.remaining[d*s.nslots+int(s.slot[k])]--
	s.advance(d)
	if st := s.opStage[op]; s.perMB[op] {
		i := st*s.M + mb
		s.mbLeft[i]--
		if s.mbLeft[i] == 0 {
			s.live[st]--
		}
	}

	for _, out := range g.Ops[op].Outputs {
		inst := s.instance(out, mb)
		s.prodLeft[inst]--
		if s.prodLeft[inst] > 0 {
			continue
		}
		if s.launchSyncs(op, out, inst, d, now) {
			continue
		}
		s.produced(out, inst, d, now)
	}
	// Release what the op read.
	for _, in := range s.inputs[op] {
		if g.Tensors[in].Kind.IsResident() {
			continue
		}
		if s.perMB[op] || s.perStep[in] {
			s.release(s.instance(in, mb), d, now)
			if s.rc != nil {
				s.rc.read(s, op, in, mb, now)
			}
			continue
		}
		for i := s.tensBase[in]; i < s.tensBase[in+1]; i++ {
			s.release(i, d, now)
		}
	}
	for _, succ := range s.ctrlSucc[op] {
		switch {
		case !s.perMB[succ]:
			s.satisfy(s.taskBase[succ])
		case s.perMB[op]:
			s.satisfy(s.taskBase[succ] + int32(mb))
		default:
			for t := s.taskBase[succ]; t < s.taskBase[succ+1]; t++ {
				s.satisfy(t)
			}
		}
	}
	if s.fs != nil && s.fs.opUnit[op] >= 0 {
		s.fs.runDone(s, op, mb, now)
	}
	s.devLeft[d]--
	if s.devLeft[d] == 0 && s.synthetic[d] >= 0 {
		s.launchBuckets(d, now)
	}
	if g.Ops[op].Phase == graph.Update && s.updLeft[d] > 0 {
		s.updLeft[d]--
		if s.updLeft[d] == 0 {
			s.launchBuckets(d, now) // ZeRO: all-gather the updated parameters
		}
	}
}

// satisfy counts one of task k's inputs or dependencies there; after
// the last, k is ready.
func (s *state) satisfy(k int32) {
	s.pending[k]--
	if s.pending[k] == 0 {
		s.makeReady(k)
	}
}

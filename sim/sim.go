// Package sim executes a plan in simulated time: each device runs one op
// at a time, tensors cross between devices over the cluster's links,
// micro-batches flow through pipeline stages in their schedule, replicated
// stages all-reduce their gradients, and memory is allocated and freed as
// a runtime would. It is the single judge of every plan: strategies
// search, sim scores.
package sim

import (
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/minheap"
)

// Transfer is one tensor (of one micro-batch) copied from one device to
// another.
type Transfer struct {
	Tensor     graph.TensorID
	MicroBatch int
	From, To   int
	Bytes      int64
	Start, End float64
}

// StageResult is what one stage did in the simulated step. Device
// figures are its first replica's (every replica mirrors it).
type StageResult struct {
	// Start and End bound the stage's ops (its all-reduces excluded).
	Start, End float64
	// Compute is the busiest device's time on ops run per micro-batch;
	// Update its time on ops run once per step (optimizer updates).
	Compute, Update float64
	// Send is the time the stage's devices spent sending tensors to other
	// stages or devices (transfer durations, summed).
	Send float64
	// AllReduce sums the durations of the stage's gradient all-reduces;
	// AllReduceBytes their sizes.
	AllReduce      float64
	AllReduceBytes int64
	// TensorSync sums the durations of the tensor-parallel syncs the
	// stage's first group ran, on its tensor-parallel stream
	// (overlapping compute where the data flow lets it) or inside fused
	// kernels; TensorSyncBytes their buffers. TensorSyncExposed is the
	// part of the stream's syncs during which the group's first device
	// computed nothing: what the step did not hide (it includes idle
	// time the device would have had anyway, in a pipeline's bubble).
	TensorSync        float64
	TensorSyncBytes   int64
	TensorSyncExposed float64
	// AliveMicroBatches is the most micro-batches the stage had started
	// and not finished at once (their activations stashed).
	AliveMicroBatches int
	// PeakMemory is the stage's largest device peak.
	PeakMemory int64
}

// Result is the simulated step. Times are in seconds from the start of
// the step.
type Result struct {
	// Step is when the last op, transfer or all-reduce finishes.
	Step float64
	// Start and End are each op's first start and last end over the
	// micro-batches.
	Start, End []float64
	// Transfers are ordered by start time, then tensor, then micro-batch,
	// then destination.
	Transfers []Transfer
	// Collectives are the gradient all-reduces, by start time.
	Collectives []Collective
	// PeakMemory is the most memory each device held at once, in bytes;
	// ResidentMemory the part of it taken by parameters and constants.
	PeakMemory     []int64
	ResidentMemory []int64
	// Busy is the time each device spent computing.
	Busy []float64
	// Stages holds one entry per stage of the plan.
	Stages       []StageResult
	MicroBatches int
	// Bubble is the share of the stages' time idle during the step:
	// 1 - Σ busy / (stages × step), for plans of more than one stage.
	Bubble float64
	// Runs and Memory are the step's timeline, filled when the plan asks
	// to Record it. Runs lists every op run, ordered by op and then
	// micro-batch: an op that runs per micro-batch has one run per
	// micro-batch, an op run once per step (optimizer updates, weight
	// transposes) one run. Memory[d] is device d's memory over the step:
	// each sample holds from its time until the next one.
	Runs   []OpRun
	Memory [][]MemorySample
}

// OpRun is one run of an op in the simulated step.
type OpRun struct {
	Op graph.OpID
	// MicroBatch is the micro-batch the run computes; 0 for ops run once
	// per step.
	MicroBatch int
	Device     int
	Start, End float64
}

// MemorySample is the memory a device holds from Time on.
type MemorySample struct {
	Time  float64
	Bytes int64
}

// Simulate runs a placement of the graph behind t as one stage, one
// replica and one micro-batch: operator placement, the plan space's
// simplest point.
func Simulate(t *cost.Table, adj *graph.Adjacency, order []graph.OpID, p Placement) (*Result, error) {
	return Run(t, adj, order, &Plan{Placement: p})
}

// Run simulates one step of plan p of the graph behind t.
//
// Work: an op that depends on the graph's data inputs (every op of a
// graph that has none, except optimizer updates) runs once per
// micro-batch on each replica's share of it, taking (time - launch)/(r·M)
// + launch, since every kernel pays its launch again; its activations
// take 1/(r·M) of their size. Ops that read only parameters and constants
// (weight transposes) and optimizer updates run once per step at full
// cost. Weight gradients (the tensors optimizer updates read) sum into
// one full-size buffer per parameter and device, over micro-batches and
// over the parameter's uses there (autograd's .grad: an LSTM unrolled over
// 40 steps holds one gradient per weight, not 40).
//
// Order: each device runs its ops in its stage's schedule, one slot after
// another (1F1B: min(S-i-1, M) warm-up forwards, then alternate one
// forward and one backward; GPipe: all forwards, then all backwards;
// updates in the last slot); within a slot, the ready op of lowest
// priority first. A device never starts a later slot while an op of an
// earlier one is left, as pipeline runtimes do.
//
// Communication: when an op finishes, each output is sent once to every
// other device that reads it, straight from its producer (a skip
// connection is not relayed through the stages in between), and a
// gradient buffer read on another device crosses once per step; a device
// sends one tensor and receives one at a time (full-duplex links), in
// the order transfers were requested, and transfers through a host's
// shared PCIe fabric or through a network card take turns on it. A
// tensor of one micro-batch crossing from a stage of r1 replicas to one
// of r2 moves 1/(M·min(r1,r2)) of its bytes per replica pair. So a weight
// tied between the first and last stage (GPT's embedding and LM head)
// costs one gradient transfer per step, after the last micro-batch.
//
// Data parallelism: each replicated stage all-reduces its weight
// gradients across its replicas in buckets of BucketBytes, as PyTorch DDP
// does: buckets fill in the order gradients are produced, each starts as
// soon as its gradients are final (after the last micro-batch) and the
// previous bucket is done, overlapping the rest of the backward pass, and
// occupies its device's send and receive channels (and, across hosts, the
// network cards); AllReduceTime gives its duration. The optimizer updates
// of a replicated device start once all its buckets are reduced, as
// optimizer.step() follows DDP's backward. (Unreplicated devices run an
// update as soon as its gradients are final, as a dataflow runtime does.) A training graph without optimizer ops
// all-reduces each device's parameter bytes once its work is done.
//
// A tensor-parallel stage (Stage.Tensor > 1) runs its first group's
// first device, which the other members mirror. Each op computes its
// share (Plan.Split); its syncs then run one after another on the
// group's tensor-parallel stream, a channel of their own beside the
// buckets', and only the synced tensor's readers wait for them (a sync
// inside a fused kernel stops the kernel instead; see TensorSplit.Syncs).
//
// Memory: outputs and scratch are allocated when an op starts, scratch is
// freed when it ends; an activation is freed on a device once every
// consumer there has run and every copy out of it has been sent; a
// received copy is allocated when its transfer starts. Graph outputs stay
// until the end. Parameters, constants and graph inputs (the replica's
// share) are on every device that reads them when the step starts. The
// replicas of a stage mirror its first replica's devices. A recomputing
// stage frees activations saved for backward after the forward pass and
// runs its segments' forward again before their backward (see
// Stage.Recompute).
func Run(t *cost.Table, adj *graph.Adjacency, order []graph.OpID, p *Plan) (*Result, error) {
	return New(t, adj, order).Run(p)
}

// Simulator runs plans of one graph, in one topological order, on one
// cost table (see Run). What every plan shares, such as which ops run
// per micro-batch, is worked out at the first run and kept, so each
// further plan costs only its own simulation. It is safe for concurrent
// use.
type Simulator struct {
	t     *cost.Table
	adj   *graph.Adjacency
	order []graph.OpID
	facts func() *facts
}

// New is the simulator of the graph of t in order (its edges adj).
func New(t *cost.Table, adj *graph.Adjacency, order []graph.OpID) *Simulator {
	sm := &Simulator{t: t, adj: adj, order: order}
	sm.facts = sync.OnceValue(func() *facts { return newFacts(t.Graph, order) })
	return sm
}

// Run simulates one step of plan p; see the package function Run.
func (sm *Simulator) Run(p *Plan) (*Result, error) {
	t, adj, order := sm.t, sm.adj, sm.order
	g := t.Graph
	nd := t.NumDevices()
	opStage, stages, err := p.normalise(g, nd)
	if err != nil {
		return nil, err
	}
	for op, d := range p.Device {
		if !t.CanRun(graph.OpID(op), d) {
			return nil, fmt.Errorf("op %q is placed on %s, whose device type cannot run it", g.Ops[op].Name, t.Cluster.Devices[d].Name)
		}
	}
	if len(order) != len(g.Ops) {
		return nil, fmt.Errorf("order lists %d ops, the graph has %d", len(order), len(g.Ops))
	}
	s := newState(t, adj, sm.facts(), p, opStage, stages)
	if p.Record {
		// Tasks are numbered by op and then micro-batch, so runs indexed
		// by task come out in the documented order.
		s.res.Runs = make([]OpRun, len(s.taskOp))
		s.res.Memory = make([][]MemorySample, nd)
	}
	if err := s.run(); err != nil {
		return nil, err
	}
	s.finish()
	return s.res, nil
}

// event kinds.
const (
	evOpDone uint8 = iota
	evArrived
	evReduced
	evBufferArrived
	evSynced
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

func eventBefore(a, b event) bool {
	if a.time != b.time {
		return a.time < b.time
	}
	return a.seq < b.seq
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

type memEvent struct {
	time  float64
	seq   int64
	dev   int
	delta int64
}

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

// facts are what every simulation of one graph in one order shares,
// worked out once per Simulator: read-only while plans are simulated.
type facts struct {
	training bool
	// pos[op] is op's position in the order.
	pos []int32
	// perMB[op]: the op runs once per micro-batch; perStep[t]: the tensor
	// has one instance per step; accum[t]: it is a weight gradient
	// accumulated over micro-batches.
	perMB   []bool
	perStep []bool
	accum   []bool
	// optState[t]: a parameter-like tensor only optimizer updates read
	// (the optimizer's state), which ZeRO shards.
	optState []bool

	// modules[op] numbers the module of each forward op (see
	// Stage.Recompute), worked out at the first recomputing plan.
	modules func() []int32

	consumers [][]graph.OpID     // per tensor, distinct
	inputs    [][]graph.TensorID // per op, distinct
	ctrl      [][]graph.OpID     // per op, distinct control deps
	ctrlSucc  [][]graph.OpID     // per op, ops that list it as a control dep
	isOutput  []bool
}

type state struct {
	*facts
	t     *cost.Table
	g     *graph.Graph
	c     *cluster.Cluster
	adj   *graph.Adjacency
	nd, M int

	dev      []int
	prio     []int32
	opStage  []int
	stages   []Stage
	replicas []int // per stage
	devStage []int // per device: stage of a first-replica device, or -1

	// Tensor parallelism: split is the plan's; tp[d] the degree of d's
	// group (1: none); syncLeft[inst] counts the syncs a finished
	// instance still waits for before its readers may use it (nil when
	// no group syncs). innerSync[op] is the time of the syncs on tensors
	// inside op (a fused kernel's intermediates) for one of its runs,
	// which its task time includes, and innerLast[op] that of those on a
	// tensor with one instance per step, which only its last run's
	// includes (nil when there are none).
	split     *TensorSplit
	tp        []int
	syncLeft  []int32
	innerSync []float64
	innerLast []float64
	// busySpans[d] and syncSpans[d] are when a group's first device d
	// computed and when its stream synced, each in time order, for
	// TensorSyncExposed.
	busySpans, syncSpans [][]span

	// gradOf[t] is the gradient buffer a weight gradient sums into (-1
	// for other tensors): every gradient of one parameter produced on one
	// device adds into one buffer, as autograd accumulates into .grad, and
	// a buffer read on another device crosses once.
	gradOf  []int32
	buffers []gradBuffer

	taskBase []int32 // per op: its first task; op's tasks are consecutive
	taskOp   []int32
	tensBase []int32 // per tensor: its first instance
	instT    []int32

	nslots    int
	slot      []int32 // per task
	slotIndex [][]int32
	remaining []int32 // per device*nslots+slot
	cur       []int32 // per device: the slot it runs
	pending   []int32 // per task
	ready     []*minheap.Heap[int32]
	running   []bool
	touched   []bool
	devLeft   []int32 // tasks left per device

	// free holds when each channel (see Channels) is next free.
	free        []float64
	channelsBuf [6]int
	left        []int32 // per instance*nd+dev
	prodLeft    []int32 // per instance: producing tasks not finished
	accAlloc    []bool  // per instance: accumulator allocated

	buckets    []bucket
	bucketOf   []int32 // per instance: its bucket or -1
	devBuckets [][]int32
	nextBucket []int
	updates    [][]graph.OpID // per device with buckets: its update ops
	inFlight   []bool
	synthetic  []int32 // per device: bucket launched when its work is done, or -1
	// ZeRO: gradBuckets[d] is how many of devBuckets[d] reduce gradients
	// (the rest all-gather parameters once updLeft[d], the device's
	// update runs left, is 0); shrunk[t] marks a gradient buffer cut to
	// its shard by a reduce-scatter.
	gradBuckets []int
	updLeft     []int32
	shrunk      []bool

	// stage tracking: per stage*M+mb
	mbStarted []bool
	mbLeft    []int32
	live      []int

	rc *recompute // nil when no stage recomputes

	events *minheap.Heap[event]
	seq    int64
	mem    []memEvent
	done   int
	res    *Result
}

func newState(t *cost.Table, adj *graph.Adjacency, f *facts, p *Plan, opStage []int, stages []Stage) *state {
	g := t.Graph
	n, nd, M := len(g.Ops), t.NumDevices(), p.microBatches()
	s := &state{
		facts: f, t: t, g: g, c: t.Cluster, adj: adj, nd: nd, M: M,
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
	s.split, s.tp = p.Split, tensorDegree(stages, nd)
	s.prio = p.Priority
	if s.prio == nil {
		s.prio = f.pos
	}
	s.gradBuffers()
	s.numberTasks()
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
	s.buildBuckets(f.pos, p.BucketBytes)
	s.rc = newRecompute(s)
	return s
}

// newFacts works out what every simulation of g in order shares.
func newFacts(g *graph.Graph, order []graph.OpID) *facts {
	f := &facts{pos: make([]int32, len(g.Ops))}
	for i, op := range order {
		f.pos[op] = int32(i)
	}
	f.dedupe(g)
	f.classify(g, order)
	f.modules = sync.OnceValue(func() []int32 { return moduleIDs(g) })
	return f
}

// dedupe builds the distinct consumer, input and control-dependency lists.
func (s *facts) dedupe(g *graph.Graph) {
	stamp := make([]int32, max(len(g.Ops), len(g.Tensors)))
	for i := range stamp {
		stamp[i] = -1
	}
	// Lists without repeats (nearly all) are the graph's own, shared and
	// never written: a copy of each cost the simulator an allocation per
	// tensor and op on every run.
	s.consumers = make([][]graph.OpID, len(g.Tensors))
	for t := range g.Tensors {
		s.consumers[t] = distinct(g.Tensors[t].Consumers, stamp, int32(t))
	}
	for i := range stamp {
		stamp[i] = -1
	}
	s.inputs = make([][]graph.TensorID, len(g.Ops))
	s.ctrl = make([][]graph.OpID, len(g.Ops))
	s.ctrlSucc = make([][]graph.OpID, len(g.Ops))
	for op := range g.Ops {
		s.inputs[op] = distinct(g.Ops[op].Inputs, stamp, int32(op))
	}
	for op := range g.Ops {
		deps := slices.Clone(g.Ops[op].ControlDeps)
		slices.Sort(deps)
		s.ctrl[op] = slices.Compact(deps)
		for _, d := range s.ctrl[op] {
			s.ctrlSucc[d] = append(s.ctrlSucc[d], graph.OpID(op))
		}
	}
	s.isOutput = make([]bool, len(g.Tensors))
	for _, o := range g.Outputs {
		s.isOutput[o] = true
	}
}

// classify decides which ops run per micro-batch and which tensors have
// one instance per step.
func (s *facts) classify(g *graph.Graph, order []graph.OpID) {
	hasInput := false
	for t := range g.Tensors {
		if g.Tensors[t].Kind == graph.Input && len(s.consumers[t]) > 0 {
			hasInput = true
			break
		}
	}
	s.perMB = make([]bool, len(g.Ops))
	for _, op := range order {
		o := &g.Ops[op]
		switch {
		case o.Phase == graph.Backward:
			s.training = true
			s.perMB[op] = true
		case o.Phase == graph.Update:
		case !hasInput:
			s.perMB[op] = true
		default:
			for _, in := range s.inputs[op] {
				tn := &g.Tensors[in]
				if tn.Kind == graph.Input || tn.Producer != graph.NoOp && s.perMB[tn.Producer] {
					s.perMB[op] = true
					break
				}
			}
			for _, d := range s.ctrl[op] {
				s.perMB[op] = s.perMB[op] || s.perMB[d]
			}
		}
	}
	s.perStep = make([]bool, len(g.Tensors))
	s.accum = make([]bool, len(g.Tensors))
	for t := range g.Tensors {
		tn := &g.Tensors[t]
		if tn.Producer == graph.NoOp || !s.perMB[tn.Producer] {
			s.perStep[t] = true
			continue
		}
		if tn.Kind != graph.Activation || len(s.consumers[t]) == 0 {
			continue
		}
		weightGrad := true
		for _, c := range s.consumers[t] {
			if g.Ops[c].Phase != graph.Update {
				weightGrad = false
				break
			}
		}
		s.accum[t], s.perStep[t] = weightGrad, weightGrad
	}
	s.optState = make([]bool, len(g.Tensors))
	for t := range g.Tensors {
		tn := &g.Tensors[t]
		if tn.Kind != graph.Parameter || len(s.consumers[t]) == 0 {
			continue
		}
		s.optState[t] = !slices.ContainsFunc(s.consumers[t], func(c graph.OpID) bool { return g.Ops[c].Phase != graph.Update })
	}
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

// distinct is list without its repeats: list itself when it has none,
// else a copy. stamp[x] == mark marks x as seen; mark must be new.
func distinct[T ~int32](list []T, stamp []int32, mark int32) []T {
	for i, x := range list {
		if stamp[x] == mark {
			out := slices.Clone(list[:i])
			for _, y := range list[i:] {
				if stamp[y] != mark {
					stamp[y] = mark
					out = append(out, y)
				}
			}
			return out
		}
		stamp[x] = mark
	}
	return list
}

func (s *state) tasksOf(op graph.OpID) int {
	if s.perMB[op] {
		return s.M
	}
	return 1
}

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

func (s *state) numberTasks() {
	g := s.g
	s.taskBase, s.taskOp = expand(len(g.Ops), func(op int) int { return s.tasksOf(graph.OpID(op)) })
	nt := len(s.taskOp)
	s.tensBase, s.instT = expand(len(g.Tensors), func(t int) int { return s.instancesOf(graph.TensorID(t)) })
	ni := len(s.instT)
	s.left = make([]int32, int(ni)*s.nd)
	s.prodLeft = make([]int32, ni)
	s.accAlloc = make([]bool, ni)
	s.bucketOf = make([]int32, ni)
	for i := range s.bucketOf {
		s.bucketOf[i] = -1
	}
	if s.split != nil && s.split.Syncs != nil && slices.ContainsFunc(s.tp, func(t int) bool { return t > 1 }) {
		s.syncLeft = make([]int32, ni)
		s.busySpans, s.syncSpans = make([][]span, s.nd), make([][]span, s.nd)
		s.innerSyncTimes()
	}
	s.pending = make([]int32, nt)
	s.slot = make([]int32, nt)
	// About one allocation and one release per task and per instance:
	// sized once, the log is not copied as it grows.
	s.mem = make([]memEvent, 0, 3*nt+2*ni)
}

// instance is tensor t's instance read or written by micro-batch mb.
func (s *state) instance(t graph.TensorID, mb int) int32 {
	if s.perStep[t] {
		return s.tensBase[t]
	}
	return s.tensBase[t] + int32(mb)
}

// schedule numbers every stage's slots and assigns each task its slot.
func (s *state) schedule(sched Schedule) {
	S, M := len(s.stages), s.M
	const fwd, bwd = 0, 1
	s.nslots = M
	if s.training {
		s.nslots = 2 * M
	}
	s.slotIndex = make([][]int32, S)
	for i := 0; i < S; i++ {
		idx := make([]int32, 2*M)
		k := int32(0)
		put := func(kind, mb int) { idx[kind*M+mb] = k; k++ }
		switch {
		case !s.training:
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
		s.slotIndex[i] = idx
	}
	nd := s.nd
	s.remaining = make([]int32, nd*s.nslots)
	s.cur = make([]int32, nd)
	s.devLeft = make([]int32, nd)
	s.mbStarted = make([]bool, S*M)
	s.mbLeft = make([]int32, S*M)
	s.live = make([]int, S)
	for op := range s.g.Ops {
		st, phase := s.opStage[op], s.g.Ops[op].Phase
		idx := s.slotIndex[st]
		for k := s.taskBase[op]; k < s.taskBase[op+1]; k++ {
			mb := int(k - s.taskBase[op])
			var sl int32
			switch {
			case phase == graph.Update:
				sl = int32(s.nslots - 1)
			case phase == graph.Backward && s.training:
				sl = idx[bwd*M+mb]
			default:
				sl = idx[fwd*M+mb]
			}
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

// advance moves device d's slot past the slots it has finished.
func (s *state) advance(d int) {
	for int(s.cur[d]) < s.nslots-1 && s.remaining[d*s.nslots+int(s.cur[d])] == 0 {
		s.cur[d]++
	}
}

// buildBuckets groups each replicated device's weight gradients into
// all-reduce buckets in the order they are produced.
func (s *state) buildBuckets(pos []int32, bucketBytes int64) {
	if bucketBytes <= 0 {
		bucketBytes = DefaultBucketBytes
	}
	g := s.g
	nd := s.nd
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
	ringOf := func(d int) []int {
		st := s.stages[s.devStage[d]]
		i := slices.Index(st.Replicas[0], d)
		devs := make([]int, len(st.Replicas))
		for k, rep := range st.Replicas {
			devs[k] = rep[i]
		}
		return devs
	}
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
		if st < 0 || s.replicas[st] < 2 {
			continue
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
				s.buckets = append(s.buckets, bucket{kind: AllReduce, dev: d, devices: ringOf(d), stage: st, bytes: bytes})
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
				s.buckets = append(s.buckets, bucket{kind: kind, dev: d, devices: ringOf(d), stage: st})
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

// shardOf is the share of a micro-batch's data one device of stage st
// holds: 1/(replicas·M).
func (s *state) shard(st int) float64 {
	if st < 0 {
		return 1
	}
	return 1 / float64(s.replicas[st]*s.M)
}

// sharding is the ZeRO level of device d's stage and its replica count,
// NoSharding when the stage has one replica (or d none) or the step has
// no optimizer updates.
func (s *state) sharding(d int) (Sharding, int) {
	st := s.devStage[d]
	if st < 0 || s.replicas[st] < 2 || !s.training {
		return NoSharding, 1
	}
	return s.stages[st].Sharding, s.replicas[st]
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

// syncCost is the bytes one run of op moves in sync y over group, and
// how long that takes.
func (s *state) syncCost(op graph.OpID, y Sync, group []int) (int64, float64) {
	b := ceilDiv(y.Bytes, s.syncDiv(op, y))
	return b, CollectiveTime(s.c, y.Kind, group, b)
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
	return int64(s.replicas[s.devStage[s.dev[op]]] * s.M)
}

// divided reports whether device d holds 1/tp of tensor t: d is in a
// tensor-parallel group and the split divides t.
func (s *state) divided(t graph.TensorID, d int) bool {
	return s.tp[d] > 1 && s.split != nil && s.split.Divided != nil && s.split.Divided[t]
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

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// computeTime is how long one run of op computes on device d: its share
// of the micro-batch, of a tensor-parallel split and of a ZeRO update.
func (s *state) computeTime(op graph.OpID, d int) float64 {
	full := s.split.OpTime(op, s.t.OpTime(op, d), s.c.Devices[d].Type.LaunchOverhead, s.tp[d])
	if !s.perMB[op] {
		if s.g.Ops[op].Phase == graph.Update && full > 0 {
			if z, r := s.sharding(d); z >= ZeRO1 {
				// This replica's 1/r of the update.
				launch := min(s.c.Devices[d].Type.LaunchOverhead, full)
				return (full-launch)/float64(r) + launch
			}
		}
		return full
	}
	st := s.devStage[d]
	k := float64(s.replicas[st] * s.M)
	if k == 1 || full <= 0 {
		return full
	}
	launch := min(s.c.Devices[d].Type.LaunchOverhead, full)
	return (full-launch)/k + launch
}

func (s *state) push(e event) {
	e.seq = s.seq
	s.seq++
	s.events.Push(e)
}

func (s *state) alloc(time float64, dev int, bytes int64) {
	if bytes != 0 {
		s.mem = append(s.mem, memEvent{time, s.seq, dev, bytes})
		s.seq++
	}
}

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
					s.left[int(k)*s.nd+d]++
				}
			case s.perMB[c] && s.perStep[t]:
				s.left[int(s.tensBase[t])*s.nd+d] += M
			default:
				for k := s.tensBase[t]; k < s.tensBase[t+1]; k++ {
					s.left[int(k)*s.nd+d]++
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
			s.left[int(s.tensBase[buf.leader])*s.nd+buf.src]++ // held until sent
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
			s.pending[k] = n
			if n == 0 {
				s.makeReady(k)
			}
		}
	}
}

func (s *state) makeReady(k int32) {
	d := s.dev[s.taskOp[k]]
	s.ready[d].Push(k)
	s.touched[d] = true
}

func (s *state) run() error {
	s.init()
	s.startTouched(0)
	for s.events.Len() > 0 {
		now := s.events.Peek().time
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
			}
		}
		s.startTouched(now)
	}
	if total := len(s.taskOp); s.done != total {
		return fmt.Errorf("simulation stalled after %d of %d op runs: the graph has a cycle or a missing input, or the stages are not in order", s.done, total)
	}
	return nil
}

// startTouched starts the best ready op on every idle device that gained
// ready ops, after all events of one instant were processed, so priority
// decides among ops that became ready together.
func (s *state) startTouched(now float64) {
	for d := 0; d < s.nd; d++ {
		if !s.touched[d] {
			continue
		}
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

func (s *state) tempBytes(op graph.OpID, d int) int64 {
	b := s.t.TempBytes(op)
	if s.perMB[op] && b > 0 {
		return ceilDiv(b, int64(s.replicas[s.devStage[d]]*s.M))
	}
	return b
}

func (s *state) opDone(k int32, now float64) {
	g := s.g
	op := graph.OpID(s.taskOp[k])
	mb := int(k - s.taskBase[op])
	d := s.dev[op]
	s.done++
	s.running[d] = false
	s.touched[d] = true
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

// produced hands over a finished (and synced) instance of out on d: to
// its gradient bucket, or to its readers.
func (s *state) produced(out graph.TensorID, inst int32, d int, now float64) {
	if b := s.bucketOf[inst]; b >= 0 {
		s.left[int(inst)*s.nd+d]++ // held until reduced
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

// occupy takes channels res for dur seconds from when all are free, no
// earlier than now, and returns when that is.
func (s *state) occupy(res []int, now, dur float64) (start, end float64) {
	start = now
	for _, r := range res {
		start = max(start, s.free[r])
	}
	end = start + dur
	for _, r := range res {
		s.free[r] = end
	}
	return start, end
}

// syncChannels are the channels a tensor-parallel sync device d runs
// with the devices of its group occupies: d's tensor-parallel stream and
// the fabric or network cards its ring crosses. Not d's send and receive
// channels: NCCL's kernels move a sync's data over the group's links
// themselves, beside the copies of transfers.
func (s *state) syncChannels(d int, group []int) []int {
	return s.ringChannels(append(s.channelsBuf[:0], tensorChannel(s.nd, len(s.c.Hosts), d)), d, group)
}

// bucketChannels are the channels a gradient bucket device d reduces
// with devs (d among them) occupies: d's collective stream, its send and
// receive channels, and the fabric or network cards its ring crosses.
func (s *state) bucketChannels(d int, devs []int) []int {
	nd := s.nd
	return s.ringChannels(append(s.channelsBuf[:0], streamChannel(nd, d), d, nd+d), d, devs)
}

// ringChannels appends to res the shared channels a ring from device d
// through the devices of group crosses: d's host's fabric for a peer
// without a direct link, its network card for a peer on another host.
func (s *state) ringChannels(res []int, d int, group []int) []int {
	nd := s.nd
	h := s.c.Devices[d].Host
	for _, o := range group {
		if o == d {
			continue
		}
		switch _, route := s.c.Route(d, o); route {
		case cluster.RouteIntraHost:
			if !slices.Contains(res, fabricChannel(nd, h)) {
				res = append(res, fabricChannel(nd, h))
			}
		case cluster.RouteNetwork:
			if !slices.Contains(res, nicOut(nd, h)) {
				res = append(res, nicOut(nd, h), nicIn(nd, h))
			}
		}
	}
	return res
}

func (s *state) release(inst int32, d int, now float64) {
	s.left[int(inst)*s.nd+d]--
	s.maybeFree(inst, d, now)
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
	var devs []int
	for _, c := range s.consumers[t] {
		if cd := s.dev[c]; cd != d && !slices.Contains(devs, cd) {
			devs = append(devs, cd)
		}
	}
	slices.Sort(devs)
	for _, cd := range devs {
		bytes, dur := s.transfer(t, d, cd)
		start, end := s.occupy(Channels(s.c, d, cd, s.channelsBuf[:]), now, dur)
		s.left[int(inst)*s.nd+d]++ // the source copy lives until sent
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
	bytes := s.g.Tensors[t].Bytes()
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
	div := int64(s.M * min(ra, rb))
	if div == 1 {
		return bytes, s.t.TensorTransfer(t, a, b)
	}
	share := ceilDiv(bytes, div)
	return share, s.c.TransferTime(a, b, share)
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
		s.left[int(inst)*s.nd+d]--
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

func (s *state) arrived(inst int32, dev int, now float64) {
	s.res.Step = max(s.res.Step, now)
	t := s.instT[inst]
	src := s.dev[s.g.Tensors[t].Producer]
	s.release(inst, src, now)
	s.arrivedLocal(inst, dev)
}

func (s *state) satisfy(k int32) {
	s.pending[k]--
	if s.pending[k] == 0 {
		s.makeReady(k)
	}
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

func (s *state) finish() {
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
	slices.SortStableFunc(res.Transfers, func(a, b Transfer) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		case a.Tensor != b.Tensor:
			return int(a.Tensor - b.Tensor)
		case a.MicroBatch != b.MicroBatch:
			return a.MicroBatch - b.MicroBatch
		}
		return a.To - b.To
	})
	slices.SortStableFunc(res.Collectives, func(a, b Collective) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		}
		return a.Devices[0] - b.Devices[0]
	})
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

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

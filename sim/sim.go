// Package sim executes a plan in simulated time: each device runs one op
// at a time, tensors cross between devices over the cluster's links,
// micro-batches flow through pipeline stages in their schedule, replicated
// stages all-reduce their gradients, and memory is allocated and freed as
// a runtime would. It is the single judge of every plan: strategies
// search, sim scores.
package sim

import (
	"fmt"
	"sync"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
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
	// then destination; TransferBytes sums their sizes. They are listed
	// only when the step was simulated run by run (Extrapolated false).
	Transfers     []Transfer
	TransferBytes int64
	// Collectives are the step's collectives (gradient all-reduces,
	// ZeRO's gathers and scatters, tensor-parallel syncs), by start time;
	// CollectiveBytes sums their buffers. They too are listed only when
	// the step was not extrapolated.
	Collectives     []Collective
	CollectiveBytes int64
	// Extrapolated reports that the step was simulated for a few of its
	// micro-batches and extended to all of them along the increment
	// every figure showed (see Run); its figures are the run-by-run
	// simulation's up to float rounding (a billionth of the step).
	Extrapolated bool
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
//
// Many micro-batches: a step whose micro-batches repeat once its stages
// are past their warm-up is simulated for its first m, m+1 and m+2
// micro-batches (m two more than the stages; each of the size the plan's
// count gives) and extended along the increment they show, when every
// figure grows by the same amount from m to m+1 as from m+1 to m+2 and
// the three short runs cost at most half the long one; else, and always
// when the plan asks to Record its timeline, micro-batch by micro-batch
// (see Result.Extrapolated).
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
	order []graph.OpID
	facts func() *facts
}

// New is the simulator of the graph of t in order. The graph's edges adj
// are not read (the simulator works from the graph's own producer and
// consumer lists); the parameter stays for the callers.
func New(t *cost.Table, adj *graph.Adjacency, order []graph.OpID) *Simulator {
	sm := &Simulator{t: t, order: order}
	sm.facts = sync.OnceValue(func() *facts { return newFacts(t.Graph, order) })
	return sm
}

// Run simulates one step of plan p; see the package function Run.
func (sm *Simulator) Run(p *Plan) (*Result, error) {
	t, order := sm.t, sm.order
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
	if res := sm.extrapolate(p, opStage, stages); res != nil {
		return res, nil
	}
	return sm.simulate(p, opStage, stages, p.microBatches())
}

// simulate runs the first m micro-batches of plan p's step, each of the
// size p's own micro-batch count gives (m is that count, except when the
// step is extrapolated).
func (sm *Simulator) simulate(p *Plan, opStage []int, stages []Stage, m int) (*Result, error) {
	s := newState(sm.t, sm.facts(), p, opStage, stages, m)
	if p.Record {
		// Tasks are numbered by op and then micro-batch, so runs indexed
		// by task come out in the documented order.
		s.res.Runs = make([]OpRun, len(s.taskOp))
		s.res.Memory = make([][]MemorySample, s.nd)
		s.samples = make([][]MemorySample, s.nd)
	}
	if err := s.run(); err != nil {
		return nil, err
	}
	s.finish()
	return s.res, nil
}

// Package sim executes a placed operator graph in simulated time: each
// device runs one op at a time, tensors cross between devices over the
// cluster's links, and memory is allocated and freed as a runtime would.
// It is the single judge of every placement: placers search, sim scores.
package sim

import (
	"fmt"
	"slices"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/minheap"
)

// Placement assigns every op to a device and, optionally, an order.
type Placement struct {
	// Device is the device index of each op.
	Device []int
	// Priority orders the ready ops of one device: the lowest value runs
	// first. Nil means the position in the topological order.
	Priority []int32
}

// Transfer is one tensor copied from one device to another.
type Transfer struct {
	Tensor     graph.TensorID
	From, To   int
	Bytes      int64
	Start, End float64
}

// Result is the simulated step. Times are in seconds from the start of
// the step.
type Result struct {
	// Step is when the last op or transfer finishes.
	Step       float64
	Start, End []float64
	// Transfers are ordered by start time, then tensor, then destination.
	Transfers []Transfer
	// PeakMemory is the most memory each device held at once, in bytes;
	// ResidentMemory the part of it taken by parameters and constants.
	PeakMemory     []int64
	ResidentMemory []int64
	// Busy is the time each device spent computing.
	Busy []float64
}

// Simulate runs the placement p of the graph behind t.
//
// The rules: an op starts when its device is free and every input is on
// that device; among ready ops a device takes the one of lowest priority.
// When an op finishes, each of its outputs is sent once to every other
// device that consumes it; a device sends one tensor at a time and
// receives one at a time (full-duplex links), in the order transfers were
// requested, and transfers through a host's shared PCIe fabric or
// through a network card take turns on it. Parameters, constants and graph inputs are on every device
// that reads them when the step starts.
//
// Memory: outputs and scratch are allocated when an op starts, scratch is
// freed when it ends; an activation is freed on a device once every
// consumer there has run and every copy out of it has been sent; a
// received copy is allocated when its transfer starts. Graph outputs stay
// until the end.
func Simulate(t *cost.Table, adj *graph.Adjacency, order []graph.OpID, p Placement) (*Result, error) {
	g := t.Graph
	n, nd := len(g.Ops), t.NumDevices()
	if len(p.Device) != n {
		return nil, fmt.Errorf("placement covers %d ops, the graph has %d", len(p.Device), n)
	}
	for op, d := range p.Device {
		if d < 0 || d >= nd {
			return nil, fmt.Errorf("op %q is placed on device %d; the cluster has %d", g.Ops[op].Name, d, nd)
		}
		if !t.CanRun(graph.OpID(op), d) {
			return nil, fmt.Errorf("op %q is placed on %s, whose device type cannot run it", g.Ops[op].Name, t.Cluster.Devices[d].Name)
		}
	}
	prio := p.Priority
	if prio == nil {
		prio = make([]int32, n)
		for i, op := range order {
			prio[op] = int32(i)
		}
	}
	s := &state{
		t: t, g: g, adj: adj, dev: p.Device, prio: prio, nd: nd,
		pending: make([]int32, n),
		ready:   make([]*minheap.Heap[graph.OpID], nd),
		events:  minheap.New(eventBefore),
		running: make([]bool, nd),
		free:    make([]float64, 2*nd+3*len(t.Cluster.Hosts)),
		left:    make([]int32, len(g.Tensors)*nd),
		res: &Result{
			Start: make([]float64, n), End: make([]float64, n),
			PeakMemory: make([]int64, nd), ResidentMemory: make([]int64, nd), Busy: make([]float64, nd),
		},
	}
	for i := range s.ready {
		s.ready[i] = minheap.New(func(a, b graph.OpID) bool { return prio[a] < prio[b] })
	}
	s.init()
	if err := s.run(); err != nil {
		return nil, err
	}
	s.finishMemory()
	return s.res, nil
}

type event struct {
	time float64
	seq  int64
	// op >= 0: op finished; otherwise tensor arrived on device dev.
	op     graph.OpID
	tensor graph.TensorID
	dev    int
}

func eventBefore(a, b event) bool {
	if a.time != b.time {
		return a.time < b.time
	}
	return a.seq < b.seq
}

type memEvent struct {
	time  float64
	seq   int64
	dev   int
	delta int64
}

type state struct {
	t    *cost.Table
	g    *graph.Graph
	adj  *graph.Adjacency
	dev  []int
	prio []int32
	nd   int

	pending []int32 // inputs and control deps an op still waits for
	// ready holds each device's ready ops, lowest priority value first.
	ready   []*minheap.Heap[graph.OpID]
	running []bool
	// free holds when each channel is next free: per device a send and a
	// receive channel, per host its intra-host fabric and its network
	// card's egress and ingress.
	free        []float64
	channelsBuf [4]int
	// left[tensor*nd+dev]: consumers on dev that have not yet run, plus,
	// on the producer's device, copies out not yet sent.
	left []int32

	isOutput []bool

	events  *minheap.Heap[event]
	seq     int64
	mem     []memEvent
	touched []bool
	done    int
	res     *Result
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

// consumerDevices lists the distinct devices of a tensor's consumers, in
// ascending order, and counts the consumers on each into s.left.
func (s *state) countConsumers(tid graph.TensorID) []int {
	var devs []int
	seen := map[graph.OpID]bool{}
	for _, c := range s.g.Tensors[tid].Consumers {
		if seen[c] {
			continue
		}
		seen[c] = true
		d := s.dev[c]
		s.left[int(tid)*s.nd+d]++
		if !slices.Contains(devs, d) {
			devs = append(devs, d)
		}
	}
	slices.Sort(devs)
	return devs
}

func (s *state) init() {
	g := s.g
	s.touched = make([]bool, s.nd)
	s.isOutput = make([]bool, len(g.Tensors))
	for _, o := range g.Outputs {
		s.isOutput[o] = true
	}
	for op := range g.Ops {
		seen := map[graph.TensorID]bool{}
		for _, in := range g.Ops[op].Inputs {
			if g.Tensors[in].Producer != graph.NoOp && !seen[in] {
				seen[in] = true
				s.pending[op]++
			}
		}
		s.pending[op] += int32(len(distinctOps(g.Ops[op].ControlDeps)))
	}
	for tid := range g.Tensors {
		tn := &g.Tensors[tid]
		devs := s.countConsumers(graph.TensorID(tid))
		if tn.Producer != graph.NoOp {
			continue
		}
		// Parameters, constants and inputs start on their readers.
		for _, d := range devs {
			s.alloc(0, d, tn.Bytes())
			if tn.Kind.IsResident() {
				s.res.ResidentMemory[d] += tn.Bytes()
			}
		}
	}
	for op := range g.Ops {
		if s.pending[op] == 0 {
			s.makeReady(graph.OpID(op))
		}
	}
}

func (s *state) makeReady(op graph.OpID) {
	d := s.dev[op]
	s.ready[d].Push(op)
	s.touched[d] = true
}

func (s *state) run() error {
	s.startTouched(0)
	for s.events.Len() > 0 {
		now := s.events.Peek().time
		for s.events.Len() > 0 && s.events.Peek().time == now {
			e := s.events.Pop()
			if e.op >= 0 {
				s.opDone(e.op, now)
			} else {
				s.arrived(e.tensor, e.dev, now)
			}
		}
		s.startTouched(now)
	}
	if s.done != len(s.g.Ops) {
		return fmt.Errorf("simulation stalled after %d of %d ops: the graph has a cycle or a missing input", s.done, len(s.g.Ops))
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
		if s.running[d] || s.ready[d].Len() == 0 {
			continue
		}
		op := s.ready[d].Pop()
		dur := s.t.OpTime(op, d)
		s.running[d] = true
		s.res.Start[op] = now
		s.res.End[op] = now + dur
		s.res.Busy[d] += dur
		s.alloc(now, d, s.t.OutputBytes(op)+s.t.TempBytes(op))
		s.push(event{time: now + dur, op: op, tensor: -1, dev: d})
	}
}

func (s *state) opDone(op graph.OpID, now float64) {
	g, d := s.g, s.dev[op]
	s.done++
	s.running[d] = false
	s.touched[d] = true
	s.res.Step = max(s.res.Step, now)
	s.alloc(now, d, -s.t.TempBytes(op))

	for _, out := range g.Ops[op].Outputs {
		tn := &g.Tensors[out]
		bytes := tn.Bytes()
		var devs []int
		for _, c := range tn.Consumers {
			if cd := s.dev[c]; !slices.Contains(devs, cd) {
				devs = append(devs, cd)
			}
		}
		slices.Sort(devs)
		for _, cd := range devs {
			if cd == d {
				continue
			}
			res := s.channels(d, cd)
			start := now
			for _, r := range res {
				start = max(start, s.free[r])
			}
			end := start + s.t.TensorTransfer(out, d, cd)
			for _, r := range res {
				s.free[r] = end
			}
			s.left[int(out)*s.nd+d]++ // the source copy lives until sent
			s.alloc(start, cd, bytes)
			s.res.Transfers = append(s.res.Transfers, Transfer{Tensor: out, From: d, To: cd, Bytes: bytes, Start: start, End: end})
			s.push(event{time: end, op: -1, tensor: out, dev: cd})
		}
		s.arrivedLocal(out, d, now)
		s.maybeFree(out, d, now)
	}
	// Release what op read.
	seen := map[graph.TensorID]bool{}
	for _, in := range g.Ops[op].Inputs {
		if seen[in] {
			continue
		}
		seen[in] = true
		if g.Tensors[in].Kind.IsResident() {
			continue
		}
		s.left[int(in)*s.nd+d]--
		s.maybeFree(in, d, now)
	}
	for _, succ := range s.adj.Succs(op) {
		for _, c := range g.Ops[succ].ControlDeps {
			if c == op {
				s.satisfy(succ)
				break
			}
		}
	}
}

// channels lists the channels a transfer from device a to device b
// occupies for its whole duration. Transfers that share a channel take
// turns at the link's full bandwidth in the order they were requested:
// the shared link moves the same bytes per second as under fair sharing,
// but each transfer finishes in request order.
func (s *state) channels(a, b int) []int {
	nd := s.nd
	hosts := 2 * nd
	out := append(s.channelsBuf[:0], a, nd+b)
	switch _, route := s.t.Cluster.Route(a, b); route {
	case cluster.RouteIntraHost:
		out = append(out, hosts+3*s.t.Cluster.Devices[a].Host)
	case cluster.RouteNetwork:
		out = append(out, hosts+3*s.t.Cluster.Devices[a].Host+1, hosts+3*s.t.Cluster.Devices[b].Host+2)
	}
	return out
}

// arrivedLocal hands a tensor produced on dev to the consumers there.
func (s *state) arrivedLocal(tid graph.TensorID, dev int, now float64) {
	seen := map[graph.OpID]bool{}
	for _, c := range s.g.Tensors[tid].Consumers {
		if s.dev[c] == dev && !seen[c] {
			seen[c] = true
			s.satisfy(c)
		}
	}
}

func (s *state) arrived(tid graph.TensorID, dev int, now float64) {
	s.res.Step = max(s.res.Step, now)
	src := s.dev[s.g.Tensors[tid].Producer]
	s.left[int(tid)*s.nd+src]--
	s.maybeFree(tid, src, now)
	s.arrivedLocal(tid, dev, now)
}

func (s *state) satisfy(op graph.OpID) {
	s.pending[op]--
	if s.pending[op] == 0 {
		s.makeReady(op)
	}
}

// maybeFree releases a tensor's copy on dev once nothing there needs it.
func (s *state) maybeFree(tid graph.TensorID, dev int, now float64) {
	if s.left[int(tid)*s.nd+dev] != 0 {
		return
	}
	s.left[int(tid)*s.nd+dev] = -1 // freed; never again
	if s.isOutput[tid] && s.g.Tensors[tid].Producer != graph.NoOp && s.dev[s.g.Tensors[tid].Producer] == dev {
		return // graph outputs stay until the step ends
	}
	s.alloc(now, dev, -s.g.Tensors[tid].Bytes())
}

func (s *state) finishMemory() {
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
		s.res.PeakMemory[m.dev] = max(s.res.PeakMemory[m.dev], cur[m.dev])
	}
	slices.SortStableFunc(s.res.Transfers, func(a, b Transfer) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		case a.Tensor != b.Tensor:
			return int(a.Tensor - b.Tensor)
		}
		return a.To - b.To
	})
}

func distinctOps(ids []graph.OpID) []graph.OpID {
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}

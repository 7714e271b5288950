package placer

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

func init() {
	Register("m-etf-baechi", "reference: Baechi's m-ETF as its code runs it (for measuring opplace's placers; not in auto)", func() Placer { return baechiETF{} })
}

// baechiETF is m-ETF as Baechi's reference implementation runs it
// (github.com/beomyeol/baechi, placer/m_etf.py: class ETF with its
// ETFDevice, on placer_utils.py's ReadyOpManager and device.py's
// DeviceWrapper), with Baechi's defaults (placer_lib.py: placement
// method m_etf, i.e. colocation on and no memory reservation; grouper
// "tf", i.e. only the graph's own colocation groups; no fusion). It is a
// reference to measure opplace's placers against, not a strategy auto
// runs: it keeps Baechi's choices where opplace improved on them.
//
// Baechi's m-ETF is an event-driven simulation in whole microseconds:
//
//   - An op is ready once all its predecessors have finished, in the
//     simulated time, not once they are placed.
//   - At each event time every free device proposes the ready op it could
//     start earliest, ties by Baechi's topological order (a FIFO Kahn
//     sort), if that op can start now; of the proposals the one with the
//     smallest topological position runs, ties to the lower device. This
//     repeats until no device proposes, then time moves to the next
//     moment a device frees or an op could start.
//   - When an op could start on a device: its inputs from the same device
//     when their producers end; from another device, edge by edge, the
//     tensors not yet cached there are sent over one channel per device,
//     shared by sends and receives: start at max(producer end, sender's
//     channel free), receive from max(that, receiver's channel free), for
//     the transfer's time. The estimate prices each edge against the
//     channels as they are; running the op books them tensor by tensor,
//     so an op with several remote inputs can start later than estimated
//     ("free-link" estimate, ReadyOpManager.get_ready_ts).
//   - Memory: a device is eligible only if the op's scratch plus outputs
//     fit its free memory, and only if its colocation group's persistent
//     memory does. Outputs are allocated when the op runs and freed (but
//     the persistent part) when its last consumer runs; received copies
//     take no memory. When the first op of a colocation group is placed,
//     the whole group is placed there.
//
// Mapping to opplace's graphs: an op's time is its time on the device,
// rounded to whole microseconds, at least 1 (placer_lib.py raises times
// <= 0 to 1); a transfer takes TensorTransfer rounded to microseconds,
// 4 bytes for a control edge (placer_lib.py); the parameters, constants
// and graph inputs an op reads are its persistent memory (Baechi's
// variables are ops whose output is persistent), allocated once on each
// device when the first op reading them runs there; colocation groups
// are opplace's (Op.Colocate, merged), pins and device types restrict
// devices as for every placer (Baechi has neither). The scheduling order
// is returned as the priority.
//
// Where Baechi stops on an assertion (no device has memory for any ready
// op, or a colocation group's member does not fit where the group is
// placed) this returns an *InfeasibleError. Where opplace's m-etf
// differs: it places ops as soon as their predecessors are placed (no
// event-time simulation), prices every input transfer of an op on the
// links between the devices, counts received copies, parameters and the
// whole working set in memory, reserves colocation groups' memory and
// backward headroom, and breaks ties by opplace's topological order.
type baechiETF struct{}

func (baechiETF) Place(ctx context.Context, p *Problem) (sim.Placement, error) {
	if err := noApart(p, "m-etf-baechi"); err != nil {
		return sim.Placement{}, err
	}
	b, err := newBaechi(p, nil)
	if err != nil {
		return sim.Placement{}, err
	}
	return b.run(ctx, "m-ETF")
}

// baechiNone marks a device on which an op has no schedule time.
const baechiNone = -1

// Baechi's device states (m_etf.py's DeviceState); awake is m-SCT's.
const (
	devFree = iota
	devBusy
	devAwake
)

// baechiUS is Baechi's unit: whole microseconds, rounded half to even as
// Python's round.
func baechiUS(seconds float64) int64 { return int64(math.RoundToEven(seconds * 1e6)) }

// baechiEdge is an edge of Baechi's op graph: the distinct tensors that
// flow from one op to another, or one 4-byte control tensor.
type baechiEdge struct {
	from graph.OpID
	// keys are tensor IDs; a control edge's key is len(Tensors)+from.
	keys []int
}

// baechi is the state of Baechi's scheduler. Times are microseconds.
type baechi struct {
	p   *Problem
	g   *graph.Graph
	lim *limits
	nd  int
	// allowed[c*nd+d] says whether class c may use device d.
	allowed []bool
	// topo is each op's position in Baechi's topological order.
	topo []int32
	// in lists each op's in-edges in Baechi's order: by the op's first
	// input from each producer, then its control dependencies.
	in      [][]baechiEdge
	outdeg  []int32
	members [][]graph.OpID // each class's ops, by ID
	// persist lists the producer-less tensors each op reads; groupPersist
	// is each class's total of them.
	persist      [][]graph.TensorID
	groupPersist []int64

	// Devices.
	limit, used    []int64
	next, chanFree []int64
	cur            []int64
	last           []graph.OpID
	state          []int
	resident       tensorDev[struct{}] // persistent tensors allocated per device
	cached         tensorDev[int64]    // receive end of each tensor on each device
	controlKey     int                 // first control tensor key
	scheduled      int

	// Ops.
	dev        []int
	end        []int64
	readyCount []int32
	executed   []int32 // consumers of each op that ran
	ready      []graph.OpID
	isReady    []bool
	order      []graph.OpID
	// Per op and device (index op*nd+d): the schedule time (baechiNone
	// when it cannot start there), the cached estimate of when its
	// inputs arrive, whether that is valid, and which devices it sends
	// from.
	sched   []int64
	arrive  []int64
	valid   []bool
	senders [][]int32
	urgent  []int64

	// fav is each op's favourite child for m-SCT, or nil for m-ETF.
	fav []graph.OpID
}

func newBaechi(p *Problem, fav []graph.OpID) (*baechi, error) {
	lim, err := newLimits(p)
	if err != nil {
		return nil, err
	}
	g := p.Graph
	n, nd := len(g.Ops), p.Costs.NumDevices()
	b := &baechi{
		p: p, g: g, lim: lim, nd: nd, fav: fav,
		allowed:    make([]bool, len(lim.allowed)*nd),
		topo:       baechiTopo(p),
		in:         baechiInEdges(g),
		outdeg:     make([]int32, n),
		members:    make([][]graph.OpID, len(lim.allowed)),
		persist:    make([][]graph.TensorID, n),
		limit:      make([]int64, nd),
		used:       make([]int64, nd),
		next:       make([]int64, nd),
		chanFree:   make([]int64, nd),
		cur:        make([]int64, nd),
		last:       make([]graph.OpID, nd),
		state:      make([]int, nd),
		resident:   newTensorDev[struct{}](len(g.Tensors), nd),
		cached:     newTensorDev[int64](len(g.Tensors)+n, nd),
		controlKey: len(g.Tensors),
		dev:        make([]int, n),
		end:        make([]int64, n),
		readyCount: make([]int32, n),
		executed:   make([]int32, n),
		isReady:    make([]bool, n),
		sched:      make([]int64, n*nd),
		arrive:     make([]int64, n*nd),
		valid:      make([]bool, n*nd),
		senders:    make([][]int32, n*nd),
		urgent:     make([]int64, n),
	}
	for c, devs := range lim.allowed {
		for _, d := range devs {
			b.allowed[c*nd+d] = true
		}
	}
	for d := range nd {
		b.limit[d] = p.Costs.Cluster.Devices[d].Memory
		b.last[d] = -1
	}
	b.groupPersist = make([]int64, len(lim.allowed))
	seen := make([]int32, len(g.Tensors)) // class+1 that last counted it
	for i := range g.Ops {
		op := graph.OpID(i)
		b.dev[i] = -1
		b.outdeg[i] = int32(len(p.Adj.Succs(op)))
		c := lim.class[i]
		b.members[c] = append(b.members[c], op)
		for _, t := range g.Ops[i].Inputs {
			if g.Tensors[t].Producer != graph.NoOp || slices.Contains(b.persist[i], t) {
				continue
			}
			b.persist[i] = append(b.persist[i], t)
			if seen[t] != c+1 {
				seen[t] = c + 1
				b.groupPersist[c] += g.Tensors[t].Bytes()
			}
		}
	}
	// Baechi's ready list starts with the ops no edge enters, by ID.
	for i := range g.Ops {
		if len(p.Adj.Preds(graph.OpID(i))) == 0 {
			b.ready = append(b.ready, graph.OpID(i))
			b.isReady[i] = true
		}
	}
	return b, nil
}

// baechiTopo is placer_utils.assign_topo_order: Kahn's sort with a FIFO
// queue, seeded with the ops no edge enters by ID, successors by ID.
// Baechi breaks every tie by it.
func baechiTopo(p *Problem) []int32 {
	n := len(p.Graph.Ops)
	left := make([]int32, n)
	queue := make([]graph.OpID, 0, n)
	for i := range n {
		left[i] = int32(len(p.Adj.Preds(graph.OpID(i))))
		if left[i] == 0 {
			queue = append(queue, graph.OpID(i))
		}
	}
	pos := make([]int32, n)
	for k := 0; k < len(queue); k++ {
		op := queue[k]
		pos[op] = int32(k)
		for _, s := range p.Adj.Succs(op) {
			if left[s]--; left[s] == 0 {
				queue = append(queue, s)
			}
		}
	}
	return pos
}

// baechiInEdges builds each op's in-edges as placer_lib.py's
// PlacementGraphGenerator adds them: an edge per producer, at the op's
// first input from it, carrying each distinct tensor read from it; then
// a control edge per control dependency that no data edge already
// covers (Baechi asserts there is none).
func baechiInEdges(g *graph.Graph) [][]baechiEdge {
	in := make([][]baechiEdge, len(g.Ops))
	for i := range g.Ops {
		v := graph.OpID(i)
		find := func(u graph.OpID) int {
			return slices.IndexFunc(in[i], func(e baechiEdge) bool { return e.from == u })
		}
		for _, t := range g.Ops[i].Inputs {
			u := g.Tensors[t].Producer
			if u == graph.NoOp || u == v {
				continue
			}
			k := find(u)
			if k < 0 {
				in[i] = append(in[i], baechiEdge{from: u})
				k = len(in[i]) - 1
			}
			if !slices.Contains(in[i][k].keys, int(t)) {
				in[i][k].keys = append(in[i][k].keys, int(t))
			}
		}
		for _, u := range g.Ops[i].ControlDeps {
			if u != v && find(u) < 0 {
				in[i] = append(in[i], baechiEdge{from: u, keys: []int{len(g.Tensors) + int(u)}})
			}
		}
	}
	return in
}

// weight is op's time on d in Baechi's units: at least a microsecond.
func (b *baechi) weight(op graph.OpID, d int) int64 {
	return max(1, baechiUS(b.p.Costs.OpTime(op, d)))
}

// cost is the time to move tensor key from device s to device r.
func (b *baechi) cost(key, s, r int) int64 {
	if key >= b.controlKey {
		return baechiUS(b.p.Costs.Transfer(s, r, 4))
	}
	return baechiUS(b.p.Costs.TensorTransfer(graph.TensorID(key), s, r))
}

// newPersist is the persistent memory op would allocate on d: the
// producer-less tensors it reads that are not there yet.
func (b *baechi) newPersist(op graph.OpID, d int) int64 {
	var s int64
	for _, t := range b.persist[op] {
		if _, ok := b.resident.get(t, d); !ok {
			s += b.g.Tensors[t].Bytes()
		}
	}
	return s
}

// opMemory is ETFDevice.get_op_memory on d: scratch plus outputs, the
// persistent part included.
func (b *baechi) opMemory(op graph.OpID, d int) int64 {
	return b.p.Costs.TempBytes(op) + b.p.Costs.OutputBytes(op) + b.newPersist(op, d)
}

// available is d's memory not allocated.
func (b *baechi) available(d int) int64 { return b.limit[d] - b.used[d] }

// placeable is ETFDevice.is_placeable (without reservations).
func (b *baechi) placeable(op graph.OpID, d int) bool { return b.opMemory(op, d) <= b.available(d) }

// readyAt is ReadyOpManager.get_ready_ts: when op's inputs could all be
// on d, or false if op does not fit d's memory now. A dry run estimates
// and caches; otherwise the transfers are booked.
func (b *baechi) readyAt(op graph.OpID, d int, dry bool) (int64, bool) {
	if !b.placeable(op, d) {
		return 0, false
	}
	k := int(op)*b.nd + d
	if dry && b.valid[k] {
		return b.arrive[k], true
	}
	b.senders[k] = b.senders[k][:0]
	var at int64
	for _, e := range b.in[op] {
		if s := b.dev[e.from]; s == d {
			at = max(at, b.end[e.from])
		} else {
			at = max(at, b.transfer(e, s, d, k, dry))
		}
	}
	b.arrive[k], b.valid[k] = at, true
	return at, true
}

// transfer is _estimate_tensor_transfer_end_ts: when edge e's tensors are
// on device r, sent from s. Cached tensors are there already; a dry run
// prices the rest as one transfer against the channels as they are,
// otherwise they are sent one by one and cached. k indexes the op and r.
func (b *baechi) transfer(e baechiEdge, s, r, k int, dry bool) int64 {
	at, sent := int64(-1), false
	var total int64
	ready := b.end[e.from]
	for _, key := range e.keys {
		if t, ok := b.cached.get(graph.TensorID(key), r); ok {
			at = max(at, t)
			continue
		}
		sent = true
		w := b.cost(key, s, r)
		if dry {
			total += w
			continue
		}
		sendStart := max(ready, b.chanFree[s])
		b.chanFree[s] = sendStart + w
		recvEnd := max(sendStart, b.chanFree[r]) + w
		b.chanFree[r] = recvEnd
		b.cached.set(graph.TensorID(key), r, recvEnd)
		at = max(at, recvEnd)
	}
	if !sent {
		return at
	}
	if dry {
		sendStart := max(ready, b.chanFree[s])
		at = max(at, max(sendStart, b.chanFree[r])+total)
	}
	if !slices.Contains(b.senders[k], int32(s)) {
		b.senders[k] = append(b.senders[k], int32(s))
	}
	return at
}

// populate is ReadyOpManager.populate_schedule_tss followed by ETF's
// colocation filter: each ready op's schedule time on each device
// (max(inputs there, device free)), its urgent time (the latest of
// them, taken before the filter, as Baechi does), and then no device
// for an unplaced op whose group's persistent memory does not fit there.
func (b *baechi) populate() {
	for _, op := range b.ready {
		c := int(b.lim.class[op])
		urgent := int64(math.MinInt64)
		for d := range b.nd {
			k := int(op)*b.nd + d
			b.sched[k] = baechiNone
			if pd := b.dev[op]; pd >= 0 && pd != d || !b.allowed[c*b.nd+d] {
				continue
			}
			if at, ok := b.readyAt(op, d, true); ok {
				b.sched[k] = max(at, b.next[d])
				urgent = max(urgent, b.sched[k])
			}
		}
		if urgent == math.MinInt64 {
			urgent = math.MaxInt64 // Baechi's sys.maxsize
		}
		b.urgent[op] = urgent
		if b.dev[op] >= 0 {
			continue
		}
		for d := range b.nd {
			if k := int(op)*b.nd + d; b.sched[k] != baechiNone && b.groupPersist[c] > b.available(d) {
				b.sched[k] = baechiNone
			}
		}
	}
}

// schedAt is op's schedule time on d, or baechiNone.
func (b *baechi) schedAt(op graph.OpID, d int) int64 { return b.sched[int(op)*b.nd+d] }

// earliest is ETFDevice._get_earlist_ready_op: the ready op d could
// start first, ties by topological position; -1 for none.
func (b *baechi) earliest(d int) graph.OpID {
	best := graph.OpID(-1)
	for _, op := range b.ready {
		t := b.schedAt(op, d)
		if t == baechiNone {
			continue
		}
		if best < 0 || b.before(t, op, b.schedAt(best, d), best) {
			best = op
		}
	}
	return best
}

// before orders (time, op) pairs as Baechi's TimestampOpTuple: by time,
// then topological position.
func (b *baechi) before(t1 int64, op1 graph.OpID, t2 int64, op2 graph.OpID) bool {
	return t1 < t2 || t1 == t2 && b.topo[op1] < b.topo[op2]
}

// propose is get_op_to_schedule of d: the op d would start now, or -1.
func (b *baechi) propose(d int) graph.OpID {
	if b.cur[d] < b.next[d] {
		b.state[d] = devBusy
		return -1
	}
	b.state[d] = devFree
	if b.fav != nil {
		if fc := b.awakeFor(d); fc >= 0 {
			b.state[d] = devAwake
			return b.onAwait(d, fc)
		}
	}
	if op := b.earliest(d); op >= 0 && b.schedAt(op, d) <= b.cur[d] {
		return op
	}
	return -1
}

// nextTime is get_next_ts of d: when d may act next, or baechiNone.
func (b *baechi) nextTime(d int) int64 {
	switch b.state[d] {
	case devBusy:
		return b.next[d]
	case devAwake:
		return b.awakeNext(d)
	}
	if op := b.earliest(d); op >= 0 {
		return b.schedAt(op, d)
	}
	return baechiNone
}

// advance is ETFDevice.advance: d's clock moves to ts; the op that ends
// exactly then makes its successors ready.
func (b *baechi) advance(d int, ts int64) {
	b.cur[d] = ts
	if ts == b.next[d] && b.last[d] >= 0 {
		for _, s := range b.p.Adj.Succs(b.last[d]) {
			if b.readyCount[s]++; int(b.readyCount[s]) == len(b.p.Adj.Preds(s)) {
				b.ready = append(b.ready, s)
				b.isReady[s] = true
			}
		}
	}
	b.next[d] = max(b.next[d], ts)
}

// pick is ETF._get_next_op_metadata: of the devices' proposals, the op
// first in topological order (all start now), ties to the lower device.
func (b *baechi) pick() (graph.OpID, int) {
	b.populate()
	op, dev := graph.OpID(-1), -1
	for d := range b.nd {
		o := b.propose(d)
		if o < 0 {
			continue
		}
		if op < 0 || b.before(b.schedAt(o, d), o, b.schedAt(op, dev), op) {
			op, dev = o, d
		}
	}
	return op, dev
}

// schedule runs op on d now: the body of ETF._run_schedule_step's loop.
func (b *baechi) schedule(op graph.OpID, d int, algo string) error {
	at, ok := b.readyAt(op, d, false)
	if !ok {
		return b.noFit(op, op, d, algo)
	}
	if b.dev[op] < 0 {
		// The whole colocation group goes where its first op runs;
		// Baechi asserts each member fits (ETFDevice.place_op).
		group := b.members[b.lim.class[op]]
		for _, m := range group {
			if !b.placeable(m, d) {
				return b.noFit(op, m, d, algo)
			}
		}
		for _, m := range group {
			b.dev[m] = d
		}
	}
	// ETFDevice.run_op: outputs (and new persistent tensors) are
	// allocated, scratch comes and goes.
	b.used[d] += b.p.Costs.OutputBytes(op) + b.newPersist(op, d)
	for _, t := range b.persist[op] {
		b.resident.set(t, d, struct{}{})
	}
	start := max(b.next[d], at)
	b.end[op] = start + b.weight(op, d)
	b.next[d] = b.end[op]
	b.last[d] = op
	b.order = append(b.order, op)
	// deallocate_predecessor_memory: a producer's outputs, but the
	// persistent part, go once all its consumers ran.
	for _, e := range b.in[op] {
		u := e.from
		if b.executed[u]++; b.executed[u] == b.outdeg[u] {
			b.used[b.dev[u]] -= b.p.Costs.OutputBytes(u)
		}
	}
	b.retire(op, d)
	return nil
}

// retire is ReadyOpManager.remove: op leaves the ready list, and the
// estimates of the other ready ops that used a channel op just booked
// (its device's or a sender's) are dropped.
func (b *baechi) retire(op graph.OpID, d int) {
	changed := append(slices.Clone(b.senders[int(op)*b.nd+d]), int32(d))
	k := slices.Index(b.ready, op)
	b.ready = slices.Delete(b.ready, k, k+1)
	b.isReady[op] = false
	b.scheduled++
	for _, r := range b.ready {
		for e := range b.nd {
			k := int(r)*b.nd + e
			if !b.valid[k] || len(b.senders[k]) == 0 {
				continue
			}
			if slices.Contains(changed, int32(e)) || slices.ContainsFunc(b.senders[k], func(s int32) bool { return slices.Contains(changed, s) }) {
				b.valid[k] = false
			}
		}
	}
}

// run is ETF.run: event steps until no device has anything to do.
func (b *baechi) run(ctx context.Context, algo string) (sim.Placement, error) {
	var ts int64
	for step := 0; ; step++ {
		if step%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return sim.Placement{}, err
			}
		}
		for d := range b.nd {
			b.advance(d, ts)
		}
		for {
			op, d := b.pick()
			if op < 0 {
				break
			}
			if err := b.schedule(op, d, algo); err != nil {
				return sim.Placement{}, err
			}
		}
		next := int64(baechiNone)
		for d := range b.nd {
			if t := b.nextTime(d); t != baechiNone && (next == baechiNone || t < next) {
				next = t
			}
		}
		if next == baechiNone {
			break
		}
		if next <= ts {
			return sim.Placement{}, fmt.Errorf("Baechi's %s did not move time forward at %d µs (Baechi raises ValueError here)", algo, ts)
		}
		ts = next
	}
	if b.scheduled < len(b.g.Ops) {
		return sim.Placement{}, b.stuck(algo)
	}
	prio := make([]int32, len(b.g.Ops))
	for i, op := range b.order {
		prio[op] = int32(i)
	}
	return sim.Placement{Device: b.dev, Priority: prio}, nil
}

// noFit is Baechi's assertion in ETFDevice.place_op as an error: op's
// group member m does not fit device d.
func (b *baechi) noFit(op, m graph.OpID, d int, algo string) error {
	dev := b.p.Costs.Cluster.Devices[d]
	return Infeasible(b.p, fmt.Sprintf("Baechi's %s places op %q's colocation group on %s, where %q needs %s (scratch, outputs and new parameters) and %s is free (its assertion in place_op)",
		algo, b.g.Ops[op].Name, dev.Name, b.g.Ops[m].Name, cluster.FormatBytes(b.opMemory(m, d)), cluster.FormatBytes(b.available(d))))
}

// stuck explains why Baechi ends with ops unscheduled (its assertion on
// the number of scheduled ops): no ready op fits any device it may use.
func (b *baechi) stuck(algo string) error {
	if len(b.ready) == 0 {
		return fmt.Errorf("Baechi's %s scheduled %d of %d ops and has none ready", algo, b.scheduled, len(b.g.Ops))
	}
	op := slices.MinFunc(b.ready, func(x, y graph.OpID) int { return int(b.topo[x] - b.topo[y]) })
	c := int(b.lim.class[op])
	best := -1
	for d := range b.nd {
		if b.allowed[c*b.nd+d] && (b.dev[op] < 0 || b.dev[op] == d) && (best < 0 || b.available(d) > b.available(best)) {
			best = d
		}
	}
	need, what := b.opMemory(op, best), "scratch, outputs and new parameters"
	if g := b.groupPersist[c]; b.dev[op] < 0 && g > need {
		need, what = g, "the parameters of its colocation group"
	}
	return Infeasible(b.p, fmt.Sprintf("Baechi's %s ran %d of %d ops, then no ready op fits a device: op %q needs %s (%s) on %s, which has %s free",
		algo, b.scheduled, len(b.g.Ops), b.g.Ops[op].Name, cluster.FormatBytes(need), what, b.p.Costs.Cluster.Devices[best].Name, cluster.FormatBytes(b.available(best))))
}

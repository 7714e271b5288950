package placer

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

// listState is the bookkeeping shared by list-scheduling placers: where
// each scheduled op runs and ends, when each device is free, which
// transfers occupy the simulator's channels when, which tensors each
// device holds and how much memory that takes over the predicted step,
// and which device each colocation class went to. It follows the
// simulator's rules (sim.Run) on the placer's predicted times, so a
// placer optimises the step it is judged by.
//
// Memory is checked per colocation group, not only per op: when the
// first op of a group (in training, a forward op whose gradient and
// optimizer update are colocated with it) is placed, the group's
// persistent needs are reserved on that device at once: the parameters
// and optimizer state its members read and the weight gradients its
// backward members produce (outputs read by update ops). Otherwise a
// greedy placer fills a device with forward ops and finds no room for
// their gradients hundreds of ops later, as m-ETF did on GPT-2 XL. A
// group also reserves headroom for its backward ops' transient memory
// (see transient); a device keeps the largest such headroom of its
// groups free for forward ops.
type listState struct {
	p      *Problem
	g      *graph.Graph
	nd     int
	pos    []int32 // topological position
	lim    *limits
	one    [][]int            // one[d] is []int{d}
	inputs [][]graph.TensorID // distinct inputs of each op

	// fresh collects ops that became ready (all predecessors scheduled)
	// since the caller last drained it, in topological order at the start
	// and in successor order after each schedule.
	fresh     []graph.OpID
	predsLeft []int32
	dev       []int
	end       []float64
	devFree   []float64
	classDev  []int
	// capacity is each device's memory as the placer may use it; mem its
	// use over the predicted step (see schedule); lastUse, per tensor
	// and device holding a copy, when the copy is last needed there.
	capacity []int64
	mem      []*usage
	lastUse  tensorDev[float64]
	// held records which device holds a copy of which tensor (resident,
	// graph input or received activation) and, for activations, when the
	// copy arrives.
	held tensorDev[float64]
	// links holds the committed transfers; xfers is the plan of the last
	// dataReady, for planned: the op, the device and how many ops were
	// placed then, since nothing else changes the plan. m-ETF asks for
	// the same plan when an op comes to a heap's top and again whether
	// it fits there.
	links   *links
	xfers   []transfer
	planned struct {
		op          graph.OpID
		dev, placed int
		ready       float64
	}
	// consumersLeft counts each tensor's consumers not yet scheduled.
	consumersLeft []int32
	isOutput      []bool
	order         []graph.OpID

	// reserve lists, per colocation class of two or more ops, the
	// tensors reserved when its first op is placed; nil for the rest.
	reserve [][]graph.TensorID
	// transient is each class's headroom for its backward ops.
	transient []int64
	// reserved is, per device, the bytes reserved and not yet allocated;
	// resv marks which tensors they are (keyed like held).
	reserved []int64
	resv     tensorDev[struct{}]
	// headroom is, per device, the largest transient of its classes.
	headroom []int64
	// apart tracks the groups of separate rules on each device; nil
	// without such rules.
	apart *apartHosts
}

// newListState starts the bookkeeping of problem p with each device's
// memory taken as capacity (the cluster's when nil).
func newListState(p *Problem, capacity []int64) (*listState, error) {
	g := p.Graph
	n, nd := len(g.Ops), p.Costs.NumDevices()
	lim, err := newLimits(p)
	if err != nil {
		return nil, err
	}
	s := &listState{
		p: p, g: g, nd: nd, lim: lim,
		pos:           make([]int32, n),
		inputs:        make([][]graph.TensorID, n),
		predsLeft:     make([]int32, n),
		dev:           make([]int, n),
		end:           make([]float64, n),
		devFree:       make([]float64, nd),
		capacity:      capacity,
		mem:           make([]*usage, nd),
		lastUse:       newTensorDev[float64](len(g.Tensors), nd),
		classDev:      make([]int, len(lim.allowed)),
		held:          newTensorDev[float64](len(g.Tensors), nd),
		links:         newLinks(p.Costs.Cluster),
		consumersLeft: make([]int32, len(g.Tensors)),
		isOutput:      make([]bool, len(g.Tensors)),
	}
	if s.capacity == nil {
		s.capacity = make([]int64, nd)
		for d := range s.capacity {
			s.capacity[d] = p.Costs.Cluster.Devices[d].Memory
		}
	}
	for d := 0; d < nd; d++ {
		s.one = append(s.one, []int{d})
		// Each op placed on a device allocates its outputs there and
		// frees them later: about two changes an op, spread evenly.
		s.mem[d] = newUsageSized(2*len(p.Graph.Ops)/nd + 64)
	}
	s.planned.op = -1
	s.apart = newApartHosts(lim, nd)
	for i := range s.classDev {
		s.classDev[i] = -1
	}
	for i, op := range p.Order {
		s.pos[op] = int32(i)
	}
	for _, o := range g.Outputs {
		s.isOutput[o] = true
	}
	for i := range g.Ops {
		ins := g.Ops[i].Inputs
		for k, in := range ins {
			if !containsTensor(ins[:k], in) {
				s.inputs[i] = append(s.inputs[i], in)
				s.consumersLeft[in]++
			}
		}
		s.predsLeft[i] = int32(len(p.Adj.Preds(graph.OpID(i))))
		s.dev[i] = -1
	}
	for _, op := range p.Order {
		if s.predsLeft[op] == 0 {
			s.fresh = append(s.fresh, op)
		}
	}
	s.groupNeeds()
	return s, nil
}

// groupNeeds fills reserve and transient for the classes of two or more
// ops.
func (s *listState) groupNeeds() {
	g, nc := s.g, len(s.lim.allowed)
	s.reserved = make([]int64, s.nd)
	s.headroom = make([]int64, s.nd)
	s.resv = newTensorDev[struct{}](len(g.Tensors), s.nd)
	s.reserve = make([][]graph.TensorID, nc)
	s.transient = make([]int64, nc)
	size := make([]int32, nc)
	for _, c := range s.lim.class {
		size[c]++
	}
	seen := make([]int32, len(g.Tensors)) // class+1 that last listed it
	for i := range g.Ops {
		op := graph.OpID(i)
		c := s.lim.class[i]
		if size[c] < 2 {
			continue
		}
		add := func(t graph.TensorID) {
			if seen[t] != c+1 {
				seen[t] = c + 1
				s.reserve[c] = append(s.reserve[c], t)
			}
		}
		for _, in := range s.inputs[i] {
			if g.Tensors[in].Kind.IsResident() {
				add(in)
			}
		}
		if g.Ops[i].Phase != graph.Backward {
			continue
		}
		// Weight gradients: outputs an update op reads. They live from
		// the backward pass to the update.
		var tr int64
		for _, out := range g.Ops[i].Outputs {
			if readByUpdate(g, out) {
				add(out)
			} else {
				tr += g.Tensors[out].Bytes()
			}
		}
		// Its activation gradients, scratch and the gradients it reads
		// from other groups, which may arrive from another device.
		tr += s.p.Costs.TempBytes(op)
		for _, in := range s.inputs[i] {
			if pr := g.Tensors[in].Producer; pr != graph.NoOp && s.lim.class[pr] != c && g.Ops[pr].Phase == graph.Backward {
				tr += g.Tensors[in].Bytes()
			}
		}
		s.transient[c] = max(s.transient[c], tr)
	}
}

func readByUpdate(g *graph.Graph, t graph.TensorID) bool {
	for _, c := range g.Tensors[t].Consumers {
		if g.Ops[c].Phase == graph.Update {
			return true
		}
	}
	return false
}

// isReserved reports whether tensor t is reserved on device d.
func (s *listState) isReserved(t graph.TensorID, d int) bool {
	if s.reserved[d] == 0 {
		return false
	}
	_, ok := s.resv.get(t, d)
	return ok
}

// unreserve moves t's reservation on d, if any, into real use.
func (s *listState) unreserve(t graph.TensorID, d int) {
	if s.isReserved(t, d) {
		s.resv.del(t, d)
		s.reserved[d] -= s.g.Tensors[t].Bytes()
	}
}

func containsTensor(ts []graph.TensorID, t graph.TensorID) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

// tensorDev is a set of (tensor, device) pairs with a value each: a
// dense table where it takes at most 2^25 entries (a few hundred MB),
// else a map. The list schedulers ask it for every input of every op on
// every candidate device; as a map it was a quarter of m-ETF's time on a
// graph of a million ops.
type tensorDev[V any] struct {
	nd  int
	has []bool
	val []V
	m   map[int64]V
}

func newTensorDev[V any](tensors, nd int) tensorDev[V] {
	if n := tensors * nd; n <= 1<<25 {
		return tensorDev[V]{nd: nd, has: make([]bool, n), val: make([]V, n)}
	}
	return tensorDev[V]{nd: nd, m: map[int64]V{}}
}

func (h *tensorDev[V]) get(t graph.TensorID, d int) (V, bool) {
	k := int64(t)*int64(h.nd) + int64(d)
	if h.m != nil {
		v, ok := h.m[k]
		return v, ok
	}
	return h.val[k], h.has[k]
}

func (h *tensorDev[V]) set(t graph.TensorID, d int, v V) {
	k := int64(t)*int64(h.nd) + int64(d)
	if h.m != nil {
		h.m[k] = v
		return
	}
	h.has[k], h.val[k] = true, v
}

func (h *tensorDev[V]) del(t graph.TensorID, d int) {
	k := int64(t)*int64(h.nd) + int64(d)
	if h.m != nil {
		delete(h.m, k)
		return
	}
	var zero V
	h.has[k], h.val[k] = false, zero
}

// candidates lists the devices op may run on now: its class's device if
// the class is placed, else every device the class allows.
func (s *listState) candidates(op graph.OpID) []int {
	if d := s.classDev[s.lim.class[op]]; d >= 0 {
		return s.one[d]
	}
	devs := s.lim.devices(op)
	if s.apart == nil {
		return devs
	}
	// Leave out the devices an op of another group of a separate rule
	// holds; a fresh slice, since callers may hold the last one.
	var keep []int
	for _, d := range devs {
		if !s.apart.clash(op, d) {
			keep = append(keep, d)
		}
	}
	return keep
}

// eligible reports whether op may still run on device d.
func (s *listState) eligible(op graph.OpID, d int) bool {
	if cd := s.classDev[s.lim.class[op]]; cd >= 0 {
		return cd == d
	}
	return s.lim.allows(op, d) && !s.apart.clash(op, d)
}

// dataReady is when every input of op could be on device d. It plans
// in s.xfers the transfers that would bring the inputs d lacks, as the
// simulator makes them: each from its producer's device once the
// producer ends, in that order (ties by tensor), in the first slot its
// route's channels leave (see links), taking TensorTransfer. Committed
// transfers only fill the channels, so the time never decreases as
// other ops are placed.
func (s *listState) dataReady(op graph.OpID, d int) float64 {
	if pl := &s.planned; pl.op == op && pl.dev == d && pl.placed == len(s.order) {
		return pl.ready
	}
	s.xfers = s.xfers[:0]
	var t float64
	for _, in := range s.inputs[op] {
		pr := s.g.Tensors[in].Producer
		if pr == graph.NoOp {
			continue
		}
		switch pd := s.dev[pr]; {
		case pd == d:
			t = max(t, s.end[pr])
		default:
			if at, ok := s.held.get(in, d); ok {
				t = max(t, at)
			} else {
				s.xfers = append(s.xfers, transfer{t: in, from: pd, start: s.end[pr]})
			}
		}
	}
	slices.SortFunc(s.xfers, func(a, b transfer) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.t, b.t))
	})
	for i := range s.xfers {
		x := &s.xfers[i]
		dur := s.p.Costs.TensorTransfer(x.t, x.from, d)
		x.start = s.links.slot(x.from, d, x.start, dur, s.xfers[:i])
		x.end = x.start + dur
		t = max(t, x.end)
	}
	for _, c := range s.g.Ops[op].ControlDeps {
		t = max(t, s.end[c])
	}
	s.planned.op, s.planned.dev, s.planned.placed, s.planned.ready = op, d, len(s.order), t
	return t
}

// demand is the memory op would add on device d beyond what is reserved
// there, by when the simulator allocates it: early from the step's start
// (the parameters, constants and graph inputs d lacks and, when op is
// its class's first op, the class's reservation), and own when op starts
// (its outputs; its scratch, TempBytes, until it ends). The inputs it
// would receive from other devices are the transfers dataReady plans,
// each counted from its start (recvBytes).
func (s *listState) demand(op graph.OpID, d int) (early, own int64) {
	g := s.g
	own = s.p.Costs.OutputBytes(op)
	for _, out := range g.Ops[op].Outputs {
		if s.isReserved(out, d) {
			own -= g.Tensors[out].Bytes()
		}
	}
	for _, in := range s.inputs[op] {
		tn := &g.Tensors[in]
		if tn.Producer != graph.NoOp {
			continue
		}
		if _, ok := s.held.get(in, d); !ok && !s.isReserved(in, d) {
			early += tn.Bytes()
		}
	}
	c := s.lim.class[op]
	if s.classDev[c] >= 0 {
		return early, own
	}
	for _, t := range s.reserve[c] {
		if g.Tensors[t].Producer == op || containsTensor(s.inputs[op], t) || s.isReserved(t, d) {
			continue // counted above, or already reserved
		}
		if _, ok := s.held.get(t, d); !ok {
			early += g.Tensors[t].Bytes()
		}
	}
	return early, own
}

// recvBytes is what a copy of t received on d adds there: nothing when
// it was reserved.
func (s *listState) recvBytes(t graph.TensorID, d int) int64 {
	if s.isReserved(t, d) {
		return 0
	}
	return s.g.Tensors[t].Bytes()
}

// need is all the memory op would add on device d (see demand), whatever
// the instant.
func (s *listState) need(op graph.OpID, d int) int64 {
	early, own := s.demand(op, d)
	b := early + own + s.p.Costs.TempBytes(op)
	s.dataReady(op, d)
	for _, x := range s.xfers {
		b += s.recvBytes(x.t, d)
	}
	return b
}

// startOn is when op could start on d after the ops placed there: when
// its data is ready, or when d is free if later.
func (s *listState) startOn(op graph.OpID, d int) float64 {
	return max(s.devFree[d], s.dataReady(op, d))
}

// limit is the most d may hold at any instant with op placed: its
// capacity less what is reserved and the headroom op keeps.
func (s *listState) limit(op graph.OpID, d int) int64 {
	return s.capacity[d] - s.reserved[d] - s.kept(op, d)
}

// fits reports whether op, started on d at start, keeps d within its
// limit at every instant of the predicted step: each allocation demand
// and dataReady's transfers name must fit on top of the most d holds
// from its instant on, with the allocations before it still held.
func (s *listState) fits(op graph.OpID, d int, start float64) bool {
	early, own := s.demand(op, d)
	s.dataReady(op, d)
	lim, u := s.limit(op, d), s.mem[d]
	tmp := s.p.Costs.TempBytes(op)
	all := early + own + tmp
	for _, x := range s.xfers {
		all += s.recvBytes(x.t, d)
	}
	if u.peak(math.Inf(-1), math.Inf(1))+all <= lim {
		return true // all of it at the device's peak: the common case, at once
	}
	slices.SortFunc(s.xfers, func(a, b transfer) int { return cmp.Compare(a.start, b.start) })
	// over reports whether holding add more over [from, to) passes lim.
	over := func(add int64, from, to float64) bool { return add > 0 && u.peak(from, to)+add > lim }
	add, from := early, 0.0
	for _, x := range s.xfers {
		if over(add, from, x.start) {
			return false
		}
		add, from = add+s.recvBytes(x.t, d), x.start
	}
	if over(add, from, start) {
		return false
	}
	add += own
	if over(add+tmp, start, start+s.p.Costs.OpTime(op, d)) {
		return false
	}
	return !over(add, start, math.Inf(1))
}

// firstAlloc is the first instant op, started on d at start, allocates
// memory there: the step's start when it needs any there early, else
// its first transfer's start, else start.
func (s *listState) firstAlloc(op graph.OpID, d int, start float64) float64 {
	if early, _ := s.demand(op, d); early > 0 {
		return 0
	}
	first := start
	s.dataReady(op, d)
	for _, x := range s.xfers {
		first = min(first, x.start)
	}
	return first
}

// avail is d's memory neither held nor reserved at every instant from
// from on. It is never negative: schedule commits only what fits.
func (s *listState) avail(d int, from float64) int64 {
	return s.capacity[d] - s.reserved[d] - s.mem[d].peak(from, math.Inf(1))
}

// kept is the headroom a forward op leaves on d for the backward ops of
// d's classes (their transient memory), counting its own class's once
// placed; zero for other ops, which run inside the headroom. Backward
// ops, and classes first placed by one, can take or raise it past what
// is available, so kept may exceed avail.
func (s *listState) kept(op graph.OpID, d int) int64 {
	if s.g.Ops[op].Phase != graph.Forward {
		return 0
	}
	h := s.headroom[d]
	if s.classDev[s.lim.class[op]] < 0 {
		h = max(h, s.transient[s.lim.class[op]])
	}
	return h
}

// free is the memory op, started on d at start, may use there at every
// instant from its first allocation on: what is available less the
// headroom op must keep, and never negative. An op whose need is within
// it fits; one that does not fit needs more than it.
func (s *listState) free(op graph.OpID, d int, start float64) int64 {
	return max(0, s.avail(d, s.firstAlloc(op, d, start))-s.kept(op, d))
}

// schedule commits op to device d starting at start, with the transfers
// dataReady plans for it and the memory demand names, at the instants
// the simulator allocates it. Placers that insert ops into idle gaps
// (HEFT) may start an op before the device's last end.
func (s *listState) schedule(op graph.OpID, d int, start float64) {
	g, costs := s.g, s.p.Costs
	c := s.lim.class[op]
	first := s.classDev[c] < 0
	s.apart.host(op, d)
	end := start + costs.OpTime(op, d)
	u := s.mem[d]
	s.dataReady(op, d)
	for _, x := range s.xfers {
		s.links.commit(x.from, d, x.start, x.end)
		s.held.set(x.t, d, x.end)
		u.add(x.start, g.Tensors[x.t].Bytes())
		s.unreserve(x.t, d)
		s.lastUse.set(x.t, x.from, max(s.lastUseOf(x.t, x.from), x.end)) // its source lives until sent
	}
	for _, in := range s.inputs[op] {
		tn := &g.Tensors[in]
		if _, ok := s.held.get(in, d); !ok && tn.Producer == graph.NoOp {
			s.held.set(in, d, 0)
			u.add(0, tn.Bytes())
			s.unreserve(in, d)
		}
		s.lastUse.set(in, d, max(s.lastUseOf(in, d), end))
	}
	s.dev[op] = d
	s.classDev[c] = d
	s.end[op] = end
	s.devFree[d] = max(s.devFree[d], end)
	s.order = append(s.order, op)
	u.add(start, costs.OutputBytes(op)+costs.TempBytes(op))
	u.add(end, -costs.TempBytes(op))
	for _, out := range g.Ops[op].Outputs {
		s.unreserve(out, d)
		s.lastUse.set(out, d, end)
	}
	if first {
		for _, t := range s.reserve[c] {
			if _, ok := s.held.get(t, d); ok || g.Tensors[t].Producer == op || s.isReserved(t, d) {
				continue
			}
			s.resv.set(t, d, struct{}{})
			s.reserved[d] += g.Tensors[t].Bytes()
		}
		s.headroom[d] = max(s.headroom[d], s.transient[c])
	}
	for _, in := range s.inputs[op] {
		s.consumersLeft[in]--
		if s.consumersLeft[in] == 0 {
			s.release(in)
		}
	}
	for _, out := range g.Ops[op].Outputs {
		if s.consumersLeft[out] == 0 {
			s.release(out)
		}
	}
	for _, succ := range s.p.Adj.Succs(op) {
		s.predsLeft[succ]--
		if s.predsLeft[succ] == 0 {
			s.fresh = append(s.fresh, succ)
		}
	}
}

// lastUseOf is the latest instant a copy of t on d is needed so far: its
// producer's or a reader's end there, or a transfer out of it ending.
func (s *listState) lastUseOf(t graph.TensorID, d int) float64 {
	at, _ := s.lastUse.get(t, d)
	return at
}

// release frees every copy of a tensor whose consumers are all scheduled,
// as the simulator does: each once its last reader there has ended and
// every transfer out of it was sent. Resident tensors stay, and so does
// a graph output on its producer's device.
func (s *listState) release(t graph.TensorID) {
	tn := &s.g.Tensors[t]
	if tn.Kind.IsResident() {
		return
	}
	b := tn.Bytes()
	if tn.Producer != graph.NoOp && !s.isOutput[t] {
		pd := s.dev[tn.Producer]
		s.mem[pd].add(s.lastUseOf(t, pd), -b)
	}
	for d := 0; d < s.nd; d++ {
		if _, ok := s.held.get(t, d); ok {
			s.mem[d].add(s.lastUseOf(t, d), -b)
			s.held.del(t, d)
		}
	}
}

// readyOps lists the unscheduled ops whose predecessors are all
// scheduled, in topological order.
func (s *listState) readyOps() []graph.OpID {
	var r []graph.OpID
	for _, op := range s.p.Order {
		if s.dev[op] < 0 && s.predsLeft[op] == 0 {
			r = append(r, op)
		}
	}
	return r
}

// stuck explains why no ready op fits any device; ready may be nil.
func (s *listState) stuck(ready []graph.OpID) error {
	if ready == nil {
		ready = s.readyOps()
	}
	op := ready[0]
	for _, r := range ready {
		if s.pos[r] < s.pos[op] {
			op = r
		}
	}
	return s.noRoom(op)
}

// noRoom explains that op fits none of its devices, each at the start
// it could have there after the ops placed on it.
func (s *listState) noRoom(op graph.OpID) error {
	best, start := -1, 0.0
	slack := func(d int, at float64) int64 { return s.free(op, d, at) - s.need(op, d) }
	for _, d := range s.candidates(op) {
		if at := s.startOn(op, d); best < 0 || slack(d, at) > slack(best, start) {
			best, start = d, at
		}
	}
	if best < 0 {
		return fmt.Errorf("after placing %d of %d ops, op %q has no device left: every device it may use holds an op a separate rule keeps apart from it (%s)",
			len(s.order), len(s.g.Ops), s.g.Ops[op].Name, s.p.Apart[0].Rule)
	}
	dev := s.p.Costs.Cluster.Devices[best]
	msg := fmt.Sprintf("after placing %d of %d ops, op %q needs %s more on %s, which has %s free",
		len(s.order), len(s.g.Ops), s.g.Ops[op].Name, cluster.FormatBytes(s.need(op, best)), dev.Name,
		cluster.FormatBytes(s.avail(best, s.firstAlloc(op, best, start))))
	if kept := s.kept(op, best); kept > 0 {
		use := "none of it"
		if free := s.free(op, best, start); free > 0 {
			use = cluster.FormatBytes(free) + " of it"
		}
		msg += fmt.Sprintf(", %s for a forward op (forward ops leave %s for the backward scratch of its colocation groups)", use, cluster.FormatBytes(kept))
	}
	if r := s.reserved[best]; r > 0 {
		msg += fmt.Sprintf("; a further %s is reserved for the parameters, optimizer state and gradients of its colocation groups", cluster.FormatBytes(r))
	}
	return Infeasible(s.p, msg)
}

// placement returns the devices and the scheduling order as priorities.
func (s *listState) placement() sim.Placement {
	prio := make([]int32, len(s.g.Ops))
	for i, op := range s.order {
		prio[op] = int32(i)
	}
	return sim.Placement{Device: s.dev, Priority: prio}
}

package strategy

import (
	"cmp"
	"fmt"
	"github.com/opplace/opplace/internal/cbc"
	"math"
	"slices"
	"sync"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
)

// BoundPart is one named lower bound on the step of a family's plans.
type BoundPart struct {
	// Kind names the bound ("work", "critical path", ...), as printed
	// beside the plan when it binds.
	Kind string
	// Seconds is the bound; 0 when it does not apply.
	Seconds float64
	// Fitting marks a bound that holds only for plans that fit in every
	// device's memory (those that count memory).
	Fitting bool
	// Note says how the bound came out, or why it was skipped.
	Note string
}

// Bound is every registered lower bound of a family's plans (see
// lowerBounds); the plan is held to the largest.
type Bound struct{ Parts []BoundPart }

// binding is the index of the part that binds: the largest, an earlier
// one winning unless a later one exceeds it by more than rounding.
func (b Bound) binding() int {
	best := -1
	for i, p := range b.Parts {
		if p.Seconds > 0 && (best < 0 || p.Seconds > b.Parts[best].Seconds*(1+1e-9)) {
			best = i
		}
	}
	return best
}

// Seconds is the bound: the largest of its parts.
func (b Bound) Seconds() float64 {
	if i := b.binding(); i >= 0 {
		return b.Parts[i].Seconds
	}
	return 0
}

// Kind names the part that binds ("" when none is above zero).
func (b Bound) Kind() string {
	if i := b.binding(); i >= 0 {
		return b.Parts[i].Kind
	}
	return ""
}

// Part returns the part of the named kind, if the bound has one.
func (b Bound) Part(kind string) (BoundPart, bool) {
	for _, p := range b.Parts {
		if p.Kind == kind {
			return p, true
		}
	}
	return BoundPart{}, false
}

// Unfitting is the bound without the parts that hold only for plans that
// fit: the bound of a plan that overflows a device.
func (b Bound) Unfitting() Bound {
	var out Bound
	for _, p := range b.Parts {
		if !p.Fitting {
			out.Parts = append(out.Parts, p)
		}
	}
	return out
}

// lowerBound is one registered bound: a function of the problem and a
// family ("" for the whole space) that holds for every plan of that
// family (that fits, when fitting is set).
type lowerBound struct {
	kind    string
	fitting bool
	fn      func(p *Problem, family string) BoundPart
}

// lowerBounds are the bounds every plan is held to, in the order that
// breaks ties when two bind at once: adding a bound is adding an entry.
// docs/model.md proves each.
var lowerBounds = []lowerBound{
	{"work", false, workBound},
	{"critical path", false, criticalPathBound},
	{"memory-forced communication", true, memoryCommBound},
	{"LP relaxation", true, lpBound},
	{"gradient all-reduce", false, allReduceBound},
}

// splitsBatch reports whether a family's plans may split the batch
// (every family but placement; "" is the whole space).
func splitsBatch(family string) bool { return family != FamilyPlacement }

func workBound(p *Problem, _ string) BoundPart {
	return BoundPart{Seconds: p.Bound.Throughput}
}

func criticalPathBound(p *Problem, family string) BoundPart {
	if !splitsBatch(family) {
		return BoundPart{Seconds: p.Bound.CriticalPath}
	}
	if p.Batch <= 0 {
		return BoundPart{Kind: "critical path / batch", Note: "the batch is unknown"}
	}
	// A tensor-parallel group of t also splits each op's work t ways.
	if t := maxTensorDegree(p); splitsOps(family) && t > 1 {
		return BoundPart{Kind: "critical path / (batch × tensor degree)", Seconds: p.Bound.CriticalPath / float64(p.Batch) / float64(t)}
	}
	return BoundPart{Kind: "critical path / batch", Seconds: p.Bound.CriticalPath / float64(p.Batch)}
}

// splitsOps reports whether a family's plans may split an op's work over
// devices (tensor parallelism; "" is the whole space).
func splitsOps(family string) bool { return family == FamilyTensor || family == "" }

// maxTensorDegree bounds the tensor-parallel groups the tensor strategy
// forms: the most devices of one class (a group has devices of one
// type; a degree the user fixes need not be a power of two).
func maxTensorDegree(p *Problem) int {
	best := 1
	for _, cl := range p.Costs.Classes() {
		best = max(best, len(cl))
	}
	return best
}

// boundFacts are what the bounds of every family of a problem share,
// worked out once.
type boundFacts struct {
	once  sync.Once
	paths []boundPath
	// mems are the devices' memories, largest first.
	mems []int64
	lp   BoundPart
}

// boundPath is a path of the graph the memory-forced communication bound
// follows: its ops' fastest times summed, and the most transfer time its
// changes of device force, whole (a placement) and split (a plan that
// splits the batch), with the stretch of the path that forces it.
type boundPath struct {
	name          string
	length        float64
	whole, split  forced
	fitsNowhere   bool
	residentBytes int64
}

// forced is the transfer time a stretch of a path forces: its ops read
// resident bytes that need at least devices devices, so the stretch
// changes device at least devices-1 times.
type forced struct {
	seconds  float64
	resident int64
	devices  int
	ops      int
}

func (p *Problem) boundFacts() *boundFacts {
	if p.bounds == nil {
		p.bounds = &boundFacts{}
	}
	f := p.bounds
	f.once.Do(func() {
		f.mems = deviceMemories(p)
		f.paths = boundPaths(p, f.mems)
		f.lp = solveLPBound(p)
	})
	return f
}

// deviceMemories are the devices' memories, largest first.
func deviceMemories(p *Problem) []int64 {
	var mems []int64
	for _, d := range p.Costs.Cluster.Devices {
		mems = append(mems, d.Memory)
	}
	slices.SortFunc(mems, func(a, b int64) int { return cmp.Compare(b, a) })
	return mems
}

// devicesFor is the fewest devices whose memories hold bytes (the
// largest first), or len(mems)+1 when all of them together do not.
func devicesFor(bytes int64, mems []int64) int {
	var sum int64
	for i, m := range mems {
		sum += m
		if sum >= bytes {
			return i + 1
		}
	}
	return len(mems) + 1
}

// residentShare is each op's share of the resident tensors (parameters,
// constants) it reads: each tensor's bytes split evenly over its distinct
// readers. Whatever the plan, a device holds every resident tensor an op
// on it reads, so the shares of the ops on a device sum to at most the
// resident bytes it holds.
func residentShare(g *graph.Graph) []float64 {
	share := make([]float64, len(g.Ops))
	for t := range g.Tensors {
		tn := &g.Tensors[t]
		if !tn.Kind.IsResident() || len(tn.Consumers) == 0 {
			continue
		}
		readers := distinctOps(tn.Consumers)
		b := float64(tn.Bytes()) / float64(len(readers))
		for _, c := range readers {
			share[c] += b
		}
	}
	return share
}

func distinctOps(ops []graph.OpID) []graph.OpID {
	out := slices.Clone(ops)
	slices.Sort(out)
	return slices.Compact(out)
}

// boundPaths are the paths the memory-forced communication bound tries:
// the critical path at fastest speed, and the path whose ops read the
// most resident bytes.
func boundPaths(p *Problem, mems []int64) []boundPath {
	g := p.Graph
	n := len(g.Ops)
	if n == 0 {
		return nil
	}
	share := residentShare(g)
	pairs := distinctPairs(p.Costs.Cluster)
	var out []boundPath
	for _, w := range []struct {
		name   string
		weight func(op graph.OpID) (float64, float64)
	}{
		{"critical path", func(op graph.OpID) (float64, float64) { return p.Costs.FastestTime(op), share[op] }},
		{"most resident path", func(op graph.OpID) (float64, float64) { return share[op], p.Costs.FastestTime(op) }},
	} {
		// Longest path by the first weight, ties by the second.
		best := make([][2]float64, n)
		prev := make([]graph.OpID, n)
		end := graph.NoOp
		for _, op := range p.Order {
			a, b := w.weight(op)
			prev[op] = graph.NoOp
			var s [2]float64
			for _, q := range p.Adj.Preds(op) {
				if best[q][0] > s[0] || best[q][0] == s[0] && best[q][1] > s[1] {
					s, prev[op] = best[q], q
				}
			}
			best[op] = [2]float64{s[0] + a, s[1] + b}
			if end == graph.NoOp || best[op][0] > best[end][0] || best[op][0] == best[end][0] && best[op][1] > best[end][1] {
				end = op
			}
		}
		var path []graph.OpID
		for op := end; op != graph.NoOp; op = prev[op] {
			path = append(path, op)
		}
		slices.Reverse(path)
		out = append(out, followPath(p, w.name, path, mems, pairs))
	}
	return out
}

// distinctPairs is one pair of distinct devices (the first met, a
// before b) for each link between two devices and the pair of device
// types at its ends: a transfer's time depends only on those (the link's
// model, or a measured time per tensor, cost.TransferModel), so the least
// over every pair is the least over these. A cluster of identical hosts
// has two or three, where it has n² pairs.
func distinctPairs(c *cluster.Cluster) [][2]int {
	type key struct {
		link   cluster.Link
		ta, tb *cluster.DeviceType
	}
	seen := map[key]bool{}
	var out [][2]int
	for a := range c.Devices {
		for b := range c.Devices {
			if a == b {
				continue
			}
			k := key{c.Path(a, b), c.Devices[a].Type, c.Devices[b].Type}
			if !seen[k] {
				seen[k] = true
				out = append(out, [2]int{a, b})
			}
		}
	}
	return out
}

// followPath works out a path's figures (see boundPath), the least
// transfer times over pairs (distinctPairs).
func followPath(p *Problem, name string, path []graph.OpID, mems []int64, pairs [][2]int) boundPath {
	g := p.Graph
	bp := boundPath{name: name}
	for _, op := range path {
		bp.length += p.Costs.FastestTime(op)
	}
	bp.residentBytes = readsResident(g, path)
	if devicesFor(bp.residentBytes, mems) < 2 {
		return bp
	}
	bp.fitsNowhere = devicesFor(bp.residentBytes, mems) > len(mems)
	nd := p.Costs.NumDevices()
	batch := p.Batch
	whole := make([]float64, len(path)-1)
	split := make([]float64, len(path)-1)
	for i := 1; i < len(path); i++ {
		u, v := path[i-1], path[i]
		if g.Ops[v].Phase == graph.Update || nd < 2 {
			continue // a gradient may cross as a per-step buffer: counted free
		}
		for _, t := range g.Ops[u].Outputs {
			tn := &g.Tensors[t]
			if !slices.Contains(tn.Consumers, v) || readByUpdate(g, tn) {
				continue
			}
			// The least time over every pair of distinct devices: as the
			// whole tensor (the model's own figure or the link's), and as
			// the least share a plan that splits the batch sends.
			w, sp := math.Inf(1), math.Inf(1)
			bytes := tn.Bytes()
			share := int64(1)
			if batch > 0 {
				share = max(1, (bytes+batch-1)/batch)
			}
			if bytes <= 0 {
				share = 0
			}
			for _, ab := range pairs {
				a, b := ab[0], ab[1]
				tt := p.Costs.TensorTransfer(t, a, b)
				w = min(w, tt)
				sp = min(sp, tt, p.Costs.Transfer(a, b, share))
			}
			whole[i-1], split[i-1] = max(whole[i-1], w), max(split[i-1], sp)
		}
	}
	bp.whole = mostForced(g, path, whole, mems)
	bp.split = mostForced(g, path, split, mems)
	return bp
}

// readsResident is the bytes of the distinct resident tensors the ops
// read.
func readsResident(g *graph.Graph, ops []graph.OpID) int64 {
	seen := map[graph.TensorID]bool{}
	var s int64
	for _, op := range ops {
		for _, in := range g.Ops[op].Inputs {
			if tn := &g.Tensors[in]; tn.Kind.IsResident() && !seen[in] {
				seen[in] = true
				s += tn.Bytes()
			}
		}
	}
	return s
}

// mostForced is the most transfer time any stretch of the path forces,
// over the stretches between edges cheaper than a threshold, for the
// thresholds 0 and eight quantiles of the edges' costs: a stretch whose
// ops read resident bytes that need k devices changes device at least
// k-1 times within it, each change paying at least its edge's cost, so
// it forces at least its k-1 cheapest edges' costs.
func mostForced(g *graph.Graph, path []graph.OpID, cost []float64, mems []int64) forced {
	sorted := slices.Clone(cost)
	slices.Sort(sorted)
	thresholds := []float64{0}
	for q := 1; q <= 8 && len(sorted) > 0; q++ {
		thresholds = append(thresholds, sorted[min(len(sorted)-1, q*len(sorted)/9)])
	}
	var best forced
	for ti, tau := range thresholds {
		if ti > 0 && tau == thresholds[ti-1] {
			continue
		}
		for i := 0; i < len(cost); {
			if ti > 0 && cost[i] < tau {
				i++
				continue
			}
			j := i
			for j < len(cost) && (ti == 0 || cost[j] >= tau) {
				j++
			}
			// Edges i..j-1 join ops i..j.
			ops := path[i : j+1]
			res := readsResident(g, ops)
			k := devicesFor(res, mems)
			if k >= 2 && k <= len(ops) {
				c := slices.Clone(cost[i:j])
				slices.Sort(c)
				var sum float64
				for _, v := range c[:k-1] {
					sum += v
				}
				if sum > best.seconds {
					best = forced{seconds: sum, resident: res, devices: k, ops: len(ops)}
				}
			}
			i = j
		}
	}
	return best
}

// readByUpdate reports whether an optimizer update reads the tensor: a
// gradient, which the simulator may send as a per-step buffer.
func readByUpdate(g *graph.Graph, tn *graph.Tensor) bool {
	for _, c := range tn.Consumers {
		if g.Ops[c].Phase == graph.Update {
			return true
		}
	}
	return false
}

// memoryCommBound is the memory-forced communication bound: a stretch of
// a path whose ops read more resident bytes than the largest device holds
// spans at least k devices (the fewest whose memories hold those bytes,
// largest first), so it changes device at least k-1 times, and each
// change waits for a tensor to cross: the step is at least the path's
// fastest length plus the k-1 cheapest of the stretch's edges' least
// transfer times (the ops' times divided by the batch, and the transfers
// priced at the batch's share, for a family that splits it). See
// docs/model.md.
func memoryCommBound(p *Problem, family string) BoundPart {
	if splitsOps(family) && maxTensorDegree(p) > 1 {
		// A tensor-parallel group divides a stretch's resident bytes
		// among its members without changing device along the path.
		return BoundPart{Note: "tensor parallelism divides resident bytes without transfers along the path"}
	}
	f := p.boundFacts()
	var best BoundPart
	for _, bp := range f.paths {
		if bp.fitsNowhere {
			return BoundPart{Note: fmt.Sprintf("the %s reads %d resident bytes, more than the whole cluster holds: no plan fits", bp.name, bp.residentBytes)}
		}
		whole := bp.length + bp.whole.seconds
		split := bp.split.seconds
		if p.Batch > 0 {
			split += bp.length / float64(p.Batch)
		}
		s, fc := whole, bp.whole
		switch {
		case family == "" && split < whole:
			s, fc = split, bp.split
		case family != "" && splitsBatch(family):
			s, fc = split, bp.split
		}
		if fc.devices < 2 {
			continue
		}
		if s > best.Seconds {
			best = BoundPart{Seconds: s, Note: fmt.Sprintf("%d ops of the %s read %d resident bytes: at least %d devices, %d changes of device, %.3g ms of transfers",
				fc.ops, bp.name, fc.resident, fc.devices, fc.devices-1, fc.seconds*1e3)}
		}
	}
	if best.Seconds == 0 && best.Note == "" {
		best.Note = "no stretch of the critical path or of the path reading the most resident bytes reads more than the largest device holds"
	}
	return best
}

// allReduceBound is the gradient all-reduce a data-parallel plan pays: it
// runs r >= 2 replicas of the whole graph, each device all-reducing every
// weight gradient in buckets one after another, and the simulator's
// all-reduce of b bytes takes at least b over the fastest link plus two
// of the least link latency (a ring of r >= 2, or h >= 2 hosts, moves
// 2(r-1)/r >= 1 times the bytes). The gradients counted are the outputs
// of backward ops read only by one optimizer update, the largest per
// update (the simulator sums a weight's gradients into one buffer).
// Other families reduce only some devices' gradients, or none.
func allReduceBound(p *Problem, family string) BoundPart {
	if family != FamilyDataParallel {
		return BoundPart{}
	}
	g := p.Graph
	most := map[graph.OpID]int64{}
	for t := range g.Tensors {
		tn := &g.Tensors[t]
		if tn.Kind != graph.Activation || tn.Producer == graph.NoOp || g.Ops[tn.Producer].Phase != graph.Backward {
			continue
		}
		readers := distinctOps(tn.Consumers)
		if len(readers) != 1 || g.Ops[readers[0]].Phase != graph.Update {
			continue
		}
		most[readers[0]] = max(most[readers[0]], tn.Bytes())
	}
	var bytes int64
	for _, b := range most {
		bytes += b
	}
	c := p.Costs.Cluster
	bw, lat := 0.0, math.Inf(1)
	for a := range c.Devices {
		for b := range c.Devices {
			if a != b {
				l := c.Path(a, b)
				bw, lat = max(bw, l.Bandwidth), min(lat, l.Latency)
			}
		}
	}
	if bytes == 0 || bw <= 0 || math.IsInf(lat, 1) {
		return BoundPart{Note: "no weight gradients to reduce, or one device"}
	}
	return BoundPart{Seconds: float64(bytes)/bw + 2*lat, Note: fmt.Sprintf("%d gradient bytes over the fastest link (%.3g GB/s)", bytes, bw/1e9)}
}

// lpBound is the LP relaxation's bound, the same for every family.
func lpBound(p *Problem, _ string) BoundPart { return p.boundFacts().lp }

// LP relaxation limits: past lpMaxColumns variables the LP is skipped.
const lpMaxColumns = 20000

// solveLPBound solves the relaxed assignment LP over the cost table's
// device classes: each op's work split over the classes in any
// fractions, each class's devices busy at most T, each class's memory
// holding the resident shares of the work it takes; minimise T. Ops are
// aggregated into groups of like ratios, each group priced at its least
// ratio, which only loosens the LP (docs/model.md); the result is shaved
// by 1e-6 for the solver's tolerance.
func solveLPBound(p *Problem) BoundPart {
	t := p.Costs
	g := p.Graph
	classes := t.Classes()
	nc := len(classes)
	if nc < 2 {
		return BoundPart{Note: "one class of devices: the LP is the work bound"}
	}
	share := residentShare(g)
	type group struct {
		work, res float64 // fastest seconds, resident bytes (zero-time ops)
		rho       []float64
		sigma     float64
		runs      []bool
	}
	var groups []*group
	index := map[string]int{}
	var total float64
	for op := range g.Ops {
		id := graph.OpID(op)
		fast := t.FastestTime(id)
		if math.IsInf(fast, 1) || math.IsNaN(fast) {
			return BoundPart{Note: fmt.Sprintf("op %q runs nowhere", g.Ops[op].Name)}
		}
		if fast <= 0 && share[op] <= 0 {
			continue
		}
		runs := make([]bool, nc)
		rho := make([]float64, nc)
		key := make([]byte, 0, 4*nc+4)
		for c, cl := range classes {
			runs[c] = t.CanRun(id, cl[0])
			if runs[c] && fast > 0 {
				rho[c] = t.OpTime(id, cl[0]) / fast
			}
			q := int64(-1)
			if runs[c] {
				q = int64(math.Floor(8 * math.Log2(max(rho[c], 1))))
			}
			key = fmt.Appendf(key, "%d,", q)
		}
		var sigma float64
		if fast > 0 {
			sigma = share[op] / fast
			if sigma > 0 {
				key = fmt.Appendf(key, "s%d", int64(math.Floor(4*math.Log2(sigma))))
			} else {
				key = append(key, 'z')
			}
		} else {
			key = append(key, 'r') // takes no time: only its resident share
		}
		k := string(key)
		i, ok := index[k]
		if !ok {
			i = len(groups)
			index[k] = i
			groups = append(groups, &group{rho: rho, sigma: sigma, runs: runs})
		}
		gr := groups[i]
		if fast > 0 {
			if ok {
				for c := range rho {
					gr.rho[c] = min(gr.rho[c], rho[c])
				}
				gr.sigma = min(gr.sigma, sigma)
			}
			gr.work += fast
			total += fast
		} else {
			gr.res += share[op]
		}
	}
	if total <= 0 {
		return BoundPart{Note: "no op takes time"}
	}
	if cols := len(groups)*nc + 1; cols > lpMaxColumns {
		return BoundPart{Note: fmt.Sprintf("skipped: %d groups × %d classes past the %d-column budget", len(groups), nc, lpMaxColumns)}
	}
	// Rows: one per group (its fractions sum to at least 1), then per
	// class its time (≤ 0, T moved left) and its memory (≤ 1, scaled by
	// the class's memory). Columns: each group's fraction on each class
	// it may run on, then T in units of the total work.
	lp := &cbc.Problem{}
	row := func(lo, hi float64) { lp.RowLower, lp.RowUpper = append(lp.RowLower, lo), append(lp.RowUpper, hi) }
	for range groups {
		row(1, math.Inf(1))
	}
	mem := make([]float64, nc)
	for c, cl := range classes {
		for _, d := range cl {
			mem[c] += float64(t.Cluster.Devices[d].Memory)
		}
		row(math.Inf(-1), 0)
		row(math.Inf(-1), 1)
	}
	column := func(col []cbc.Entry, obj float64) {
		lp.Cols = append(lp.Cols, col)
		lp.ColLower, lp.ColUpper, lp.Obj = append(lp.ColLower, 0), append(lp.ColUpper, math.Inf(1)), append(lp.Obj, obj)
	}
	for i, gr := range groups {
		for c := range classes {
			if !gr.runs[c] {
				continue
			}
			col := []cbc.Entry{{Row: i, Value: 1}}
			var memBytes float64
			if gr.work > 0 {
				col = append(col, cbc.Entry{Row: len(groups) + 2*c, Value: gr.rho[c] * gr.work / total})
				memBytes = gr.sigma * gr.work
			} else {
				memBytes = gr.res
			}
			if memBytes > 0 {
				col = append(col, cbc.Entry{Row: len(groups) + 2*c + 1, Value: memBytes / mem[c]})
			}
			column(col, 0)
		}
	}
	var tcol []cbc.Entry
	for c, cl := range classes {
		tcol = append(tcol, cbc.Entry{Row: len(groups) + 2*c, Value: -float64(len(cl))})
	}
	column(tcol, 1)
	sol, err := cbc.SolveLP(lp)
	if err != nil {
		return BoundPart{Note: fmt.Sprintf("skipped: %v (no plan fits when the LP is infeasible)", err)}
	}
	T := sol.X[len(sol.X)-1] * total * (1 - 1e-6)
	return BoundPart{Seconds: T, Note: fmt.Sprintf("%d op groups × %d device classes", len(groups), nc)}
}

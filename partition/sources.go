package partition

import (
	"context"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/progress"
)

// Pure sources are units with no predecessor, one successor (their
// consumer), no launches and no compute (under a billionth of the
// graph's) on any class, no scratch, no ban and no separate-rule group: the weights an ONNX export feeds through
// Identity ops (inception_v3's training step has 84, each with its Adam
// update). A split may put one in any stage up to its consumer's, so the
// downsets of a graph with w of them number at least 2^w, and the proof
// on the unit graph (proveOnUnits) cannot enumerate them. Placing one
// with its consumer is no dominance: there it adds its update (and
// all-reduce) to the consumer's stage, while placed earlier it adds only
// its output bytes to that stage's backward receive, which the stage
// before can pay for out of its slack.
//
// sourceBound proves such graphs instead by a lower bound that charges
// every source to its consumer's stage, at the least it can cost that
// stage, and an upper bound built from the bound's own split:
//
// Lower bound. Take any split of the unit graph whose stages each hold a
// unit that is not a pure source. Dropping the sources leaves a split of
// the core graph (the sources have no predecessors, so each downset minus
// them is a downset of the core) on the same devices, positions and
// stage count. A core stage's cost model here is the real one on the
// core units (their compute, core tensors' cut bytes, core parameters,
// stash and scratch) plus, for each source whose consumer is in the
// stage, min(its update time on the stage's class, its output bytes over
// the bandwidth of the link the stage receives on) per step, /M per
// micro-batch. In the real split every term is at least that: the
// stage's compute is at least its core units'; the cut bytes a stage sends and receives are
// the core's plus the sources' in flight (send is monotone in bytes);
// the all-reduce and memory only grow with parameters and stash; and a
// source whose consumer is in the stage is either there (its update is
// in the stage's per-step time) or earlier (its bytes are in the stage's
// receive, at that link's bandwidth). So every stage of the real split
// costs at least its core stage in the bound model, and since the
// objective (max or sum of stage times) is monotone, the bound model's
// optimum over core splits is at most the optimum over unit splits. The
// bound does not cover a split with a stage made only of pure sources (a
// stage of idle devices, as the relaxation's certificate also assumes).
//
// Upper bound. The bound's optimal core split is made a real split:
// each source goes with its consumer, then, while the slowest stage is a
// stage whose sources receive cheaper than they update, those sources
// move to the stage before; the best of these, and the best split over
// the prefixes of its unit order (a chain searched as pipedream does),
// is a split of the unit graph. When its objective reaches the lower
// bound, it is optimal.

// pureSources marks the pure sources of the unit graph.
func pureSources(u *units, m *model) []bool {
	nc := len(m.classes)
	na := len(m.apartRule)
	src := make([]bool, u.n)
	// Compute under a billionth of the graph's is float dust (a
	// zero-FLOP op's time on a roofline); the bound drops it anyway.
	var total float64
	for v := 0; v < u.n; v++ {
		total += m.fastest(v)
	}
	dust := 1e-9 * total
	for v := 0; v < u.n; v++ {
		if len(u.pred[v]) != 0 || len(u.succ[v]) != 1 || m.temp[v] != 0 {
			continue
		}
		ok := true
		for k := 0; k < nc && ok; k++ {
			i := v*nc + k
			ok = m.fwd[i]+m.bwd[i] <= dust && m.banned[i] == 0
		}
		for x := 0; x < na && ok; x++ {
			ok = m.apart[v*na+x] == 0
		}
		src[v] = ok
	}
	return src
}

// coreBound is the core graph (the unit graph without its pure sources)
// with the lower-bound model of sourceBound, and the core unit of every
// unit (its consumer's for a source).
type coreBound struct {
	u    *units
	m    *model
	of   []int32
	srcs []bool
}

func newCoreBound(u *units, m *model, src []bool) *coreBound {
	of := make([]int32, u.n)
	n := int32(0)
	for v := range u.n {
		if !src[v] {
			of[v] = n
			n++
		}
	}
	for v := range u.n {
		if src[v] {
			of[v] = of[u.succ[v][0]]
		}
	}
	// The unit numbering is topological, so is its restriction.
	cu := &units{n: int(n), training: u.training, ops: make([][]graph.OpID, n),
		succ: make([][]int32, n), pred: make([][]int32, n), outT: make([][]int32, n), inT: make([][]int32, n)}
	for v := range u.n {
		if src[v] {
			continue
		}
		cu.ops[of[v]] = u.ops[v]
		for _, s := range u.succ[v] {
			cu.succ[of[v]] = append(cu.succ[of[v]], of[s])
		}
		for _, p := range u.pred[v] {
			if !src[p] {
				cu.pred[of[v]] = append(cu.pred[of[v]], of[p])
			}
		}
	}
	// A source's tensors go to its consumer only; the core's stay.
	for _, t := range u.tensors {
		if src[t.producer] {
			continue
		}
		cons := make([]int32, len(t.consumers))
		for i, x := range t.consumers {
			cons[i] = of[x]
		}
		k := int32(len(cu.tensors))
		cu.tensors = append(cu.tensors, crossTensor{bytes: t.bytes, producer: of[t.producer], consumers: cons})
		cu.outT[of[t.producer]] = append(cu.outT[of[t.producer]], k)
		for _, x := range cons {
			cu.inT[x] = append(cu.inT[x], k)
		}
	}
	cm := aggregate(m, cu.n, len(m.classes), of, src)
	// Credit pairs: each class with each distinct bandwidth of the links
	// its stages receive on.
	cm.creditAt = make([][]int, len(m.classes))
	var bws []float64
	for k := range m.classes {
		cl := &m.classes[k]
		first := len(cm.creditOf)
		for p := range cl.devices {
			bw := cl.prev[p].Bandwidth
			j := slices.Index(bws[first:], bw)
			if j < 0 {
				j = len(bws) - first
				bws = append(bws, bw)
				cm.creditOf = append(cm.creditOf, k)
			}
			cm.creditAt[k] = append(cm.creditAt[k], first+j)
		}
		cm.creditAt[k] = append(cm.creditAt[k], first) // position n: no stage starts there
	}
	nj, nc := len(cm.creditOf), len(m.classes)
	cm.credit = make([]float64, cu.n*nj)
	for v := range u.n {
		if !src[v] {
			continue
		}
		var b int64
		for _, t := range u.outT[v] {
			b += u.tensors[t].bytes
		}
		for j, k := range cm.creditOf {
			recv := 0.0
			if b > 0 {
				recv = float64(b) / bws[j]
			}
			cm.credit[int(of[v])*nj+j] += min(m.upd[v*nc+k], recv)
		}
	}
	return &coreBound{u: cu, m: cm, of: of, srcs: src}
}

// sourceBound proves pl (the best split found at its M, value V) optimal
// over the unit graph when the graph's downsets are too many only
// because of its pure sources (see above), or finds a better split and
// proves that. It reports whether it proved the plan (now possibly
// replaced) optimal, and otherwise the lower bound it found (0: none).
func (p *Problem) sourceBound(ctx context.Context, pl *Plan, info *ExactInfo, deadline time.Time) (bool, float64, error) {
	src := pureSources(p.u, p.m)
	if !slices.Contains(src, true) {
		return false, 0, nil
	}
	task := progress.From(ctx).Start("exact: bounding with the pure sources charged to their consumers", 0)
	defer task.Done()
	c := newCoreBound(p.u, p.m, src)
	l, err := idealLatticeBy(c.u, c.m, p.Options.MaxIdeals, deadline)
	if errors.Is(err, errTooManyIdeals) || errors.Is(err, errDeadline) {
		return false, 0, nil
	} else if err != nil {
		return false, 0, err
	}
	l.anyOrder = true
	M := pl.MicroBatches
	// The plan's own core split, realised, may already be better: a
	// tighter bound prunes the search below harder.
	if st := p.planStages(pl); st != nil {
		coreStage := make([]int, c.u.n)
		for v := range p.u.n {
			if !src[v] {
				coreStage[c.of[v]] = pl.OpStage[p.u.ops[v][0]]
			}
		}
		if ub := c.realise(p, coreStage, st, M, deadline); ub != nil && ub.value < pl.value*(1-1e-12) {
			np := p.report("exact", ub)
			np.Warnings = append(np.Warnings, pl.Warnings...)
			*pl = *np
		}
	}
	work := int64(proveWork)
	lb, err := solve(p, l, M, pl.value, deadline, &work)
	if errors.Is(err, errWork) || errors.Is(err, errDeadline) {
		return false, 0, nil
	} else if err != nil {
		return false, 0, err
	}
	proven := func(lbv float64) {
		*info = ExactInfo{Units: p.u.n, ReducedUnits: p.u.n, Downsets: l.n, LowerBoundMs: ms(lbv), Optimal: true}
		pl.Exact = info
	}
	if lb == nil || pl.value <= lb.value*(1+1e-9) {
		// No core split beats the plan, so no split does.
		proven(pl.value)
		return true, 0, nil
	}
	coreStage := make([]int, c.u.n)
	for i, x := range lb.stages {
		for _, v := range l.stageUnits(x.from, x.to) {
			coreStage[v] = i
		}
	}
	if ub := c.realise(p, coreStage, lb.stages, M, deadline); ub != nil && ub.value < pl.value*(1-1e-12) {
		np := p.report("exact", ub)
		np.Warnings = append(np.Warnings, pl.Warnings...)
		*pl = *np
	}
	if pl.value <= lb.value*(1+1e-9) {
		proven(lb.value)
		return true, 0, nil
	}
	return false, lb.value, nil
}

// planStages is the stages of pl as the search places them (class,
// replicas, position), or nil when a stage's devices are not a run of
// one class.
func (p *Problem) planStages(pl *Plan) []solStage {
	st := make([]solStage, len(pl.Stages))
	for i, x := range pl.Stages {
		if len(x.DeviceIndex) == 0 {
			return nil
		}
		k, pos := -1, -1
		for c := range p.m.classes {
			if j := slices.Index(p.m.classes[c].devices, x.DeviceIndex[0]); j >= 0 {
				k, pos = c, j
			}
		}
		if k < 0 {
			return nil
		}
		st[i] = solStage{class: k, r: x.Replicas, pos: pos}
	}
	return st
}

// realise makes the core split putting core unit v in stage
// coreStage[v], on the devices of stages, a split of the unit graph (see
// the upper bound above) and returns the best it finds, or nil.
func (c *coreBound) realise(p *Problem, coreStage []int, stages []solStage, M int, deadline time.Time) *solution {
	u, m := p.u, p.m
	nc := len(m.classes)
	s := &solution{M: M, stages: stages}
	stageOf := make([]int, u.n)
	for v := range u.n {
		stageOf[v] = coreStage[c.of[v]]
	}
	// cheaper[v]: source v, in its consumer's stage, receives for less
	// than it updates there.
	cheaper := make([]bool, u.n)
	for v := range u.n {
		x := s.stages[stageOf[v]]
		if !c.srcs[v] || stageOf[v] == 0 {
			continue
		}
		var b int64
		for _, t := range u.outT[v] {
			b += u.tensors[t].bytes
		}
		cheaper[v] = float64(b)/m.classes[x.class].prev[x.pos].Bandwidth < m.upd[v*nc+x.class]
	}
	var best *solution
	try := func(stageOf []int) []float64 {
		sol, times := c.splitOf(p, s, stageOf)
		if sol != nil && (best == nil || sol.value < best.value) {
			best = sol
		}
		return times
	}
	for range s.stages {
		times := try(stageOf)
		if times == nil {
			break
		}
		worst := 0
		for i, t := range times {
			if t > times[worst] {
				worst = i
			}
		}
		moved := false
		for v := range u.n {
			if cheaper[v] && stageOf[v] == worst {
				stageOf[v]--
				cheaper[v], moved = false, true
			}
		}
		if !moved {
			break
		}
	}
	// The prefixes of the best split's unit order may hold a better one.
	if best != nil {
		if sol, err := solve(p, best.lat, s.M, best.value, deadline, nil); err == nil && sol != nil && sol.value < best.value {
			best = sol
		}
	}
	return best
}

// splitOf is the split of the unit graph putting unit v in stage
// stageOf[v] on the devices of core split s, as a solution on the chain
// of its stages' units (each stage's in unit order), with each stage's
// time; nil when it breaks a memory limit.
func (c *coreBound) splitOf(p *Problem, s *solution, stageOf []int) (*solution, []float64) {
	u := p.u
	order := make([]int32, u.n)
	for v := range order {
		order[v] = int32(v)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return stageOf[a] - stageOf[b] })
	l := orderLattice(u, p.m, order)
	st := slices.Clone(s.stages)
	end := int32(0)
	for i := range st {
		st[i].from = end
		for int(end) < u.n && stageOf[order[end]] == i {
			end++
		}
		st[i].to = end
	}
	v := evaluate(p, l, s.M, st)
	if math.IsInf(v, 1) {
		return nil, nil
	}
	sm := newSums(l.nc)
	times := make([]float64, len(st))
	for i, x := range st {
		l.sums(sm, x.from, x.to)
		sc := p.m.stage(sm, x.class, l.cut[x.from], l.cut[x.to], x.r, x.pos, s.M)
		times[i] = sc.time
	}
	return &solution{M: s.M, value: v, stages: st, lat: l}, times
}

// orderLattice is the chain of prefixes of a topological order of the
// units (pipedream's lattice for another order), with bitsets.
func orderLattice(u *units, m *model, order []int32) *lattice {
	l := newLattice(u, m)
	l.words = (u.n + 63) / 64
	l.bits = make([]uint64, l.words)
	cur := make([]uint64, l.words)
	for i, v := range order {
		cur[v>>6] |= 1 << (v & 63)
		l.bits = append(l.bits, cur...)
		l.extend(u, m, int32(i), v, func(x int32) bool { return cur[x>>6]&(1<<(x&63)) != 0 })
	}
	l.finishChain()
	return l
}

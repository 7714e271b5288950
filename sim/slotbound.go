package sim

import (
	"cmp"
	"slices"

	"github.com/opplace/opplace/graph"
)

// slotBound is a lower bound on the step from the order in which each
// device runs the slots of its stage's schedule (SlotOrder): a device
// starts no task of a slot before every task of its earlier slots is
// done, and runs one task at a time. A slot's per-micro-batch tasks are
// those of one phase on one device for one micro-batch. s simulates one
// micro-batch of the step's size (its M is 1); the step has p's.
//
// Slot by slot in the order they wait on one another, it bounds when
// each starts (when the device's slot before it ends), when it ends
// (its start plus its tasks' work: perRun, one run with the
// recomputation charged before it) and when the ops that meet other
// devices run: an op that reads, for the same micro-batch, what another
// device's op wrote starts no earlier than that op ends; an op that
// another device reads ends no earlier than its slot's start plus the
// single runs (one) of the ops of its slot it descends from, nor than
// any such reading op of its slot it descends from starts plus the runs
// of the ops between; and a slot ends no earlier than such a reading op
// starts plus the runs of the ops of the slot that descend from it.
// A replicated device's gradient buckets are reduced one after another
// once the last slot has begun (their last gradients are made there),
// its updates run after them, and under ZeRO its parameters are
// gathered a bucket at a time after the updates.
//
// Transfers, other syncs and collectives, and the channels they share
// are left out, which only lengthen the step. In a pipeline this is the
// schedule's fill and drain, exact for uniform stages on free links.
func (s *state) slotBound(sched Schedule, one, perRun []float64, segReaders [][]graph.OpID) float64 {
	g := s.g
	M := s.div
	order, nslots := slotOrders(sched, s.training, len(s.stages), M)
	slotDev := make([]int32, s.nd) // the devices that run ops, numbered densely
	for d := range slotDev {
		slotDev[d] = -1
	}
	ndev := int32(0)
	for op := range g.Ops {
		if d := s.dev[op]; slotDev[d] < 0 {
			slotDev[d] = ndev
			ndev++
		}
	}
	node := func(op graph.OpID, mb int) int { // an op run once per step: mb 0
		j := slotOf(g.Ops[op].Phase, s.training, order[s.opStage[op]], M, nslots, mb)
		return int(slotDev[s.dev[op]])*nslots + int(j)
	}
	nn := int(ndev) * nslots
	work := make([]float64, nn)
	for op := range g.Ops {
		id := graph.OpID(op)
		if !s.perMB[op] {
			work[node(id, 0)] += one[op]
			continue
		}
		for mb := range M {
			work[node(id, mb)] += perRun[op]
		}
	}

	// The ops that meet other devices: readers (whose writers are
	// elsewhere) and writers (read elsewhere), with their writers.
	b := newBorder(s, one, segReaders)
	for op := range g.Ops {
		o := graph.OpID(op)
		for _, in := range s.inputs[op] {
			if q := g.Tensors[in].Producer; q != graph.NoOp {
				b.cross(q, o)
			}
		}
		for _, q := range s.ctrl[op] {
			b.cross(q, o)
		}
	}
	if !b.sums() {
		return 0
	}
	nb := len(b.ops)
	// startOf[i*M+mb] bounds reader i's start, endOf[i*M+mb] writer i's
	// end, at micro-batch mb.
	startOf := make([]float64, nb*M)
	endOf := make([]float64, nb*M)
	type at struct{ i, mb int32 }
	atNode := make([][]at, nn) // the border ops of each slot
	next := make([][]int, nn)  // the slots waiting on a slot's writers
	indeg := make([]int, nn)
	for i, op := range b.ops {
		for mb := range M {
			n := node(op, mb)
			atNode[n] = append(atNode[n], at{int32(i), int32(mb)})
			for _, w := range b.writers[i] {
				m := node(b.ops[w], mb)
				next[m] = append(next[m], n)
				indeg[n]++
			}
		}
	}
	end := make([]float64, nn)
	var queue []int
	for n := range nn {
		if n%nslots > 0 {
			indeg[n]++
		}
		if indeg[n] == 0 {
			queue = append(queue, n)
		}
	}
	var most float64
	done := 0
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		done++
		start := 0.0
		if n%nslots > 0 {
			start = end[n-1]
		}
		e := start + work[n]
		for _, a := range atNode[n] {
			st := start
			for _, w := range b.writers[a.i] {
				st = max(st, endOf[int(w)*M+int(a.mb)])
			}
			startOf[int(a.i)*M+int(a.mb)] = st
			if b.reads[a.i] {
				e = max(e, st+b.after[a.i])
			}
		}
		for _, a := range atNode[n] {
			if !b.written[a.i] {
				continue
			}
			en := start + b.before[a.i]
			for _, r := range b.between[a.i] {
				en = max(en, startOf[int(r.reader)*M+int(a.mb)]+r.w)
			}
			endOf[int(a.i)*M+int(a.mb)] = en
		}
		end[n] = e
		most = max(most, e)
		release := func(m int) {
			indeg[m]--
			if indeg[m] == 0 {
				queue = append(queue, m)
			}
		}
		if n%nslots < nslots-1 {
			release(n + 1)
		}
		for _, m := range next[n] {
			release(m)
		}
	}
	if done < nn {
		return 0 // the slots wait on one another: the schedule deadlocks
	}
	// A replicated device reduces its gradients once their last
	// micro-batch is done, in its last slot, a bucket at a time; then
	// it updates, then (ZeRO) gathers the parameters, a bucket at a time.
	for d, list := range s.devBuckets {
		if len(list) == 0 || slotDev[d] < 0 {
			continue
		}
		last := int(slotDev[d])*nslots + nslots - 1
		t := 0.0
		if nslots > 1 {
			t = end[last-1]
		}
		if s.synthetic[d] >= 0 {
			t = end[last] // the parameters, once every op of d ran
		}
		for _, bi := range list {
			bk := &s.buckets[bi]
			t += collectiveTime(s.c, bk.kind, bk.devices, bk.bytes, s.groupOnHost(d))
		}
		for _, op := range s.updates[d] {
			t += one[op]
		}
		most = max(most, t)
	}
	return most
}

// slotBorderBudget bounds the ops slotBound's sums visit: beyond it (a
// placement scattering ops over many devices) the bound is not worked
// out.
const slotBorderBudget = 1 << 23

// border is the ops of a plan that meet other devices within a
// micro-batch, for slotBound: each reads what another device's op
// writes, or writes what another device reads, or both.
type border struct {
	s       *state
	one     []float64
	index   map[graph.OpID]int32
	ops     []graph.OpID
	writers [][]int32 // per reader: the border ops it reads from
	reads   []bool    // it reads from another device
	written []bool    // another device reads it
	// before[i] is op i's single run plus those of the ops of its slot
	// it descends from; after[i] plus those that descend from it;
	// between[i] for writer i, its slot's readers it descends from (or
	// is) and the runs from one to the other.
	before, after []float64
	between       [][]betweenRun
	// delay[t] is how long t's readers wait for its tensor-parallel
	// syncs, one after another on its device's stream, after its
	// producer's run.
	delay []float64
	// opSegs[op] lists the recomputed segments whose saved tensors
	// backward op reads, segReaders[sg] those readers (nil without
	// recomputation).
	opSegs     [][]int32
	segReaders [][]graph.OpID
}

type betweenRun struct {
	reader int32
	w      float64
}

// newBorder starts the border of s's plan; segReaders are the backward
// readers of each recomputed segment (recompute.backwardReaders, nil
// without recomputation).
func newBorder(s *state, one []float64, segReaders [][]graph.OpID) *border {
	b := &border{s: s, one: one, index: map[graph.OpID]int32{}, delay: make([]float64, len(s.g.Tensors)), segReaders: segReaders}
	if segReaders != nil {
		b.opSegs = make([][]int32, len(s.g.Ops))
		for sg, readers := range segReaders {
			for _, c := range readers {
				b.opSegs[c] = append(b.opSegs[c], int32(sg))
			}
		}
	}
	if s.syncLeft == nil {
		return b
	}
	for op, syncs := range s.split.Syncs {
		id := graph.OpID(op)
		if s.tp[s.dev[op]] < 2 || !s.perMB[op] {
			continue
		}
		group := s.stages[s.opStage[op]].Replicas[0]
		for _, y := range syncs {
			if !s.within(id, y) && !s.syncOnce(id, y) {
				_, dur := s.syncCost(id, y, group)
				b.delay[y.Tensor] += dur
			}
		}
	}
	return b
}

func (b *border) at(op graph.OpID) int32 {
	if i, ok := b.index[op]; ok {
		return i
	}
	i := int32(len(b.ops))
	b.index[op] = i
	b.ops = append(b.ops, op)
	b.writers = append(b.writers, nil)
	b.reads = append(b.reads, false)
	b.written = append(b.written, false)
	return i
}

// cross records that o reads what q writes, when both run per
// micro-batch on different devices.
func (b *border) cross(q, o graph.OpID) {
	s := b.s
	if !s.perMB[q] || !s.perMB[o] || s.dev[q] == s.dev[o] {
		return
	}
	w, r := b.at(q), b.at(o)
	b.written[w] = true
	b.reads[r] = true
	b.writers[r] = append(b.writers[r], w)
}

// sums works out before, after and between; false when they would
// visit more than slotBorderBudget ops.
func (b *border) sums() bool {
	s, g := b.s, b.s.g
	n := len(b.ops)
	b.before, b.after, b.between = make([]float64, n), make([]float64, n), make([][]betweenRun, n)
	stamp := make([]int32, len(g.Ops))
	inDesc := make([]int32, len(g.Ops))
	mark := int32(0)
	budget := slotBorderBudget
	var stack, seen, desc []graph.OpID
	// walk visits op and the ops of its slot it descends from (up) or
	// that descend from it, within keep when given, and sums their runs;
	// seen lists them.
	walk := func(op graph.OpID, up bool, keep func(graph.OpID) bool) float64 {
		mark++
		d, phase := s.dev[op], g.Ops[op].Phase
		total := 0.0
		stamp[op] = mark
		stack = append(stack[:0], op)
		seen = seen[:0]
		for len(stack) > 0 && budget > 0 {
			x := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			budget--
			total += b.one[x]
			seen = append(seen, x)
			visit := func(y graph.OpID) {
				if stamp[y] != mark && s.perMB[y] && s.dev[y] == d && g.Ops[y].Phase == phase && (keep == nil || keep(y)) {
					stamp[y] = mark
					stack = append(stack, y)
				}
			}
			if up {
				for _, in := range s.inputs[x] {
					if q := g.Tensors[in].Producer; q != graph.NoOp {
						visit(q)
					}
				}
				for _, q := range s.ctrl[x] {
					visit(q)
				}
				continue
			}
			for _, out := range g.Ops[x].Outputs {
				for _, c := range s.consumers[out] {
					visit(c)
				}
			}
			for _, c := range s.ctrlSucc[x] {
				visit(c)
			}
		}
		return total
	}
	// longest is the longest chain of single runs and the syncs between
	// them over set (an op's slot ops it descends from, or that descend
	// from it, itself included), from its sources to each op's end: the
	// device waits for a tensor-parallel sync before the reader of its
	// tensor starts.
	dist := make([]float64, len(g.Ops))
	inSet := make([]int32, len(g.Ops))
	setMark := int32(0)
	longest := func(set []graph.OpID) {
		setMark++
		for _, x := range set {
			inSet[x] = setMark
		}
		slices.SortFunc(set, func(a, c graph.OpID) int { return cmp.Compare(s.pos[a], s.pos[c]) })
		for _, x := range set {
			var from float64
			for _, in := range s.inputs[x] {
				if q := g.Tensors[in].Producer; q != graph.NoOp && inSet[q] == setMark {
					from = max(from, dist[q]+b.delay[in])
				}
			}
			for _, q := range s.ctrl[x] {
				if inSet[q] == setMark {
					from = max(from, dist[q])
				}
			}
			dist[x] = from + b.one[x]
		}
	}
	// recomputed is the forward time of the segments recomputed within
	// a window of seen's ops' runs (walk's last, stamped with mark): a
	// segment's forward runs once per micro-batch, added to the run of
	// its first backward reader (all on one device, in one slot), which
	// falls in the window when one of seen reads it and, where in is
	// given, every reader is in (the window opens at the slot's start
	// otherwise).
	segMark := make([]int32, len(b.segReaders))
	recomputed := func(in func(graph.OpID) bool) float64 {
		var t float64
		if b.opSegs == nil {
			return 0
		}
		for _, x := range seen {
			for _, sg := range b.opSegs[x] {
				if segMark[sg] == mark {
					continue
				}
				segMark[sg] = mark
				if in == nil || !slices.ContainsFunc(b.segReaders[sg], func(r graph.OpID) bool { return !in(r) }) {
					t += s.rc.time[sg]
				}
			}
		}
		return t
	}
	// The writers of each slot group (device and phase).
	type group struct {
		d     int
		phase graph.Phase
	}
	writers := map[group][]int32{}
	for i, op := range b.ops {
		if b.written[i] {
			k := group{s.dev[op], g.Ops[op].Phase}
			writers[k] = append(writers[k], int32(i))
			b.before[i] = walk(op, true, nil)
			b.before[i] += recomputed(nil)
			longest(seen)
			b.before[i] = max(b.before[i], dist[op])
		}
	}
	for i, op := range b.ops {
		if !b.reads[i] {
			continue
		}
		b.after[i] = walk(op, false, nil)
		r := int32(i) + 1
		for _, x := range seen { // op's descendants in its slot
			inDesc[x] = r
		}
		inR := func(y graph.OpID) bool { return inDesc[y] == r }
		b.after[i] += recomputed(inR)
		desc = append(desc[:0], seen...)
		longest(desc)
		for _, x := range desc {
			b.after[i] = max(b.after[i], dist[x])
		}
		for _, w := range writers[group{s.dev[op], g.Ops[op].Phase}] {
			wop := b.ops[w]
			if inDesc[wop] != r {
				continue
			}
			chain := dist[wop]
			sum := walk(wop, true, inR)
			sum += recomputed(inR)
			b.between[w] = append(b.between[w], betweenRun{int32(i), max(sum, chain)})
		}
	}
	return budget > 0
}

package partition

import (
	"cmp"
	"errors"
	"math"
	"slices"
	"sort"
	"time"
)

// solution is a partition found by a search, in pipeline order.
type solution struct {
	M      int
	value  float64 // the objective
	stages []solStage
	lat    *lattice
}

type solStage struct {
	from, to int32 // ideals: the stage is to minus from
	class    int
	r, pos   int
}

var errDeadline = errors.New("time limit")

// errWork is solve passing its work budget.
var errWork = errors.New("work budget")

// resources indexes vectors u (devices per class) in mixed radix.
//
// Twin classes (twins) are one-device classes that no stage can tell
// apart: the same times, launches and bans for every unit, the same
// memory and the same links (the dnn-partitioning clusters give each
// accelerator its own type so that no stage is replicated, which makes
// six classes of one device out of six identical accelerators). Any split
// using some of a group of twins can swap them for the first ones at no
// cost, so only canonical vectors are searched: the twins available form
// a prefix of their group, and a stage on a twin takes the last one
// available. This cuts 2^6 vectors to 7 for six twins and is exact.
type resources struct {
	count  []int // devices per class
	stride []int
	n      int
	total  []int // devices in vector
	// idx[i] numbers the canonical vectors 0..live-1 (-1: not canonical);
	// the search's states are (ideal, idx, stages).
	idx  []int32
	live int
	// byClass[k][c] lists the canonical vectors whose class-k count is c
	// (and, for a twin, where class k is the last twin available), by
	// total; byTotal[k][c][t] is where those with total t start (the
	// order of the vectors does not matter to the search: each writes
	// its own states).
	byClass [][][]int32
	byTotal [][][]int32
}

// twinGroups numbers each class's group of twins (classes of one device
// with identical costs and links), -1 for a class with none.
func twinGroups(m *model) []int {
	nc := len(m.classes)
	group := make([]int, nc)
	for k := range group {
		group[k] = -1
	}
	n := len(m.fwd) / max(nc, 1)
	same := func(a, b int) bool {
		ca, cb := &m.classes[a], &m.classes[b]
		if len(ca.devices) != 1 || len(cb.devices) != 1 || ca.memory != cb.memory ||
			!slices.Equal(ca.next, cb.next) || !slices.Equal(ca.prev, cb.prev) || !slices.Equal(ca.arPerByte, cb.arPerByte) || !slices.Equal(ca.arFixed, cb.arFixed) {
			return false
		}
		for v := 0; v < n; v++ {
			i, j := v*nc+a, v*nc+b
			if m.fwd[i] != m.fwd[j] || m.bwd[i] != m.bwd[j] || m.upd[i] != m.upd[j] ||
				m.fwdL[i] != m.fwdL[j] || m.bwdL[i] != m.bwdL[j] || m.banned[i] != m.banned[j] {
				return false
			}
		}
		return true
	}
	for a := 0; a < nc; a++ {
		if group[a] >= 0 {
			continue
		}
		for b := a + 1; b < nc; b++ {
			if group[b] < 0 && same(a, b) {
				group[a], group[b] = a, a
			}
		}
	}
	return group
}

func newResources(m *model) *resources {
	r := &resources{n: 1}
	for _, cl := range m.classes {
		r.count = append(r.count, len(cl.devices))
		r.stride = append(r.stride, r.n)
		r.n *= len(cl.devices) + 1
	}
	group := twinGroups(m)
	count := func(i, k int) int { return (i / r.stride[k]) % (r.count[k] + 1) }
	// canonical: in each group of twins the available ones come first;
	// last[k]: class k is the last twin available (or no twin).
	canonical := func(i int) bool {
		for k := range r.count {
			if group[k] >= 0 && k > group[k] && count(i, k) == 1 {
				for j := k - 1; j >= 0; j-- {
					if group[j] == group[k] {
						if count(i, j) == 0 {
							return false
						}
						break
					}
				}
			}
		}
		return true
	}
	last := func(i, k int) bool {
		for j := k + 1; j < len(r.count); j++ {
			if group[j] == group[k] && count(i, j) == 1 {
				return false
			}
		}
		return true
	}
	r.total = make([]int, r.n)
	r.idx = make([]int32, r.n)
	r.byClass = make([][][]int32, len(r.count))
	for k := range r.count {
		r.byClass[k] = make([][]int32, r.count[k]+1)
	}
	for i := 0; i < r.n; i++ {
		for k := range r.count {
			r.total[i] += count(i, k)
		}
		if !canonical(i) {
			r.idx[i] = -1
			continue
		}
		r.idx[i] = int32(r.live)
		r.live++
		for k := range r.count {
			c := count(i, k)
			if group[k] < 0 || c == 0 || last(i, k) {
				r.byClass[k][c] = append(r.byClass[k][c], int32(i))
			}
		}
	}
	ndev := 0
	for _, c := range r.count {
		ndev += c
	}
	r.byTotal = make([][][]int32, len(r.count))
	for k := range r.count {
		r.byTotal[k] = make([][]int32, r.count[k]+1)
		for c, list := range r.byClass[k] {
			slices.SortStableFunc(list, func(a, b int32) int { return r.total[a] - r.total[b] })
			start := make([]int32, ndev+2)
			for t := range start {
				start[t] = int32(sort.Search(len(list), func(i int) bool { return r.total[list[i]] >= t }))
			}
			r.byTotal[k][c] = start
		}
	}
	return r
}

// solve is the dynamic programme shared by "pipedream" (on the chain
// lattice) and "exact" (on the ideal lattice):
//
//	F(D, u, n) = min over ideals E ⊋ D, class k, replicas r ≤ u_k of
//	             combine(stage(E \ D, k, r), F(E, u - r·e_k, n - 1))
//
// is the best split of the units outside ideal D into n stages (n capped
// where depth no longer changes memory) using exactly the devices u, the
// stage taking the first free positions of its class. F(V, 0, 0) = 0 and
// the answer is the best F(∅, u, n) over all u and n.
//
// Pruning, all safe for the optimum: a stage or a remainder whose
// fastest-class compute spread over every device it could use exceeds
// the upper bound ub (a known feasible objective) cannot be in a solution
// at least as good; compute only grows as E grows, so such an E is not
// expanded further. Returns nil when nothing fits. With work not nil, it
// takes the device-count vectors of every stage it costs from *work and
// fails with errWork when that runs out: a deterministic budget, where
// a time limit would make the plan depend on the machine.
func solve(p *Problem, l *lattice, M int, ub float64, deadline time.Time, work *int64) (*solution, error) {
	m := l.m
	res := newResources(m)
	nCap := 1
	if m.training && p.Options.Schedule == OneFOneB {
		nCap = min(M, p.Costs.NumDevices())
	}
	nN := nCap + 1
	stride := res.live * nN
	F := make([]float64, l.n*stride)
	for i := range F {
		F[i] = math.Inf(1)
	}
	nextI := make([]int32, l.n*stride)
	move := make([]int32, l.n*stride) // class | r<<8 | n''<<16
	full := l.full()
	F[int(full)*stride] = 0
	bound := ub * (1 + 1e-9)
	fM := float64(M)
	ndev := p.Costs.NumDevices()
	// A stage runs on replicas of one class, so on at most maxR devices:
	// with one device per class (distinct accelerators) every stage's
	// compute must fit the bound on one device, which prunes the stage
	// ends far harder than spreading it over every device left.
	maxR := slices.Max(res.count)
	caps := newCapacities(m, res)
	capAll := caps.prefix[len(caps.prefix)-1] * bound
	// cuttable[i]: ideal i passes capacities.boundary; restNeeds[i] is
	// the fewest devices the units outside it need (0 for the full set).
	cuttable := make([]bool, l.n)
	restNeeds := make([]int32, l.n)
	for i := range cuttable {
		cuttable[i] = math.IsInf(bound, 1) || caps.boundary(l.fast[i]/fM, l.fast[full]/fM, bound)
		if e := int32(i); e != full {
			restNeeds[i] = int32(max(devicesFor(l.restLoad(e, fM), bound), float64(caps.count((l.fast[full]-l.fast[e])/fM, bound))))
		}
	}
	// Twins (see resources) cost a stage alike: a stage costed on one is
	// reused on the others of its group (twinAt stamps the pair it was
	// costed for).
	group := twinGroups(m)
	twinSC := make([]stageCost, len(m.classes))
	twinAt := make([]int64, len(m.classes))
	for k := range twinAt {
		twinAt[k] = -1
	}

	s := newSums(l.nc)
	// alive[e]: some split of the units outside e fits under the bound,
	// so a stage ending at e is worth costing.
	alive := make([]bool, l.n)
	alive[full] = true
	stamp := make([]int32, l.n)
	for i := range stamp {
		stamp[i] = -1
	}
	var queue []int32
	checks := 0
	// On a DAG, the stage ends worth costing are the cuttable ideals
	// whose compute is within a stage's reach: sorted by compute, those
	// above d are found by binary search and a subset test, skipping the
	// walk over every ideal in between (most are not cuttable).
	var cand []int32
	if !l.chain && !l.walk {
		for i := range cuttable {
			if cuttable[i] && i > 0 {
				cand = append(cand, int32(i))
			}
		}
		slices.SortStableFunc(cand, func(a, b int32) int { return cmp.Compare(l.fast[a], l.fast[b]) })
	}
	words := l.words
	for d := full - 1; d >= 0; d-- {
		// The stages before D need devices too: by the same bound as the
		// remainder's, they take at least (compute/M + launches)/ub of
		// them, which caps the devices left for the suffix from D.
		maxTotal := ndev
		if d > 0 {
			need := (l.fast[d]/fM + l.launch[d])
			for maxTotal > 0 && need/float64(ndev-maxTotal+1) > bound {
				maxTotal--
			}
			maxTotal-- // at least one device goes to the stages before D
			maxTotal = min(maxTotal, ndev-caps.count(l.fast[d]/fM, bound))
			// ... and the units from D on need their own devices.
			if maxTotal < 1 || !cuttable[d] || caps.count((l.fast[full]-l.fast[d])/fM, bound) > maxTotal {
				continue
			}
		}
		// The ideals E ⊋ D, breadth-first over the cover edges; on a
		// chain, D+1, D+2, … in order (qi is then E-D-1), starting past
		// those whose remainder cannot run on the devices left.
		first := 0
		if l.chain {
			first = skipHeavyRest(l, d, maxTotal, min(maxTotal, maxR), fM, bound)
			// Charged as the search visiting them would be.
			if work != nil {
				if *work -= int64(first+1) / 2; *work < 0 {
					return nil, errWork
				}
			}
		} else if l.walk {
			queue = append(queue[:0], l.cover[l.coverStart[d]:l.coverStart[d+1]]...)
			for _, e := range queue {
				stamp[e] = d
			}
		} else {
			// Compute never shrinks as an ideal grows, and a stage of more
			// than maxR devices' worth is too big (stageTooBig).
			fd := l.fast[d]
			limit := fd + bound*float64(min(maxTotal, maxR))*fM*(1+1e-9)
			lo := sort.Search(len(cand), func(i int) bool { return l.fast[cand[i]] >= fd })
			queue = queue[:0]
			db := l.bits[int(d)*words : int(d+1)*words]
			for _, e := range cand[lo:] {
				if l.fast[e] > limit {
					break
				}
				if e == d {
					continue
				}
				eb := l.bits[int(e)*words : int(e+1)*words]
				sub := true
				for w, x := range db {
					if x&^eb[w] != 0 {
						sub = false
						break
					}
				}
				if sub {
					queue = append(queue, e)
				}
			}
			// In the order of the downsets (by size, as the walk meets
			// them), so ties between equal splits go as the walk's did.
			if !l.anyOrder {
				slices.Sort(queue)
			}
		}
		for qi := first; ; qi++ {
			var e int32
			if l.chain {
				if e = d + 1 + int32(qi); e > full {
					break
				}
			} else {
				if qi >= len(queue) {
					break
				}
				e = queue[qi]
			}
			// A pair visited costs too, even one pruned at once: on a
			// chain of tens of thousands of units the visits, not the
			// stages costed, are the work (half a unit each; the real
			// models of the tests visit at most about 10 million).
			if work != nil && qi&1 == 0 {
				if *work--; *work < 0 {
					return nil, errWork
				}
			}
			if checks++; checks&0xfff == 0 && !deadline.IsZero() && time.Now().After(deadline) {
				return nil, errDeadline
			}
			// Every stage time is at least its compute spread over r·M
			// plus its launches, which every micro-batch pays.
			fastS := l.fast[e] - l.fast[d]
			launchS := l.launch[e] - l.launch[d]
			if stageTooBig(fastS, launchS, min(maxTotal, maxR), fM, bound) {
				// Neither this stage nor any larger one fits under ub.
				if l.chain {
					break
				}
				continue
			}
			// Cheap test before summing: the stage needs at least rMin
			// devices and the remainder restNeed; together at most
			// maxTotal.
			if l.walk {
				for _, x := range l.cover[l.coverStart[e]:l.coverStart[e+1]] {
					if stamp[x] != d {
						stamp[x] = d
						queue = append(queue, x)
					}
				}
			}
			if launchS > bound || !alive[e] || !cuttable[e] {
				continue
			}
			rMin := max(1, math.Ceil(fastS/(fM*(bound-launchS))-1e-9))
			restLoad := l.restLoad(e, fM)
			restNeed := float64(restNeeds[e])
			if rMin+restNeed > float64(maxTotal) {
				continue
			}
			if work != nil {
				if *work -= int64(res.live); *work < 0 {
					return nil, errWork
				}
			}
			l.sums(s, d, e)
			pair := int64(d)<<32 | int64(e)
			if s.mixed {
				// Larger stages from d hold both groups too, but on a DAG
				// other ideals past e may not: only a chain can stop.
				if l.chain {
					break
				}
				continue
			}
			temp := int64(-1)
			cutIn, cutOut := l.cut[d], l.cut[e]
			tol := 1e-9 * l.fast[full] / fM
			beforeLoad, afterLoad := l.fast[d]/fM-tol, (l.fast[full]-l.fast[e])/fM-tol
			// minRest: the fewest devices the remainder can run on under
			// the bound (1 for the full set, where only the empty
			// remainder counts).
			minRest := 1
			if e != full {
				for minRest <= maxTotal && restLoad/float64(minRest) > bound {
					minRest++
				}
				minRest = max(minRest, int(restNeed))
			}
			for k := range m.classes {
				src := k // the class whose sums stand for k's: its twins'
				if group[k] >= 0 {
					src = group[k]
				}
				if !s.ok[src] {
					continue
				}
				cl := &m.classes[k]
				cnt := res.count[k]
				// The stage's compute on this class bounds its time from
				// below (the fastest class's, used above, is weaker on a
				// slow class).
				compK, launchK := s.fwd[src]-s.fwdL[src], s.fwdL[src]
				if m.training {
					compK += s.bwd[src] - s.bwdL[src]
					launchK += s.bwdL[src]
				}
				for r := 1; r <= min(cnt, maxTotal); r++ {
					if !p.Options.splits(M, r) {
						continue
					}
					if fastS/(float64(r)*fM)+launchS > bound || compK/(float64(r)*fM)+launchK > bound*(1+1e-9) {
						continue
					}
					for uk := r; uk <= cnt; uk++ {
						pos := cnt - uk
						var sc stageCost
						have := false
						list, start := res.byClass[k][uk], res.byTotal[k][uk]
						lo, hi := start[min(r+minRest, maxTotal+1)], start[maxTotal+1]
						if e == full {
							// Only the empty remainder is solved.
							lo, hi = start[r], start[r+1]
						}
						for _, ui := range list[lo:hi] {
							if e == full && int(ui) != r*res.stride[k] {
								continue
							}
							// The stages before d run on devices outside
							// ui, the remainder on those of uRest: each
							// set must carry its compute.
							if capAll-caps.of[ui]*bound < beforeLoad || caps.of[int(ui)-r*res.stride[k]]*bound < afterLoad {
								continue
							}
							if !have {
								have = true
								if g := group[k]; g >= 0 {
									// One device, at position 0, r = 1, and
									// the same links as g's.
									if twinAt[g] == pair {
										sc = twinSC[g]
									} else {
										m.stageInto(&sc, s, g, cutIn, cutOut, r, pos, M)
										twinSC[g], twinAt[g] = sc, pair
									}
								} else {
									m.stageInto(&sc, s, k, cutIn, cutOut, r, pos, M)
								}
								if sc.time > bound || sc.paramBytes > cl.memory {
									break
								}
							}
							uRest := int(ui) - r*res.stride[k]
							base := int(e)*stride + int(res.idx[uRest])*nN
							for n2 := 0; n2 < nN; n2++ {
								G := F[base+n2]
								if math.IsInf(G, 1) {
									continue
								}
								cand := m.combine(sc.time, G)
								nHat := min(n2+1, nCap)
								at := int(d)*stride + int(res.idx[ui])*nN + nHat
								if cand >= F[at] {
									continue
								}
								if temp < 0 {
									temp = l.stageTemp(d, e)
								}
								if memory(&sc, temp, m.alive(n2+1, M), r, M) > cl.memory {
									continue
								}
								F[at] = cand
								alive[d] = true
								nextI[at] = e
								move[at] = int32(k) | int32(r)<<8 | int32(n2)<<16
							}
						}
					}
				}
			}
		}
	}
	best, bestAt := math.Inf(1), -1
	for ui := 0; ui < res.n; ui++ {
		if res.idx[ui] < 0 {
			continue
		}
		for n := 1; n < nN; n++ {
			at := int(res.idx[ui])*nN + n
			if F[at] < best {
				best, bestAt = F[at], ui*nN+n
			}
		}
	}
	if bestAt < 0 {
		return nil, nil
	}
	sol := &solution{M: M, value: best, lat: l}
	d, ui, n := int32(0), bestAt/nN, bestAt%nN
	for d != full {
		at := int(d)*stride + int(res.idx[ui])*nN + n
		e, mv := nextI[at], move[at]
		k, r, n2 := int(mv&0xff), int(mv>>8&0xff), int(mv>>16)
		uk := (ui / res.stride[k]) % (res.count[k] + 1)
		sol.stages = append(sol.stages, solStage{from: d, to: e, class: k, r: r, pos: res.count[k] - uk})
		d, ui, n = e, ui-r*res.stride[k], n2
	}
	return sol, nil
}

// capacities bound how many devices a load needs when the classes
// differ in speed. rho[k] is the least ratio, over the units class k can
// run, of their compute there (launches excluded) to their fastest
// class's: a stage on class k with fastest-class compute f takes at
// least rho[k]·f/(r·M), so a device of class k carries at most bound/rho[k]
// of fastest-class compute per micro-batch. prefix[j] sums the j largest
// of those shares (per unit of bound) over every device.
//
// sets lists, sorted, the distinct share sums of every set of devices
// (by device-count vector). The devices of the stages before a cut D
// carry D's compute and the others the rest, so some set of devices has
// capacity between D's compute and D's compute plus the slack (all the
// capacity less all the compute): a cut outside every such window is in
// no split under the bound (boundary).
type capacities struct {
	prefix []float64
	sets   []float64
	of     []float64 // by device-count vector: its share sum
}

func newCapacities(m *model, res *resources) *capacities {
	nc := len(m.classes)
	n := len(m.fwd) / max(nc, 1)
	var share []float64
	shares := make([]float64, nc)
	c := &capacities{}
	for k := range m.classes {
		rho := math.Inf(1)
		for v := 0; v < n; v++ {
			i := v*nc + k
			f := m.fastest(v)
			if m.banned[i] != 0 || !(f > 0) {
				continue
			}
			c := m.fwd[i] - m.fwdL[i]
			if m.training {
				c += m.bwd[i] - m.bwdL[i]
			}
			rho = min(rho, c/f)
		}
		// Rounding: the ratio of sums is the ratio of terms only up to
		// floating error, so the shares are rounded up a little.
		sh := 1.0
		if rho > 1 && !math.IsInf(rho, 1) {
			sh = 1 / (rho * (1 - 1e-9))
		}
		shares[k] = min(1, sh)
		for range res.count[k] {
			share = append(share, shares[k])
		}
	}
	for i := 0; i < res.n; i++ {
		var sum float64
		for k := range res.count {
			sum += float64((i/res.stride[k])%(res.count[k]+1)) * shares[k]
		}
		c.sets = append(c.sets, sum)
		c.of = append(c.of, sum)
	}
	slices.Sort(c.sets)
	c.sets = slices.Compact(c.sets)
	slices.SortFunc(share, func(a, b float64) int { return cmp.Compare(b, a) })
	c.prefix = make([]float64, len(share)+1)
	for j, x := range share {
		c.prefix[j+1] = c.prefix[j] + x
	}
	return c
}

// count is the fewest devices (at least 1) that can carry load (fastest-
// class compute per micro-batch) under bound; one more than the devices
// when even all of them cannot.
func (c *capacities) count(load, bound float64) int {
	for j := 1; j < len(c.prefix); j++ {
		if load <= c.prefix[j]*bound*(1+1e-9) {
			return j
		}
	}
	return len(c.prefix)
}

// boundary reports whether a cut whose stages before carry load (of
// total, both fastest-class compute per micro-batch) can be in a split
// under bound: whether some set of devices has a capacity between load
// and load plus the slack.
func (c *capacities) boundary(load, total, bound float64) bool {
	slack := c.prefix[len(c.prefix)-1]*bound - total
	tol := 1e-9 * max(total, bound)
	i := sort.SearchFloat64s(c.sets, (load-tol)/bound)
	return i < len(c.sets) && c.sets[i]*bound <= load+slack+tol
}

// stageTooBig reports whether a stage of this fastest-class compute and
// launches exceeds the bound even spread over maxTotal devices; it holds
// for every larger stage too.
func stageTooBig(fastS, launchS float64, maxTotal int, fM, bound float64) bool {
	return fastS/(float64(maxTotal)*fM)+launchS > bound
}

// restLoad is the time per micro-batch the units outside ideal e take
// at least, spread over one device: their fastest-class compute over M
// plus their launches.
func (l *lattice) restLoad(e int32, fM float64) float64 {
	full := l.full()
	return (l.fast[full]-l.fast[e])/fM + (l.launch[full] - l.launch[e])
}

// devicesFor is the fewest devices (at least 1) a load needs so that
// each carries at most bound.
func devicesFor(load, bound float64) float64 {
	return max(1, math.Ceil(load/bound-1e-9))
}

// restDevices is the fewest devices the units outside ideal e need under
// the bound (at least 1), by restLoad; 0 for the full ideal. It does not
// grow with e on a chain.
func restDevices(l *lattice, e int32, fM, bound float64) float64 {
	if e == l.full() {
		return 0
	}
	return devicesFor(l.restLoad(e, fM), bound)
}

// skipHeavyRest is, on a chain, how many ideals after d solve can pass
// over at once: those before the first whose stage from d is too big
// (stageTooBig on maxStage devices) or whose remainder fits on the devices a one-device
// stage leaves (restDevices). Both tests are monotone along the chain,
// so this is a binary search, and solve would reject every ideal skipped
// without costing it.
func skipHeavyRest(l *lattice, d int32, maxTotal, maxStage int, fM, bound float64) int {
	n := int(l.full() - d)
	return sort.Search(n, func(i int) bool {
		e := d + 1 + int32(i)
		return stageTooBig(l.fast[e]-l.fast[d], l.launch[e]-l.launch[d], maxStage, fM, bound) ||
			restDevices(l, e, fM, bound)+1 <= float64(maxTotal)
	})
}

// solveBounded runs solve under growing bounds, starting just above the
// lower bound (compute/M + launches spread over every device): a solution
// whose value is within the bound it was searched under is optimal, since
// the pruning only drops splits with some stage above the bound. Tight
// bounds prune hard, so this is much faster than one search under a loose
// heuristic bound.
//
// When the first bound finds nothing, it asks once whether anything fits
// at all (the search under ub, which it would end with anyway): a split
// that no bound lets fit (its stages overflow memory at this micro-batch
// count) then costs two searches, not the forty-one of the whole ladder.
// Otherwise the ladder goes on, and the answer under ub is kept for its
// end.
func solveBounded(p *Problem, l *lattice, M int, ub float64, deadline time.Time, work *int64) (*solution, error) {
	full := l.full()
	lb := (l.fast[full]/float64(M) + l.launch[full]) / float64(p.Costs.NumDevices())
	// Slower classes carry less of the compute (see capacities).
	if c := newCapacities(l.m, newResources(l.m)); c.prefix[len(c.prefix)-1] > 0 {
		lb = max(lb, l.fast[full]/float64(M)/c.prefix[len(c.prefix)-1])
	}
	var loose *solution // the search under ub, once run
	for b, i := lb*1.05, 0; b < ub && b > 0 && i < 40; b, i = b*1.5, i+1 {
		s, err := solve(p, l, M, b, deadline, work)
		if err != nil {
			return nil, err
		}
		if s != nil && s.value <= b*(1+1e-9) {
			return s, nil
		}
		if i == 0 {
			if loose, err = solve(p, l, M, ub, deadline, work); err != nil || loose == nil {
				return nil, err
			}
		}
	}
	if loose != nil {
		return loose, nil
	}
	return solve(p, l, M, ub, deadline, work)
}

// evaluate scores a given split on the model (for heuristics and the
// tests' brute force): the objective, or +Inf when a stage does not fit.
func evaluate(p *Problem, l *lattice, M int, st []solStage) float64 {
	m := l.m
	s := newSums(l.nc)
	var val float64
	for i, x := range st {
		l.sums(s, x.from, x.to)
		if !s.ok[x.class] || s.mixed || !p.Options.splits(M, x.r) {
			return math.Inf(1)
		}
		sc := m.stage(s, x.class, l.cut[x.from], l.cut[x.to], x.r, x.pos, M)
		if memory(&sc, l.stageTemp(x.from, x.to), m.alive(len(st)-i, M), x.r, M) > m.classes[x.class].memory {
			return math.Inf(1)
		}
		if i == 0 {
			val = sc.time
		} else {
			val = m.combine(sc.time, val)
		}
	}
	return val
}

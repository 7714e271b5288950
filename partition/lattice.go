package partition

import (
	"errors"
	"math"
	"math/bits"
	"slices"
	"time"
	"unsafe"

	"github.com/opplace/opplace/graph"
)

// lattice holds the cuts a partitioner may place stage boundaries at:
// ideals (downsets) of the unit DAG, numbered by size, with the cover
// edges D -> D ∪ {v} and each ideal's prefix sums, so a stage's sums are
// one subtraction. For "pipedream" it is the chain of prefixes of the
// unit order; for "exact" every downset.
type lattice struct {
	u     *units // the units and model the lattice was built on
	m     *model
	n     int // ideals
	units int
	words int      // bitset words per ideal; 0 for the chain
	bits  []uint64 // ideal*words
	size  []int32
	// cover edges of ideal i: cover[coverStart[i]:coverStart[i+1]]
	coverStart []int32
	cover      []int32
	cut        []int64 // bytes of activations crossing out of the ideal
	nc         int
	fwd, bwd   []float64 // ideal*nc + class
	upd        []float64
	fwdL, bwdL []float64
	banned     []int32   // ideal*nc + class: units that cannot run there
	apart      []int32   // ideal*na + group: ops of the separate rules' groups (na = len(m.apartRule))
	fast       []float64 // fastest compute (launch excluded) over classes
	launch     []float64 // smallest launch overhead over classes
	params     []int64
	grads      []int64
	stash      []int64
	credit     []float64 // ideal*len(m.creditOf) + j: see model.credit
	// parent[i] ∪ {added[i]} = ideal i (a spanning tree of the cover
	// edges), so reweight can redo the sums for another model.
	parent, added []int32
	// chain is set when the ideals are nested, each holding the one
	// before it (pipedream's prefixes, their coarsening, and downsets of
	// a unit DAG that is a path): the cover edges are i -> i+1, sums grow
	// with the index, and size[i] is where ideal i ends in the order
	// units are added.
	chain bool
	// walk makes solve reach the stage ends from each ideal by a
	// breadth-first walk over the cover edges (the tests' reference)
	// rather than by searching the cuttable ideals sorted by compute.
	walk bool
	// anyOrder lets solve try the stage ends from an ideal in compute
	// order rather than the downsets' (a bound's search, where ties need
	// not go as the breadth-first walk's did): it skips a sort.
	anyOrder bool
	// tempMax[j][p] is the largest scratch buffer of the units at
	// positions p..p+2^j-1 of that order (chain only): a sparse table, so
	// a stage's scratch is O(1) where scanning its units made pipedream
	// quadratic in the stage length.
	tempMax [][]int64
}

var errTooManyIdeals = errors.New("too many downsets")

func (l *lattice) full() int32 { return int32(l.n - 1) }

// has reports whether unit v lies in ideal i.
func (l *lattice) has(i int32, v int32) bool {
	if l.words == 0 {
		return v < l.size[i]
	}
	return l.bits[int(i)*l.words+int(v>>6)]&(1<<(v&63)) != 0
}

// stageUnits lists the units of ideal e minus ideal d.
func (l *lattice) stageUnits(d, e int32) []int32 {
	var out []int32
	if l.words == 0 {
		for v := l.size[d]; v < l.size[e]; v++ {
			out = append(out, v)
		}
		return out
	}
	a, b := l.bits[int(d)*l.words:int(d+1)*l.words], l.bits[int(e)*l.words:int(e+1)*l.words]
	for w := range b {
		x := b[w] &^ a[w]
		for x != 0 {
			out = append(out, int32(w*64+bits.TrailingZeros64(x)))
			x &= x - 1
		}
	}
	return out
}

// stageTemp is the largest scratch buffer of the units of ideal e minus
// ideal d.
func (l *lattice) stageTemp(d, e int32) int64 {
	var temp int64
	if l.chain {
		a, b := l.size[d], l.size[e]
		if a >= b {
			return 0
		}
		j := bits.Len32(uint32(b-a)) - 1
		return max(l.tempMax[j][a], l.tempMax[j][b-(1<<j)])
	}
	x, y := l.bits[int(d)*l.words:int(d+1)*l.words], l.bits[int(e)*l.words:int(e+1)*l.words]
	for w := range y {
		for z := y[w] &^ x[w]; z != 0; z &= z - 1 {
			temp = max(temp, l.m.temp[w*64+bits.TrailingZeros64(z)])
		}
	}
	return temp
}

// sums fills s with the sums of ideal e minus ideal d.
func (l *lattice) sums(s *sums, d, e int32) {
	nc := l.nc
	for k := 0; k < nc; k++ {
		i, j := int(d)*nc+k, int(e)*nc+k
		s.fwd[k] = l.fwd[j] - l.fwd[i]
		s.bwd[k] = l.bwd[j] - l.bwd[i]
		s.upd[k] = l.upd[j] - l.upd[i]
		s.fwdL[k] = l.fwdL[j] - l.fwdL[i]
		s.bwdL[k] = l.bwdL[j] - l.bwdL[i]
	}
	for k := 0; k < nc; k++ {
		s.ok[k] = l.banned[int(e)*nc+k] == l.banned[int(d)*nc+k]
	}
	s.mixed = false
	if na := len(l.m.apartRule); na > 0 {
		// Two groups of one separate rule in the stage: it cannot be.
		rule := -1
		for x := 0; x < na; x++ {
			if l.apart[int(e)*na+x] == l.apart[int(d)*na+x] {
				continue
			}
			if r := l.m.apartRule[x]; r == rule {
				s.mixed = true
				break
			} else {
				rule = r
			}
		}
	}
	s.params = l.params[e] - l.params[d]
	s.grads = l.grads[e] - l.grads[d]
	s.stash = l.stash[e] - l.stash[d]
	if nj := len(l.m.creditOf); nj > 0 {
		if len(s.credit) != nj {
			s.credit = make([]float64, nj)
		}
		for j := range nj {
			s.credit[j] = l.credit[int(e)*nj+j] - l.credit[int(d)*nj+j]
		}
	}
}

func newSums(nc int) *sums {
	return &sums{ok: make([]bool, nc), fwd: make([]float64, nc), bwd: make([]float64, nc), upd: make([]float64, nc), fwdL: make([]float64, nc), bwdL: make([]float64, nc)}
}

// extend appends ideal child = ideal parent ∪ {v} with its prefix sums
// and cut; member tests membership in the child.
func (l *lattice) extend(u *units, m *model, parent int32, v int32, member func(int32) bool) {
	nc := l.nc
	for k := 0; k < nc; k++ {
		i, j := int(parent)*nc+k, int(v)*nc+k
		l.fwd = append(l.fwd, l.fwd[i]+m.fwd[j])
		l.bwd = append(l.bwd, l.bwd[i]+m.bwd[j])
		l.upd = append(l.upd, l.upd[i]+m.upd[j])
		l.fwdL = append(l.fwdL, l.fwdL[i]+m.fwdL[j])
		l.bwdL = append(l.bwdL, l.bwdL[i]+m.bwdL[j])
		l.banned = append(l.banned, l.banned[i]+m.banned[j])
	}
	na := len(m.apartRule)
	for x := 0; x < na; x++ {
		l.apart = append(l.apart, l.apart[int(parent)*na+x]+m.apart[int(v)*na+x])
	}
	l.fast = append(l.fast, l.fast[parent]+m.fastest(int(v)))
	l.launch = append(l.launch, l.launch[parent]+m.leastLaunch(int(v)))
	l.params = append(l.params, l.params[parent]+m.params[v])
	l.grads = append(l.grads, l.grads[parent]+m.grads[v])
	l.stash = append(l.stash, l.stash[parent]+m.stash[v])
	for j, nj := 0, len(m.creditOf); j < nj; j++ {
		l.credit = append(l.credit, l.credit[int(parent)*nj+j]+m.credit[int(v)*nj+j])
	}
	cut := l.cut[parent]
	for _, ti := range u.outT[v] {
		t := &u.tensors[ti]
		for _, c := range t.consumers {
			if !member(c) {
				cut += t.bytes
				break
			}
		}
	}
	for _, ti := range u.inT[v] {
		t := &u.tensors[ti]
		if t.producer == v || !member(t.producer) {
			continue
		}
		all := true
		for _, c := range t.consumers {
			if !member(c) {
				all = false
				break
			}
		}
		if all {
			cut -= t.bytes
		}
	}
	l.cut = append(l.cut, cut)
	l.size = append(l.size, l.size[parent]+1)
	l.parent = append(l.parent, parent)
	l.added = append(l.added, v)
	l.n++
}

func newLattice(u *units, m *model) *lattice {
	nc := len(m.classes)
	return &lattice{
		u: u, m: m, parent: []int32{-1}, added: []int32{-1},
		units: u.n, nc: nc, n: 1, size: []int32{0}, cut: []int64{0}, fast: []float64{0}, launch: []float64{0},
		params: []int64{0}, grads: []int64{0}, stash: []int64{0},
		fwd: make([]float64, nc), bwd: make([]float64, nc), upd: make([]float64, nc),
		fwdL: make([]float64, nc), bwdL: make([]float64, nc), banned: make([]int32, nc),
		apart: make([]int32, len(m.apartRule)), credit: make([]float64, len(m.creditOf)),
	}
}

// reserve makes room for n ideals in all, so extend does not copy the
// sums as they grow.
func (l *lattice) reserve(n int) {
	nc, na, nj := l.nc, len(l.m.apartRule), len(l.m.creditOf)
	grow := func(k int) int { return max(0, k*n) }
	l.fwd = slices.Grow(l.fwd, grow(nc))
	l.bwd = slices.Grow(l.bwd, grow(nc))
	l.upd = slices.Grow(l.upd, grow(nc))
	l.fwdL = slices.Grow(l.fwdL, grow(nc))
	l.bwdL = slices.Grow(l.bwdL, grow(nc))
	l.banned = slices.Grow(l.banned, grow(nc))
	l.apart = slices.Grow(l.apart, grow(na))
	l.credit = slices.Grow(l.credit, grow(nj))
	l.fast = slices.Grow(l.fast, n)
	l.launch = slices.Grow(l.launch, n)
	l.params = slices.Grow(l.params, n)
	l.grads = slices.Grow(l.grads, n)
	l.stash = slices.Grow(l.stash, n)
	l.cut = slices.Grow(l.cut, n)
	l.size = slices.Grow(l.size, n)
	l.parent = slices.Grow(l.parent, n)
	l.added = slices.Grow(l.added, n)
}

// chainLattice is the prefixes of the unit order 0..n-1 (a topological
// order): PipeDream's search space.
func chainLattice(u *units, m *model) *lattice {
	l := newLattice(u, m)
	l.reserve(u.n + 1)
	for v := int32(0); v < int32(u.n); v++ {
		size := v + 1
		l.extend(u, m, v, v, func(x int32) bool { return x < size })
	}
	l.finishChain()
	return l
}

// finishChain completes a lattice whose downsets form one chain, each the
// one before it plus a unit: every downset is covered by the next.
func (l *lattice) finishChain() {
	l.coverStart = make([]int32, l.n+1)
	for i := 0; i < l.n; i++ {
		l.coverStart[i+1] = l.coverStart[i]
		if i+1 < l.n {
			l.cover = append(l.cover, int32(i+1))
			l.coverStart[i+1]++
		}
	}
	l.chain = true
	l.buildTempMax()
}

// buildTempMax fills the chain's sparse table of scratch maxima: the
// unit at position p is the one ideal p+1 added.
func (l *lattice) buildTempMax() {
	n := l.units
	first := make([]int64, n)
	for p := range first {
		first[p] = l.m.temp[l.added[p+1]]
	}
	l.tempMax = [][]int64{first}
	for j := 1; 1<<j <= n; j++ {
		prev, h := l.tempMax[j-1], 1<<(j-1)
		row := make([]int64, n-(1<<j)+1)
		for v := range row {
			row[v] = max(prev[v], prev[v+h])
		}
		l.tempMax = append(l.tempMax, row)
	}
}

// idealLattice enumerates every downset of the unit DAG breadth-first
// (so ideals come out by size), or fails with errTooManyIdeals past max.
func idealLattice(u *units, m *model, max int) (*lattice, error) {
	return idealLatticeBy(u, m, max, time.Time{})
}

// idealLatticeBy is idealLattice that fails with errDeadline once the
// deadline (if not zero) has passed.
func idealLatticeBy(u *units, m *model, max int, deadline time.Time) (*lattice, error) {
	// Units of one depth (longest path from a source) form an antichain,
	// and each subset of an antichain generates its own downset: with w
	// of them there are at least 2^w downsets, so past max there is no
	// need to enumerate them to know.
	if w := widestLevel(u); w >= 62 || 1<<w > max {
		return nil, errTooManyIdeals
	}
	// Every prefix of a topological order is a downset: n units have at
	// least n+1 of them (a chain exactly that many).
	if u.n >= max {
		return nil, errTooManyIdeals
	}
	if chainOrdered(u) {
		// The downsets are the prefixes of the unit order: no bit sets
		// (on a chain of n units they would take n²/8 bytes).
		return chainLattice(u, m), nil
	}
	return enumerateIdeals(u, m, max, deadline)
}

// enumerateIdeals is idealLatticeBy's breadth-first enumeration, each
// downset a bit set over the units.
func enumerateIdeals(u *units, m *model, max int, deadline time.Time) (*lattice, error) {
	l := newLattice(u, m)
	l.words = (u.n + 63) / 64
	l.bits = make([]uint64, l.words)
	index := map[string]int32{string(make([]byte, 8*l.words)): 0}
	missing := make([]int32, u.n) // preds not yet in the ideal, reused
	// avail[i] lists the units that can join ideal i.
	var avail [][]int32
	var first []int32
	for v := 0; v < u.n; v++ {
		if len(u.pred[v]) == 0 {
			first = append(first, int32(v))
		}
	}
	avail = append(avail, first)
	type edge struct{ from, to int32 }
	var edges []edge
	buf := make([]uint64, l.words)
	for i := int32(0); i < int32(l.n); i++ {
		for _, v := range avail[i] {
			copy(buf, l.bits[int(i)*l.words:int(i+1)*l.words])
			buf[v>>6] |= 1 << (v & 63)
			key := unsafe.String((*byte)(unsafe.Pointer(&buf[0])), 8*l.words)
			j, ok := index[key]
			if !ok {
				if l.n >= max {
					return nil, errTooManyIdeals
				}
				if l.n&0x3ff == 0 && !deadline.IsZero() && time.Now().After(deadline) {
					return nil, errDeadline
				}
				j = int32(l.n)
				l.bits = append(l.bits, buf...)
				index[string([]byte(key))] = j
				w := l.words
				child := l.bits[int(j)*w : int(j+1)*w]
				l.extend(u, m, i, v, func(x int32) bool { return child[x>>6]&(1<<(x&63)) != 0 })
				// Units available in the child: the parent's minus v, plus
				// successors of v whose predecessors are now all in.
				var av []int32
				for _, a := range avail[i] {
					if a != v {
						av = append(av, a)
					}
				}
				for _, s := range u.succ[v] {
					missing[s] = 0
					for _, p := range u.pred[s] {
						if child[p>>6]&(1<<(p&63)) == 0 {
							missing[s]++
						}
					}
					if missing[s] == 0 {
						av = append(av, s)
					}
				}
				avail = append(avail, av)
			}
			edges = append(edges, edge{i, j})
		}
		avail[i] = nil
	}
	l.coverStart = make([]int32, l.n+1)
	for _, e := range edges {
		l.coverStart[e.from+1]++
	}
	for i := 0; i < l.n; i++ {
		l.coverStart[i+1] += l.coverStart[i]
	}
	l.cover = make([]int32, len(edges))
	fill := make([]int32, l.n)
	copy(fill, l.coverStart[:l.n])
	for _, e := range edges { // edges come out grouped by from, in order
		l.cover[fill[e.from]] = e.to
		fill[e.from]++
	}
	// A poset of n elements has n+1 downsets only when it is a total
	// order (ideals come out by size, so ideal i then has i units).
	if l.n == u.n+1 {
		l.chain = true
		l.buildTempMax()
	}
	return l, nil
}

// chainOrdered reports whether the units form one chain in their own
// numbering: each unit reads the one before it and none after it, so the
// downsets are exactly the prefixes 0..v.
func chainOrdered(u *units) bool {
	for v := 1; v < u.n; v++ {
		if !slices.Contains(u.pred[v], int32(v-1)) {
			return false
		}
		for _, p := range u.pred[v] {
			if int(p) >= v {
				return false
			}
		}
	}
	return u.n > 0 && len(u.pred[0]) == 0
}

// widestLevel is the most units of one depth in the unit DAG.
func widestLevel(u *units) int {
	count := make([]int, u.n+1)
	w := 0
	for _, d := range graph.Depths(u.n, func(v int32) []int32 { return u.succ[v] }) {
		if d >= 0 {
			count[d]++
			w = max(w, count[d])
		}
	}
	return w
}

// reweight is the same lattice (ideals, covers) with the sums and cuts
// of another model and units over the same unit numbering and edges.
func (l *lattice) reweight(u *units, m *model) *lattice {
	r := newLattice(u, m)
	for i := 1; i < l.n; i++ {
		i := int32(i)
		r.extend(u, m, l.parent[i], l.added[i], func(x int32) bool { return l.has(i, x) })
	}
	r.words, r.bits, r.coverStart, r.cover, r.chain = l.words, l.bits, l.coverStart, l.cover, l.chain
	if r.chain {
		r.buildTempMax()
	}
	return r
}

// fastest is unit v's compute (launches excluded) on its fastest class.
func (m *model) fastest(v int) float64 {
	nc := len(m.classes)
	best := math.Inf(1)
	for k := 0; k < nc; k++ {
		i := v*nc + k
		if m.banned[i] != 0 {
			continue
		}
		best = min(best, m.fwd[i]-m.fwdL[i]+m.bwd[i]-m.bwdL[i])
	}
	return best
}

// leastLaunch is unit v's launch overheads (paid per micro-batch) on the
// class where they are smallest.
func (m *model) leastLaunch(v int) float64 {
	nc := len(m.classes)
	best := math.Inf(1)
	for k := 0; k < nc; k++ {
		i := v*nc + k
		if m.banned[i] != 0 {
			continue
		}
		best = min(best, m.fwdL[i]+m.bwdL[i])
	}
	return best
}

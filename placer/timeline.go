package placer

import "math"

// timeline is one device's busy intervals for insertion scheduling
// (HEFT): a treap ordered by (start, end, insertion), each node keeping
// the idle gap before it and the largest gap in its subtree, so the first
// gap that fits an op is found in O(log n) instead of by a scan, and an
// insertion costs O(log n) instead of a slice shift.
//
// Intervals never overlap (each is put in a gap that holds it), so the
// ends ascend with the starts and "the first interval ending after t" is
// a plain descent.
type timeline struct {
	nodes []tlNode // nodes[0] is the nil sentinel
	root  int32
	last  float64 // the latest end, the makespan so far
	seed  uint64
	spine []int32 // append's path, kept to save allocations
}

type tlNode struct {
	start, end float64
	// prev is the end of the interval before this one, +Inf for the
	// first; the gap before the node is start - prev.
	prev        float64
	maxGap      float64 // the largest gap in the subtree
	left, right int32
	prio        uint32
}

func newTimeline() *timeline {
	return &timeline{nodes: make([]tlNode, 1, 64), last: math.Inf(-1), seed: 0x9e3779b97f4a7c15}
}

func (t *timeline) gap(x int32) float64 { return t.nodes[x].start - t.nodes[x].prev }

// pull recomputes x's subtree gap from its children.
func (t *timeline) pull(x int32) {
	n := &t.nodes[x]
	m := n.start - n.prev
	if n.left != 0 {
		m = max(m, t.nodes[n.left].maxGap)
	}
	if n.right != 0 {
		m = max(m, t.nodes[n.right].maxGap)
	}
	n.maxGap = m
}

// before orders nodes by start, then end, then insertion (node index).
func (t *timeline) before(a, b int32) bool {
	x, y := &t.nodes[a], &t.nodes[b]
	if x.start != y.start {
		return x.start < y.start
	}
	if x.end != y.end {
		return x.end < y.end
	}
	return a < b
}

// split cuts the treap x into the nodes ordered before k and the rest.
func (t *timeline) split(x, k int32) (l, r int32) {
	if x == 0 {
		return 0, 0
	}
	if t.before(x, k) {
		a, b := t.split(t.nodes[x].right, k)
		t.nodes[x].right = a
		t.pull(x)
		return x, b
	}
	a, b := t.split(t.nodes[x].left, k)
	t.nodes[x].left = b
	t.pull(x)
	return a, x
}

// merge joins treaps a and b, every node of a ordered before b's.
func (t *timeline) merge(a, b int32) int32 {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	case t.nodes[a].prio > t.nodes[b].prio:
		t.nodes[a].right = t.merge(t.nodes[a].right, b)
		t.pull(a)
		return a
	default:
		t.nodes[b].left = t.merge(a, t.nodes[b].left)
		t.pull(b)
		return b
	}
}

// setFirstPrev sets the gap end of x's first node to prev.
func (t *timeline) setFirstPrev(x int32, prev float64) {
	if l := t.nodes[x].left; l != 0 {
		t.setFirstPrev(l, prev)
	} else {
		t.nodes[x].prev = prev
	}
	t.pull(x)
}

// insert adds the busy interval [start, end].
func (t *timeline) insert(start, end float64) {
	// A fixed xorshift: the shape never affects a result, but runs stay
	// identical anyway.
	t.seed ^= t.seed << 13
	t.seed ^= t.seed >> 7
	t.seed ^= t.seed << 17
	x := int32(len(t.nodes))
	t.nodes = append(t.nodes, tlNode{start: start, end: end, prev: math.Inf(1), prio: uint32(t.seed >> 32)})
	if t.root != 0 && start >= t.last {
		t.append(x)
		return
	}
	l, r := t.split(t.root, x)
	if l != 0 {
		p := l
		for t.nodes[p].right != 0 {
			p = t.nodes[p].right
		}
		t.nodes[x].prev = t.nodes[p].end
	}
	t.pull(x)
	if r != 0 {
		t.setFirstPrev(r, end)
	}
	t.root = t.merge(t.merge(l, x), r)
	t.last = max(t.last, end)
}

// append inserts node x, which starts at or after every interval ends
// and so comes last in order, down the right spine: the transfers and
// ops a list placer commits mostly go there, and this skips a split and
// a merge.
func (t *timeline) append(x int32) {
	n := &t.nodes[x]
	n.prev = t.last // the last interval in order ends last
	t.spine = t.spine[:0]
	y := t.root
	for y != 0 && t.nodes[y].prio > n.prio {
		t.spine = append(t.spine, y)
		y = t.nodes[y].right
	}
	n.left = y
	t.pull(x)
	if len(t.spine) == 0 {
		t.root = x
	} else {
		t.nodes[t.spine[len(t.spine)-1]].right = x
	}
	for i := len(t.spine) - 1; i >= 0; i-- {
		t.pull(t.spine[i])
	}
	t.last = n.end
}

// earliest is the earliest start at or after ready of an idle slot of
// length dur: the first gap that holds it, or the end of the last
// interval.
func (t *timeline) earliest(ready, dur float64) float64 {
	if ready >= t.last {
		return ready // nothing ends after ready: the common case, without a descent
	}
	// first: the first interval ending after ready.
	first := int32(0)
	for x := t.root; x != 0; {
		if t.nodes[x].end > ready {
			first, x = x, t.nodes[x].left
		} else {
			x = t.nodes[x].right
		}
	}
	if first == 0 {
		return ready
	}
	if math.IsInf(dur, 1) {
		return t.last
	}
	if ready+dur <= t.nodes[first].start {
		return ready
	}
	// Later gaps run from the previous interval's end. The subtree
	// maxima prune with a little slack, since start-prev >= dur and
	// prev+dur <= start can disagree in the last bit; each candidate is
	// then checked exactly as the scan did.
	thr := dur - 1e-14*math.Abs(t.last)
	for k := first; ; {
		c := t.firstGapAfter(t.root, k, thr)
		if c == 0 {
			return t.last
		}
		if n := &t.nodes[c]; n.prev+dur <= n.start {
			return n.prev
		}
		k = c
	}
}

// firstGapAfter is the first node of subtree x ordered after k whose gap
// is at least thr, or 0.
func (t *timeline) firstGapAfter(x, k int32, thr float64) int32 {
	for x != 0 && t.nodes[x].maxGap >= thr {
		if x == k || t.before(x, k) {
			x = t.nodes[x].right
			continue
		}
		if c := t.firstGapAfter(t.nodes[x].left, k, thr); c != 0 {
			return c
		}
		if t.gap(x) >= thr {
			return x
		}
		x = t.nodes[x].right
	}
	return 0
}

package placer

import "math"

// usage is one device's memory over the predicted step: a step function
// kept as its changes, a delta of bytes at each instant, in a treap
// ordered by instant. Each node keeps the sum of its subtree's deltas and
// the highest level the running sum reaches inside the subtree, so the
// level at an instant and the peak over an interval each take one or two
// descents, O(log n), and so does a change.
type usage struct {
	nodes []usageNode // nodes[0] is the nil sentinel
	root  int32
	// latest is the latest instant with a change: the level is the total
	// from there on, which answers most queries without a descent.
	latest float64
	total  int64
	seed   uint64
}

type usageNode struct {
	at    float64
	delta int64
	// sum is the subtree's deltas; peak the highest running sum over a
	// non-empty prefix of the subtree in order.
	sum, peak   int64
	left, right int32
	prio        uint32
}

func newUsage() *usage { return newUsageSized(64) }

// newUsageSized is an empty usage with room for about n changes, so a
// device's books on a graph of a million ops are not regrown (and
// copied) a score of times as they fill.
func newUsageSized(n int) *usage {
	return &usage{nodes: make([]usageNode, 1, max(n, 64)), latest: math.Inf(-1), seed: 0x2545f4914f6cdd1d}
}

func (u *usage) pull(x int32) {
	n := &u.nodes[x]
	l, r := &u.nodes[n.left], &u.nodes[n.right]
	n.sum = l.sum + n.delta + r.sum
	n.peak = l.sum + n.delta
	if n.left != 0 {
		n.peak = max(n.peak, l.peak)
	}
	if n.right != 0 {
		n.peak = max(n.peak, l.sum+n.delta+r.peak)
	}
}

// add changes the level by delta from instant at on.
func (u *usage) add(at float64, delta int64) {
	if delta == 0 {
		return
	}
	u.total += delta
	u.latest = max(u.latest, at)
	u.root = u.insert(u.root, at, delta)
}

func (u *usage) insert(x int32, at float64, delta int64) int32 {
	if x == 0 {
		// A fixed xorshift: the shape never affects a result, but runs
		// stay identical anyway.
		u.seed ^= u.seed << 13
		u.seed ^= u.seed >> 7
		u.seed ^= u.seed << 17
		u.nodes = append(u.nodes, usageNode{at: at, delta: delta, sum: delta, peak: delta, prio: uint32(u.seed >> 32)})
		return int32(len(u.nodes) - 1)
	}
	n := &u.nodes[x]
	switch {
	case at == n.at:
		n.delta += delta
	case at < n.at:
		c := u.insert(n.left, at, delta)
		u.nodes[x].left = c
		if u.nodes[c].prio > u.nodes[x].prio { // rotate right
			u.nodes[x].left = u.nodes[c].right
			u.pull(x)
			u.nodes[c].right = x
			x = c
		}
	default:
		c := u.insert(n.right, at, delta)
		u.nodes[x].right = c
		if u.nodes[c].prio > u.nodes[x].prio { // rotate left
			u.nodes[x].right = u.nodes[c].left
			u.pull(x)
			u.nodes[c].left = x
			x = c
		}
	}
	u.pull(x)
	return x
}

// level is the memory held at instant at, its changes then included.
func (u *usage) level(at float64) int64 {
	if at >= u.latest {
		return u.total
	}
	var s int64
	for x := u.root; x != 0; {
		n := &u.nodes[x]
		if n.at <= at {
			s += u.nodes[n.left].sum + n.delta
			x = n.right
		} else {
			x = n.left
		}
	}
	return s
}

// peak is the most memory held at any instant of [from, to): the level
// at from and after every change strictly inside. With to <= from it is
// the level at from.
func (u *usage) peak(from, to float64) int64 {
	if from >= u.latest {
		return u.total
	}
	if n := &u.nodes[u.root]; math.IsInf(from, -1) && math.IsInf(to, 1) {
		return max(0, n.peak) // nothing is held before the first change
	}
	best := u.level(from)
	// Find the first node strictly inside (from, to) on the search path:
	// the root of the smallest subtree holding all of them.
	var before int64 // deltas in order before x's subtree
	x := u.root
	for x != 0 {
		n := &u.nodes[x]
		if n.at <= from {
			before += u.nodes[n.left].sum + n.delta
			x = n.right
		} else if n.at >= to {
			x = n.left
		} else {
			break
		}
	}
	if x == 0 {
		return best
	}
	// The part of x's left subtree after from, x itself, and the part of
	// its right subtree before to.
	n := &u.nodes[x]
	best = max(best, u.suffixPeak(n.left, from, before))
	lv := before + u.nodes[n.left].sum + n.delta
	return max(best, lv, u.prefixPeak(n.right, to, lv))
}

// suffixPeak is the highest level reached at the nodes of subtree x
// after from, the level before the subtree being base; math.MinInt64
// when there are none.
func (u *usage) suffixPeak(x int32, from float64, base int64) int64 {
	best := int64(math.MinInt64)
	for x != 0 {
		n := &u.nodes[x]
		if n.at <= from {
			base += u.nodes[n.left].sum + n.delta
			x = n.right
			continue
		}
		// n and its whole right subtree are inside.
		lv := base + u.nodes[n.left].sum + n.delta
		best = max(best, lv)
		if n.right != 0 {
			best = max(best, lv+u.nodes[n.right].peak)
		}
		x = n.left
	}
	return best
}

// prefixPeak is the highest level reached at the nodes of subtree x
// before to, the level before the subtree being base; math.MinInt64 when
// there are none.
func (u *usage) prefixPeak(x int32, to float64, base int64) int64 {
	best := int64(math.MinInt64)
	for x != 0 {
		n := &u.nodes[x]
		if n.at >= to {
			x = n.left
			continue
		}
		// n and its whole left subtree are inside.
		if n.left != 0 {
			best = max(best, base+u.nodes[n.left].peak)
		}
		base += u.nodes[n.left].sum + n.delta
		best = max(best, base)
		x = n.right
	}
	return best
}

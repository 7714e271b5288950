package partition

import (
	"errors"
	"fmt"
	"slices"
)

// chainWork is the work budget of the search over every prefix of the
// unit order (pipedream, and the pipedream pass of exact), in stages
// costed × device-count vectors plus half a unit per pair of prefixes
// visited, for all micro-batch counts together:
// about a second on one core. The real models of the tests take at most
// 9 million (gpt2_small training on 8 A100s, 0.33 s); GNMT training
// (4,441 units) takes 51 million on 4 V100s (2.8 s) and billions on five
// devices of four types (a minute). Past the budget the order is
// coarsened to maxChainBlocks blocks and searched again.
const chainWork = 20_000_000

// maxChainBlocks is how many blocks a coarsened chain keeps at most: the
// dynamic programme costs about the square of the chain's length, and
// GNMT training on 512 blocks takes 0.04-0.5 s.
const maxChainBlocks = 512

// chainSearch runs search on the chain of every prefix of the unit order
// under the work budget and, when that runs out, again on the order
// coarsened into blocks without a budget, with a warning saying so. The
// budget counts work, not time, so the plan does not depend on the
// machine.
func chainSearch(p *Problem, search func(l *lattice, work *int64) error) (warn string, err error) {
	full := chainLattice(p.u, p.m)
	if p.uniform() && full.n-1 > maxChainBlocks {
		// By degree the search runs once per stage count and device
		// layout, each about the square of the chain's length: a long
		// chain is coarsened at once.
		l, warn := coarsenChain(full, maxChainBlocks)
		return warn, search(l, nil)
	}
	work := int64(chainWork)
	if err = search(full, &work); !errors.Is(err, errWork) {
		return "", err
	}
	l, warn := coarsenChain(full, maxChainBlocks)
	return warn, search(l, nil)
}

// coarsenChain keeps at most k+1 of the chain's prefixes as cuts: the
// empty one, the full one and those where the prefix compute (fastest
// class, launches included) first reaches each j/k of the total, so the
// blocks between cuts carry balanced compute (a unit heavier than a
// block is a block of its own). Every prefix is a valid cut, so every
// split of the coarse chain is a split of the unit graph and the plan's
// numbers stay exact for the plan given; only cuts inside blocks are
// not searched. It returns l itself when it has at most k units, and a
// warning otherwise. Unlike placer.Coarsen and graph.Coarsen it merges
// no units and builds no graph: the blocks exist only as the cuts kept,
// whose prefix sums the chain already holds. Where the user's separate
// rules bind units, it also keeps the cuts where the groups a unit holds
// change, so a block never holds two groups a split could have parted.
func coarsenChain(l *lattice, k int) (*lattice, string) {
	n := l.n - 1
	if l.words != 0 || n <= k {
		return l, ""
	}
	w := func(i int) float64 { return l.fast[i] + l.launch[i] }
	total := w(n)
	keep := []int{0}
	for j, i := 1, 1; j < k && i < n; j++ {
		target := total * float64(j) / float64(k)
		for i < n && w(i) < target {
			i++
		}
		if i < n && i > keep[len(keep)-1] {
			keep = append(keep, i)
		}
	}
	keep = append(keep, n)
	keep = l.keepApart(keep)
	c := &lattice{u: l.u, m: l.m, n: len(keep), units: l.units, nc: l.nc, chain: true, tempMax: l.tempMax}
	nc := l.nc
	for x, i := range keep {
		c.size = append(c.size, l.size[i])
		c.cut = append(c.cut, l.cut[i])
		c.fast = append(c.fast, l.fast[i])
		c.launch = append(c.launch, l.launch[i])
		c.params = append(c.params, l.params[i])
		c.grads = append(c.grads, l.grads[i])
		c.stash = append(c.stash, l.stash[i])
		c.fwd = append(c.fwd, l.fwd[i*nc:(i+1)*nc]...)
		c.bwd = append(c.bwd, l.bwd[i*nc:(i+1)*nc]...)
		c.upd = append(c.upd, l.upd[i*nc:(i+1)*nc]...)
		c.fwdL = append(c.fwdL, l.fwdL[i*nc:(i+1)*nc]...)
		c.bwdL = append(c.bwdL, l.bwdL[i*nc:(i+1)*nc]...)
		c.banned = append(c.banned, l.banned[i*nc:(i+1)*nc]...)
		na := len(l.m.apartRule)
		c.apart = append(c.apart, l.apart[i*na:(i+1)*na]...)
		// A block is not one unit: reweight cannot redo this lattice
		// (it is only used on downsets).
		c.parent = append(c.parent, int32(x-1))
		c.added = append(c.added, -1)
	}
	c.coverStart = make([]int32, c.n+1)
	for i := 0; i < c.n; i++ {
		c.coverStart[i+1] = c.coverStart[i]
		if i+1 < c.n {
			c.cover = append(c.cover, int32(i+1))
			c.coverStart[i+1]++
		}
	}
	return c, fmt.Sprintf("the order of %d units coarsened to %d blocks of balanced compute (stage boundaries only between blocks) to keep the search fast", n, c.n-1)
}

// keepApart adds to keep (ascending prefix positions of the chain) every
// position where the separate rules' groups of the unit before and the
// unit after differ.
func (l *lattice) keepApart(keep []int) []int {
	na := len(l.m.apartRule)
	if na == 0 {
		return keep
	}
	// holds reports whether unit v (the one prefix v+1 adds) has ops of
	// group x.
	holds := func(v, x int) bool { return l.apart[(v+1)*na+x] != l.apart[v*na+x] }
	n := l.n - 1
	for i := 1; i < n; i++ {
		for x := 0; x < na; x++ {
			if holds(i-1, x) != holds(i, x) {
				keep = append(keep, i)
				break
			}
		}
	}
	slices.Sort(keep)
	return slices.Compact(keep)
}

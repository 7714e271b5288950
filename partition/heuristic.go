package partition

import (
	"math"
)

// balancedSplit cuts the chain lattice into s contiguous stages whose
// compute on class k (forward + backward for the whole batch) has the
// smallest possible maximum: binary search on that maximum with a greedy
// check, exact for contiguous splits of non-negative weights. It returns
// the s+1 boundary ideals, or nil when there are fewer units than stages.
func balancedSplit(l *lattice, k, s int) []int32 {
	n := l.n - 1
	if s > n || s < 1 {
		return nil
	}
	w := func(i int) float64 { // prefix compute up to ideal i
		j := i*l.nc + k
		return l.fwd[j] + l.bwd[j]
	}
	greedy := func(limit float64) []int32 {
		cuts := []int32{0}
		start := 0
		for i := 1; i <= n; i++ {
			// close the stage before unit i-1 when adding it would pass
			// the limit, leaving enough units for the remaining stages
			if w(i)-w(start) > limit && i-1 > start {
				cuts = append(cuts, int32(i-1))
				start = i - 1
				if w(i)-w(start) > limit {
					return nil
				}
			}
		}
		cuts = append(cuts, int32(n))
		// Split the largest stages further until there are s of them, so
		// every device gets work (any split keeps the maximum).
		for len(cuts)-1 < s {
			grew := false
			for j := 0; j+1 < len(cuts) && len(cuts)-1 < s; j++ {
				if cuts[j+1]-cuts[j] > 1 {
					mid := cuts[j] + (cuts[j+1]-cuts[j])/2
					cuts = append(cuts[:j+1], append([]int32{mid}, cuts[j+1:]...)...)
					grew = true
				}
			}
			if !grew {
				return nil
			}
		}
		if len(cuts)-1 > s {
			return nil
		}
		return cuts
	}
	// Candidate limits are the stage sums themselves; search over a sorted
	// sample of the distinct values by bisection on the float range.
	lo, hi := 0.0, w(n)
	for i := 0; i < n; i++ {
		lo = max(lo, w(i+1)-w(i))
	}
	best := greedy(hi)
	if best == nil {
		return nil
	}
	for iter := 0; iter < 60 && hi-lo > 1e-12*hi; iter++ {
		mid := (lo + hi) / 2
		if c := greedy(mid); c != nil {
			best, hi = c, mid
		} else {
			lo = mid
		}
	}
	return best
}

// heuristicUB is the best objective of simple splits (each class, s equal
// stages of cnt/s replicas, balanced by compute), a bound for pruning the
// dynamic programmes; +Inf when none fits.
func heuristicUB(p *Problem, l *lattice, M int) float64 {
	ub := math.Inf(1)
	for k, cl := range p.m.classes {
		cnt := len(cl.devices)
		for s := 1; s <= cnt; s++ {
			cuts := balancedSplit(l, k, s)
			if cuts == nil {
				continue
			}
			r := cnt / s
			st := make([]solStage, s)
			for i := range st {
				st[i] = solStage{from: cuts[i], to: cuts[i+1], class: k, r: r, pos: cnt - (s-i)*r}
			}
			ub = min(ub, evaluate(p, l, M, st))
		}
	}
	return ub
}

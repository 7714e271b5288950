package partition

import (
	"math"
	"sort"
)

// DegreeDevices is the class size from which the partitioners search
// degrees rather than devices. solve tracks how many devices of each
// class are left, so on one class of n devices it costs every stage at
// every replica count and position and joins it to every remainder: n³
// per pair of cuts, 70 s for a 1.7B-parameter GPT on 32 A100s and out of
// reach on hundreds. From this size on (and below it every test
// cluster's plans stay as they were) a cluster of one device class is
// split the way LLM runtimes lay it out (Megatron-LM, DeepSpeed,
// PyTorch's pipelining): S stages of n/S devices each, S dividing n,
// stage i on the class's devices [i·n/S, (i+1)·n/S), so a stage's
// replicas sit together in the host order and consecutive stages on
// neighbouring devices. The cost grows with the divisors of n and the
// chain's length, not with n.
const DegreeDevices = 16

// uniform reports whether the problem is searched by degrees: one
// device class, of at least DegreeDevices devices or under
// Options.ByDegree, or with Options.Stages fixed.
func (p *Problem) uniform() bool {
	return len(p.m.classes) == 1 && (p.Options.ByDegree || p.Options.Stages > 0 || len(p.m.classes[0].devices) >= DegreeDevices)
}

// solveUniform is solve's search restricted to uniform stages on a chain
// of one class: for every stage count S dividing the class's n devices
// (each stage then on r = n/S replicas, which must split the batch at M
// micro-batches), a dynamic programme over the stage index i and the
// prefix D where stage i starts,
//
//	H(i, D) = min over E ⊋ D of combine(stage(E \ D on r devices at i·r), H(i+1, E))
//
// with H(S, V) = 0 and each stage's memory counted with the micro-batches
// alive at its depth S-i (1F1B). On a chain a stage only grows as E does:
// its compute, parameters, stash and scratch never shrink, so the first
// E whose stage passes the bound or the memory ends the scan. The stage
// counts are searched in increasing order, each under the best objective
// found so far (ub): a deeper pipeline whose
// slowest stage is slower also has the longer step, having more stages
// to fill.
//
// Across stage counts it keeps the split with the shortest estimated
// step under the throughput objective (the step is what the bubble of a
// deeper pipeline lengthens; the objective alone ignores it), the
// smallest objective under latency; ties go to fewer stages. Returns nil
// when nothing fits. work is charged per pair of cuts visited, as solve
// charges it.
func solveUniform(p *Problem, l *lattice, M int, work *int64) (*solution, error) {
	m := l.m
	const k = 0
	cl := &m.classes[k]
	n := len(cl.devices)
	full := l.full()
	fM := float64(M)
	s := newSums(l.nc)
	var best *solution
	bestKey := math.Inf(1)
	ub, bound := math.Inf(1), math.Inf(1)
	H := make([]float64, 0)
	next := make([]int32, 0)
	for S := 1; S <= n && S <= int(full); S++ {
		if n%S != 0 {
			continue
		}
		r := n / S
		if fixed := p.Options.Stages; fixed > 0 && S != fixed || !p.Options.splits(M, r) {
			continue
		}
		// Every stage takes at least its share of the compute spread
		// over its replicas; a split under the bound needs at least one
		// stage carrying 1/S of it.
		if (l.fast[full]/float64(S))/(float64(r)*fM) > bound {
			continue
		}
		size := (S + 1) * int(l.n)
		H = H[:0]
		next = next[:0]
		for range size {
			H = append(H, math.Inf(1))
			next = append(next, -1)
		}
		at := func(i int, d int32) int { return i*l.n + int(d) }
		H[at(S, full)] = 0
		// Under the bound a stage computes at most cap (its compute
		// spread over its replicas and micro-batches is part of its
		// time), so the i stages before stage i's start D carry at most
		// i·cap and the S-i from D on at most (S-i)·cap: D lies in a
		// window [lo[i], hi[i]] around i/S of the chain, found by binary
		// search on the prefix compute (which only grows along it).
		lo, hi := make([]int32, S+1), make([]int32, S+1)
		for i := 0; i <= S; i++ {
			lo[i], hi[i] = int32(i), full-int32(S-i)
			switch i {
			case 0:
				hi[i] = 0 // the first stage starts at the empty set
			case S:
				lo[i] = full // the last one ends at the full set
			}
		}
		if cap := bound * float64(r) * fM * (1 + 1e-9); !math.IsInf(cap, 1) {
			tol := 1e-9 * l.fast[full]
			for i := 1; i < S; i++ {
				lo[i] = max(lo[i], int32(sort.Search(int(full)+1, func(x int) bool {
					return l.fast[full]-l.fast[x] <= float64(S-i)*cap+tol
				})))
				hi[i] = min(hi[i], int32(sort.Search(int(full)+1, func(x int) bool {
					return l.fast[x] > float64(i)*cap+tol
				}))-1)
			}
		}
		// finLo[i]..finHi[i] holds every D with H(i, D) finite, so the
		// stage before ends only there; an empty range ends the search
		// at S (no split fits).
		finLo, finHi := make([]int32, S+1), make([]int32, S+1)
		finLo[S], finHi[S] = full, full
		for i := S - 1; i >= 0; i-- {
			if finLo[i+1] > finHi[i+1] {
				finLo[0], finHi[0] = 1, 0
				break
			}
			pos := i * r
			alive := m.alive(S-i, M)
			finLo[i], finHi[i] = full+1, -1
			for d := hi[i]; d >= lo[i]; d-- {
				hd := at(i, d)
				// The next stage starts inside its own window, where the
				// stages after it fit.
				eLo, eHi := max(d+1, lo[i+1], finLo[i+1]), min(hi[i+1], finHi[i+1])
				for e := eLo; e <= eHi; e++ {
					if work != nil {
						if *work--; *work < 0 {
							return nil, errWork
						}
					}
					fastS := l.fast[e] - l.fast[d]
					launchS := l.launch[e] - l.launch[d]
					if stageTooBig(fastS, launchS, r, fM, bound) {
						break
					}
					rest := H[at(i+1, e)]
					if math.IsInf(rest, 1) || rest > bound {
						continue
					}
					l.sums(s, d, e)
					if s.mixed || !s.ok[k] {
						// Every larger stage holds them too.
						break
					}
					sc := m.stage(s, k, l.cut[d], l.cut[e], r, pos, M)
					if sc.paramBytes > cl.memory ||
						memory(&sc, l.stageTemp(d, e), alive, r, M) > cl.memory {
						break
					}
					if sc.time > bound {
						continue
					}
					if v := m.combine(sc.time, rest); v < H[hd] {
						H[hd], next[hd] = v, e
					}
				}
				if !math.IsInf(H[hd], 1) {
					finLo[i], finHi[i] = min(finLo[i], d), max(finHi[i], d)
				}
			}
		}
		v := H[at(0, 0)]
		if math.IsInf(v, 1) {
			continue
		}
		sol := &solution{M: M, value: v, lat: l}
		d := int32(0)
		for i := 0; i < S; i++ {
			e := next[at(i, d)]
			sol.stages = append(sol.stages, solStage{from: d, to: e, class: k, r: r, pos: i * r})
			d = e
		}
		key := v
		if p.Options.Objective != Latency {
			key = p.estimateStep(sol)
		}
		if key < bestKey*(1-1e-12) {
			best, bestKey = sol, key
		}
		if v < ub {
			ub = v
			bound = ub * (1 + 1e-9)
		}
	}
	return best, nil
}

// estimateStep is the step report predicts for a solution (its
// schedule's timeline), without building the plan.
func (p *Problem) estimateStep(s *solution) float64 {
	pt, _ := s.passes()
	return simulateSchedule(pt, s.M, p.Options.Schedule, s.lat.m.training).step
}

package shard

import (
	"fmt"
	"slices"
	"time"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/cbc"
)

// scale turns seconds into the program's unit, microseconds, so Cbc's
// absolute tolerances are far below any real difference.
const scale = 1e6

// relaxNonzeros is the size from which a program is first solved as an
// LP (cbc.Problem.RelaxFirst). The local polytope is tight on the
// programs seen: on DenseNet-121's (one program of 623 ops, 45,000 to
// 60,000 nonzeros: its blocks differ in width, so none repeats) the LP
// optimum is integral and Cbc's, in 0.5-0.7 s where Cbc took 4-6 s.
// Smaller programs stay with Cbc, which solves them in about a second at
// most (a transformer block's, up to about 3,100 nonzeros, in
// milliseconds; gpt_mini's rest of 13,000 in one): where choices tie on
// price, the LP may settle on another than Cbc's search, and their plans
// would change for nothing.
const relaxNonzeros = 30_000

func nonzeros(p *cbc.Problem) int {
	n := 0
	for _, c := range p.Cols {
		n += len(c)
	}
	return n
}

// tieBreak is added per strategy index (in the program's unit): among
// equally cheap choices the earlier strategy wins, replicated first, so
// the solution does not depend on the solver's path.
const tieBreak = 1e-7

// ilp is the program of one region under construction.
type ilp struct {
	products []productCell
	covers   []coverRow
	pr       cbc.Problem
	rows     int
	// x[i][s] is the column of local op i's strategy s.
	x [][]int
}

func (q *ilp) col(obj float64, integer bool) int {
	c := len(q.pr.Cols)
	q.pr.Cols = append(q.pr.Cols, nil)
	q.pr.ColLower = append(q.pr.ColLower, 0)
	q.pr.ColUpper = append(q.pr.ColUpper, 1)
	q.pr.Obj = append(q.pr.Obj, obj)
	if integer {
		q.pr.Integer = append(q.pr.Integer, c)
	}
	return c
}

func (q *ilp) row(lo, hi float64, cols []int, vals []float64) {
	r := q.rows
	q.rows++
	q.pr.RowLower = append(q.pr.RowLower, lo)
	q.pr.RowUpper = append(q.pr.RowUpper, hi)
	for i, c := range cols {
		q.pr.Cols[c] = append(q.pr.Cols[c], cbc.Entry{Row: r, Value: vals[i]})
	}
}

// product adds the product of two choices, each made by exactly one
// of groups of binary columns (a's groups: the producer's strategies by
// its layout; b's: a consumer's by the layout it needs), as continuous
// columns z[a][b] whose sums over b are a's groups and over a b's: at
// an integer choice z is 1 at the pair chosen and 0 elsewhere, and the
// relaxation is the local polytope, far tighter than a bound per pair
// (the programs then solve near their root). cost, when not nil, prices
// each z.
func (q *ilp) product(a, b [][]int, cost func(a, b int) float64) [][]int {
	z := make([][]int, len(a))
	for i := range a {
		z[i] = make([]int, len(b))
		for j := range b {
			c := 0.0
			if cost != nil {
				c = cost(i, j)
			}
			z[i][j] = q.col(c, false)
			q.products = append(q.products, productCell{z: z[i][j], a: a[i], b: b[j]})
		}
	}
	for i := range a {
		cols, vals := slices.Clone(z[i]), ones(len(z[i]))
		for _, c := range a[i] {
			cols, vals = append(cols, c), append(vals, -1)
		}
		q.row(0, 0, cols, vals)
	}
	for j := range b {
		var cols []int
		for i := range a {
			cols = append(cols, z[i][j])
		}
		vals := ones(len(cols))
		for _, c := range b[j] {
			cols, vals = append(cols, c), append(vals, -1)
		}
		q.row(0, 0, cols, vals)
	}
	return z
}

func ones(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = 1
	}
	return v
}

// productCell and coverRow remember how each continuous column follows
// the binary ones, to complete a start solution.
type productCell struct {
	z    int
	a, b []int
}

type coverRow struct {
	y     int
	lower []int
}

// completeStart sets the continuous columns of a start whose binary
// columns are set: each product cell to its pair's product, each cover
// to the largest of what it covers.
func (q *ilp) completeStart() {
	st := q.pr.Start
	sum := func(cols []int) float64 {
		var v float64
		for _, c := range cols {
			v += st[c]
		}
		return v
	}
	for _, pc := range q.products {
		st[pc.z] = sum(pc.a) * sum(pc.b)
	}
	for _, cr := range q.covers {
		st[cr.y] = max(st[cr.y], sum(cr.lower))
	}
}

// solveRegion builds and solves the program of region r: one binary per
// (op, strategy), exactly one per op, and a cost variable per
// (tensor, producer layout, needed layout) that needs a collective in
// the forward pass and per (edge, gradient layout, producer layout)
// that needs one in the backward pass. It returns each op's strategy
// index, in r.ops order.
func (p *problem) solveRegion(r region, limit time.Duration) ([]int, string, error) {
	g := p.g
	q := &ilp{}
	local := make(map[graph.OpID]int, len(r.ops))
	for i, op := range r.ops {
		local[op] = i
	}
	rid := p.region[r.ops[0]]
	q.x = make([][]int, len(r.ops))
	for i, op := range r.ops {
		for si, st := range p.strats[op] {
			obj := p.opTime(op, p.share(st.split)) + p.edgeConst(op, st)
			q.x[i] = append(q.x[i], q.col(obj*scale+tieBreak*float64(si), true))
		}
		ones := make([]float64, len(q.x[i]))
		for k := range ones {
			ones[k] = 1
		}
		q.row(1, 1, q.x[i], ones)
	}
	// Columns of op i's strategies whose layout at a position is l.
	with := func(i int, l Layout, at func(strategy) Layout) []int {
		var cols []int
		for si, st := range p.strats[r.ops[i]] {
			if at(st) == l {
				cols = append(cols, q.x[i][si])
			}
		}
		return cols
	}
	distinct := func(i int, at func(strategy) Layout) []Layout {
		var ls []Layout
		for _, st := range p.strats[r.ops[i]] {
			if l := at(st); !slices.Contains(ls, l) {
				ls = append(ls, l)
			}
		}
		return ls
	}
	for i, u := range r.ops {
		for k, x := range g.Ops[u].Outputs {
			outK := func(st strategy) Layout { return st.out[k] }
			lps := distinct(i, outK)
			bytes := g.Tensors[x].Bytes()
			outside := p.readOutside(x, rid)
			// Producer's choice by its layout of x.
			prod := make([][]int, len(lps))
			for a, lp := range lps {
				prod[a] = with(i, lp, outK)
			}
			// Forward: one collective per (producer layout, needed
			// layout), however many consumers need it: y[lp,lt] covers
			// every consumer's product of (producer at lp, consumer at
			// lt), each product a marginal column (see product).
			type key struct{ lp, lt Layout }
			ys := map[key]int{}
			cover := func(lp, lt Layout, c float64, lower []int) {
				kk := key{lp, lt}
				y, ok := ys[kk]
				if !ok {
					y = q.col(c*scale, false)
					ys[kk] = y
				}
				cols, vals := []int{y}, []float64{1}
				for _, cc := range lower {
					cols, vals = append(cols, cc), append(vals, -1)
				}
				q.row(0, cbc.Inf, cols, vals)
				q.covers = append(q.covers, coverRow{y: y, lower: lower})
			}
			if outside {
				for a, lp := range lps {
					if c := p.convCost(lp, Replicated, bytes); c > 0 {
						cover(lp, Replicated, c, prod[a])
					}
				}
			}
			for _, v := range g.Tensors[x].Consumers {
				j, ok := local[v]
				if !ok || g.Ops[v].Phase != graph.Forward {
					continue
				}
				for pos, in := range g.Ops[v].Inputs {
					if in != x {
						continue
					}
					inPos := func(st strategy) Layout { return st.in[pos] }
					gradPos := func(st strategy) Layout { return st.grad[pos] }
					lts := distinct(j, inPos)
					cons := make([][]int, len(lts))
					for b, lt := range lts {
						cons[b] = with(j, lt, inPos)
					}
					z := q.product(prod, cons, nil)
					for a, lp := range lps {
						for b, lt := range lts {
							if c := p.convCost(lp, lt, bytes); c > 0 {
								cover(lp, lt, c, []int{z[a][b]})
							}
						}
					}
					if !p.hasGrad(x) {
						continue
					}
					// Backward: each consumer's gradient op writes its own
					// gradient of x, converted to what u's gradient needs.
					gls := distinct(j, gradPos)
					grads := make([][]int, len(gls))
					for b, gl := range gls {
						grads[b] = with(j, gl, gradPos)
					}
					q.product(prod, grads, func(a, b int) float64 { return p.convCost(gls[b], dual(lps[a]), bytes) * scale })
				}
			}
		}
	}
	// Start from every op replicated (each op's first strategy), which
	// needs no collective: the solver has an incumbent at once.
	q.pr.Start = make([]float64, len(q.pr.Cols))
	for i := range q.x {
		q.pr.Start[q.x[i][0]] = 1
	}
	q.completeStart()
	q.pr.MaxSeconds = limit.Seconds()
	q.pr.RelaxFirst = nonzeros(&q.pr) >= relaxNonzeros
	sol, err := cbc.Solve(&q.pr)
	if err != nil {
		return nil, "", fmt.Errorf("shard: %w", err)
	}
	choice := make([]int, len(r.ops))
	if sol.X == nil {
		return choice, fmt.Sprintf("the program of %d ops found no solution (%s); its ops stay replicated", len(r.ops), sol.Status), nil
	}
	for i := range r.ops {
		best := 0
		for si, c := range q.x[i] {
			if sol.X[c] > sol.X[q.x[i][best]] {
				best = si
			}
		}
		choice[i] = best
	}
	note := ""
	if sol.Status != cbc.Optimal {
		note = fmt.Sprintf("the program of %d ops stopped at its time limit (%s); its best solution is kept", len(r.ops), sol.Status)
	}
	return choice, note, nil
}

// edgeConst is the cost of strategy st of op v that does not depend on
// another op of v's region: the backward collective of an input from
// outside the region (taken replicated) or of a parameter (held as st
// reads it), and the update of a parameter v reads first, divided when
// st splits the parameter.
func (p *problem) edgeConst(v graph.OpID, st strategy) float64 {
	g := p.g
	cost := 0.0
	seen := map[graph.TensorID]bool{}
	for j, x := range g.Ops[v].Inputs {
		tt := &g.Tensors[x]
		internal := tt.Producer != graph.NoOp && g.Ops[tt.Producer].Phase == graph.Forward && p.region[tt.Producer] == p.region[v]
		if internal || seen[x] {
			continue
		}
		seen[x] = true
		lp := Replicated
		if tt.Kind == graph.Parameter {
			lp = st.in[j]
			if u := p.update[x]; u != graph.NoOp && tt.Consumers[0] == v {
				s := float32(0)
				if lp.IsSplit() {
					s = 1
				}
				cost += p.m.RunTime(u, p.share(s))
			}
		}
		if p.hasGrad(x) {
			cost += p.convCost(st.grad[j], dual(lp), tt.Bytes())
		}
	}
	return cost
}

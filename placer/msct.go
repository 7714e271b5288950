package placer

import (
	"context"
	"fmt"
	"github.com/opplace/opplace/internal/cbc"
	"math"
	"time"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

func init() {
	Register("m-sct", "Baechi's m-SCT: m-ETF that keeps devices for favourite children chosen by the Hanen-Munier LP (COIN-OR Clp)", func() Placer { return &msct{} })
}

// MaxSCTColumns bounds the favourite-child LP (one column per edge and
// group of the grouped graph); larger graphs fall back to m-ETF with a
// note, since Clp's time grows faster than linearly.
var MaxSCTColumns = 10000

// msct is Baechi's m-SCT. The Hanen-Munier small-communication-time LP
// over the co-placement groups (see Group),
//
//	minimise w  s.t.  s_i + p_i + c_ij x_ij <= s_j   for each edge i->j
//	                  sum_j x_ij >= outdeg(i) - 1,  sum_i x_ij >= indeg(j) - 1
//	                  s_i + p_i <= w,  0 <= x_ij <= 1,
//
// (p mean op time, c mean transfer time of the bytes on the edge) picks
// for each group at most one favourite child: the edge with x rounded to
// 0. Inside a group every op's single consumer is its favourite. Then
// m-ETF runs with one change: when a device finishes an op whose
// favourite child is not yet scheduled, the device is kept for that
// child, and another op may use it only if it finishes before the child's
// inputs could be there, unless nothing else can run anywhere.
type msct struct{ notes []string }

func (m *msct) Notes() []string { return m.notes }

func (m *msct) Place(ctx context.Context, p *Problem) (sim.Placement, error) {
	return placed(m.PlaceJudged(ctx, p))
}

func (m *msct) PlaceJudged(ctx context.Context, p *Problem) (sim.Placement, *sim.Result, error) {
	m.notes = nil
	gs, err := Group(p)
	if err != nil {
		return sim.Placement{}, nil, err
	}
	gg := newGroupGraph(p, gs)
	if cols := len(gg.edges) + gs.Len() + 1; cols > MaxSCTColumns {
		m.notes = append(m.notes, fmt.Sprintf("the favourite-child LP would have %d columns (%s), over the limit of %d: placed by plain m-ETF",
			cols, gs, MaxSCTColumns))
		return listPlacer(etf).PlaceJudged(ctx, p)
	}
	begin := time.Now()
	x, err := sctLP(p, gg)
	if err != nil {
		m.notes = append(m.notes, fmt.Sprintf("favourite-child LP failed (%v): placed by plain m-ETF", err))
		return listPlacer(etf).PlaceJudged(ctx, p)
	}
	fav := favourites(p, gg, x)
	nfav := 0
	for _, f := range fav {
		if f >= 0 {
			nfav++
		}
	}
	m.notes = append(m.notes, fmt.Sprintf("LP on %d groups, %d edges solved by Clp in %s; %d ops have a favourite child",
		gs.Len(), len(gg.edges), time.Since(begin).Round(time.Microsecond), nfav))
	if err := ctx.Err(); err != nil {
		return sim.Placement{}, nil, err
	}
	return sctSchedule(ctx, p, fav)
}

// sctLP solves the relaxation and returns x per group edge.
func sctLP(p *Problem, gg *groupGraph) ([]float64, error) {
	gs := gg.gs
	lim, err := newLimits(p)
	if err != nil {
		return nil, err
	}
	lat, perByte := meanLink(p)
	const us = 1e6 // the LP works in microseconds, away from Clp's tolerances
	pt := make([]float64, gs.Len())
	for g, members := range gs.Members {
		for _, op := range members {
			var sum float64
			devs := lim.devices(op)
			for _, d := range devs {
				sum += p.Costs.OpTime(op, d)
			}
			pt[g] += us * sum / float64(len(devs))
		}
	}
	ne, ng := len(gg.edges), gs.Len()
	lp := &cbc.Problem{Cols: make([][]cbc.Entry, ne+ng+1)}
	cols := lp.Cols
	row := func(lo float64) int {
		lp.RowLower, lp.RowUpper = append(lp.RowLower, lo), append(lp.RowUpper, math.Inf(1))
		return len(lp.RowLower) - 1
	}
	sCol := func(g int32) int { return ne + int(g) }
	wCol := ne + ng
	for e, ed := range gg.edges {
		r := row(pt[ed.from])
		c := 0.0
		if ed.bytes > 0 {
			c = us * (lat + float64(ed.bytes)*perByte)
		}
		cols[sCol(ed.to)] = append(cols[sCol(ed.to)], cbc.Entry{Row: r, Value: 1})
		cols[sCol(ed.from)] = append(cols[sCol(ed.from)], cbc.Entry{Row: r, Value: -1})
		cols[e] = append(cols[e], cbc.Entry{Row: r, Value: -c})
	}
	for g := 0; g < ng; g++ {
		if k := len(gg.out[g]); k >= 2 {
			r := row(float64(k - 1))
			for _, e := range gg.out[g] {
				cols[e] = append(cols[e], cbc.Entry{Row: r, Value: 1})
			}
		}
		if k := len(gg.in[g]); k >= 2 {
			r := row(float64(k - 1))
			for _, e := range gg.in[g] {
				cols[e] = append(cols[e], cbc.Entry{Row: r, Value: 1})
			}
		}
		if len(gg.out[g]) == 0 {
			r := row(pt[g])
			cols[wCol] = append(cols[wCol], cbc.Entry{Row: r, Value: 1})
			cols[sCol(int32(g))] = append(cols[sCol(int32(g))], cbc.Entry{Row: r, Value: -1})
		}
	}
	lp.ColLower, lp.ColUpper, lp.Obj = make([]float64, len(cols)), make([]float64, len(cols)), make([]float64, len(cols))
	for j := range lp.ColUpper {
		lp.ColUpper[j] = math.Inf(1)
		if j < ne {
			lp.ColUpper[j] = 1
		}
	}
	lp.Obj[wCol] = 1
	sol, err := cbc.SolveLP(lp)
	if err != nil {
		return nil, err
	}
	return sol.X[:ne], nil
}

// favourites maps the LP's favourite edges to ops: fav[op] is op's
// favourite child or -1. Each op has at most one favourite child and is
// the favourite of at most one parent.
func favourites(p *Problem, gg *groupGraph, x []float64) []graph.OpID {
	g, gs := p.Graph, gg.gs
	n := len(g.Ops)
	fav := make([]graph.OpID, n)
	taken := make([]bool, n)
	for i := range fav {
		fav[i] = -1
	}
	// Inside a group: the single consumer.
	for _, op := range p.Order {
		if s := p.Adj.Succs(op); len(s) == 1 && gs.Of[s[0]] == gs.Of[op] && !taken[s[0]] {
			fav[op], taken[s[0]] = s[0], true
		}
	}
	// Between groups: per group, its edge of least x below 1/2, realised
	// by the heaviest tensor crossing it (ties by position).
	pos := make([]int32, n)
	for i, op := range p.Order {
		pos[op] = int32(i)
	}
	for grp := range gs.Members {
		best := int32(-1)
		for _, e := range gg.out[grp] {
			if x[e] < 0.5-1e-9 && (best < 0 || x[e] < x[best]-1e-9) {
				best = e
			}
		}
		if best < 0 {
			continue
		}
		to := gg.edges[best].to
		var bu, bv graph.OpID = -1, -1
		var bb int64 = -1
		for _, u := range gs.Members[grp] {
			if fav[u] >= 0 {
				continue
			}
			for _, out := range g.Ops[u].Outputs {
				b := g.Tensors[out].Bytes()
				for _, v := range g.Tensors[out].Consumers {
					if gs.Of[v] != to || taken[v] {
						continue
					}
					if b > bb || b == bb && (pos[u] < pos[bu] || u == bu && pos[v] < pos[bv]) {
						bu, bv, bb = u, v, b
					}
				}
			}
		}
		if bu >= 0 {
			fav[bu], taken[bv] = bv, true
		}
	}
	return fav
}

// sctSchedule is m-ETF with devices kept for favourite children.
func sctSchedule(ctx context.Context, p *Problem, fav []graph.OpID) (sim.Placement, *sim.Result, error) {
	return placeFitting(p, func(s *listState) (sim.Placement, error) { return sct(ctx, s, fav) })
}

// sct places every op of s's problem by m-ETF with devices kept for
// favourite children fav.
func sct(ctx context.Context, s *listState, fav []graph.OpID) (sim.Placement, error) {
	p := s.p
	keep := make([]graph.OpID, s.nd) // the child each device is kept for
	for d := range keep {
		keep[d] = -1
	}
	var ready []graph.OpID
	for step := 0; step < len(p.Graph.Ops); step++ {
		if step%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return sim.Placement{}, err
			}
		}
		ready = append(ready, s.fresh...)
		s.fresh = s.fresh[:0]
		type pick struct {
			op    graph.OpID
			dev   int
			start float64
		}
		better := func(b pick, op graph.OpID, d int, start float64) bool {
			return b.op < 0 || start < b.start || start == b.start && (s.pos[op] < s.pos[b.op] || s.pos[op] == s.pos[b.op] && d < b.dev)
		}
		kept, urgent := pick{-1, -1, 0}, pick{-1, -1, 0}
		for _, op := range ready {
			for _, d := range s.candidates(op) {
				start := max(s.devFree[d], s.dataReady(op, d))
				if !better(urgent, op, d, start) && !better(kept, op, d, start) {
					continue
				}
				if !s.fits(op, d, start) {
					continue
				}
				if better(urgent, op, d, start) {
					urgent = pick{op, d, start}
				}
				if j := keep[d]; j >= 0 && j != op && s.dev[j] < 0 && start+p.Costs.OpTime(op, d) > s.earliest(j, d) {
					continue // d waits for j
				}
				if better(kept, op, d, start) {
					kept = pick{op, d, start}
				}
			}
		}
		best := kept
		if best.op < 0 {
			best = urgent
		}
		if best.op < 0 {
			return sim.Placement{}, s.stuck(ready)
		}
		s.schedule(best.op, best.dev, best.start)
		keep[best.dev] = -1
		if f := fav[best.op]; f >= 0 && s.dev[f] < 0 {
			keep[best.dev] = f
		}
		for i, r := range ready {
			if r == best.op {
				ready[i] = ready[len(ready)-1]
				ready = ready[:len(ready)-1]
				break
			}
		}
	}
	return s.placement(), nil
}

// earliest is a lower bound on when op's inputs could all be on device d,
// counting only the producers already scheduled.
func (s *listState) earliest(op graph.OpID, d int) float64 {
	var t float64
	for _, in := range s.inputs[op] {
		pr := s.g.Tensors[in].Producer
		if pr == graph.NoOp || s.dev[pr] < 0 {
			continue
		}
		if s.dev[pr] == d {
			t = max(t, s.end[pr])
		} else {
			t = max(t, s.end[pr]+s.p.Costs.TensorTransfer(in, s.dev[pr], d))
		}
	}
	return t
}

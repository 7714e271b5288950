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
	Register("m-sct-baechi", "reference: Baechi's m-SCT as its code runs it, favourite-child LP by Clp (for measuring opplace's placers; not in auto)", func() Placer { return &baechiSCT{} })
}

// BaechiSCTThreshold is the rounding threshold of m-sct-baechi's
// favourite-child LP: an edge is a favourite when its relaxed x is at
// most this (Baechi's sct_threshold flag, default 0.1 in placer_lib.py).
const BaechiSCTThreshold = 0.1

// baechiSCT is m-SCT as Baechi's reference implementation runs it
// (github.com/beomyeol/baechi, placer/m_sct.py: FavoriteChildLPSolver,
// SCTDevice and SCT, on m_etf.py's ETF), with Baechi's defaults
// (placer_lib.py: method m_sct, sct_threshold 0.1, colocation on, no
// memory reservation, no grouping or fusion). A reference for
// measurement, not a strategy auto runs.
//
// The favourite-child LP is the Hanen-Munier relaxation on the op graph
// itself, one column per edge, start time and the makespan:
//
//	minimise w  s.t.  s_i + p_i + c_ij x_ij <= s_j   for each edge i->j
//	                  sum_j x_ij >= outdeg(i) - 1,  sum_i x_ji >= indeg(i) - 1
//	                  s_i + p_i <= w  for every op,  0 <= x <= 1,  s >= 0
//
// with p an op's time and c the edge's transfer time (Baechi's are
// device-independent; here the means over the devices an op may use and
// over device pairs, in whole microseconds). An edge is a favourite when
// round(x - 0.1 + 0.5) is 0 (Python's round: half to even), walking the
// edges by source then target: a later favourite edge of a source
// replaces its earlier one, and a target already some parent's
// favourite takes that parent's favourite away (_assign_favorite_child),
// so an op may end with none. Baechi solved the LP with MOSEK through
// cvxopt and took its basic solution; here Clp's dual simplex gives a
// basic optimum, not necessarily the same one. The LP has a column per
// edge and per op, so past MaxSCTColumns (as for m-sct) this fails
// rather than take minutes; m-sct falls back to m-ETF there.
//
// Scheduling is Baechi's m-ETF (see baechiETF) with SCTDevice's rule: a
// free device whose last op's favourite child is ready, unplaced, and
// could start on this device no later than anywhere else is "awake": it
// runs the ready op of earliest urgent time (the latest time it could
// start on any device), if that time has come, else the favourite child
// once it can start here, else waits for whichever comes first.
//
// Where opplace's m-sct differs: its LP runs on co-placement groups with
// a favourite per group realised by the heaviest tensor, favourites
// inside a group are single consumers, and a device waits only while the
// child could not start before another op would finish; its scheduling
// is opplace's m-ETF (see baechiETF for those differences).
type baechiSCT struct{ notes []string }

func (m *baechiSCT) Notes() []string { return m.notes }

func (m *baechiSCT) Place(ctx context.Context, p *Problem) (sim.Placement, error) {
	if err := noApart(p, "m-sct-baechi"); err != nil {
		return sim.Placement{}, err
	}
	m.notes = nil
	b, err := newBaechi(p, nil)
	if err != nil {
		return sim.Placement{}, err
	}
	begin := time.Now()
	lp := baechiLP(b)
	if cols := len(lp.edges) + lp.n + 1; cols > MaxSCTColumns {
		// No fallback: a reference that quietly ran m-ETF would be
		// measured as Baechi's m-SCT.
		return sim.Placement{}, fmt.Errorf("m-sct-baechi: the favourite-child LP would have %d columns (%d edges, %d ops), over the limit of %d (placer.MaxSCTColumns); Baechi gives it to MOSEK, Clp takes minutes at this size",
			cols, len(lp.edges), lp.n, MaxSCTColumns)
	}
	x, err := lp.solve()
	if err != nil {
		return sim.Placement{}, err
	}
	b.fav = lp.favourites(x, BaechiSCTThreshold)
	nfav := 0
	for _, f := range b.fav {
		if f >= 0 {
			nfav++
		}
	}
	m.notes = append(m.notes, fmt.Sprintf("favourite-child LP on %d ops, %d edges solved by Clp in %s; %d ops have a favourite child",
		len(p.Graph.Ops), len(lp.edges), time.Since(begin).Round(time.Microsecond), nfav))
	if err := ctx.Err(); err != nil {
		return sim.Placement{}, err
	}
	return b.run(ctx, "m-SCT")
}

// awakeFor is the favourite child that makes free device d awake
// (SCTDevice.get_op_to_schedule), or -1: d's last op's favourite child
// is ready, not placed, and starts on d no later than on any device.
func (b *baechi) awakeFor(d int) graph.OpID {
	l := b.last[d]
	if l < 0 {
		return -1
	}
	fc := b.fav[l]
	if fc < 0 || b.dev[fc] >= 0 || !b.isReady[fc] {
		return -1
	}
	t := b.schedAt(fc, d)
	if t == baechiNone {
		return -1
	}
	for e := range b.nd {
		if u := b.schedAt(fc, e); u != baechiNone && u < t {
			return -1
		}
	}
	return fc
}

// urgentOp is SCTDevice._get_earliest_urgent_op: the ready op of
// earliest urgent time, ties by topological position, that is not placed
// elsewhere and fits d's memory; -1 for none. Unlike Baechi it also asks
// that the op may start on d at all (pins, device types, its group's
// memory), where Baechi would go on to compare a missing time and fail.
func (b *baechi) urgentOp(d int) graph.OpID {
	best := graph.OpID(-1)
	for _, op := range b.ready {
		if b.schedAt(op, d) == baechiNone || !b.placeable(op, d) {
			continue
		}
		if best < 0 || b.before(b.urgent[op], op, b.urgent[best], best) {
			best = op
		}
	}
	return best
}

// onAwait is SCTDevice._get_op_on_await: an urgent op whose time has
// come, else the favourite child fc if it can start now, else -1.
func (b *baechi) onAwait(d int, fc graph.OpID) graph.OpID {
	if u := b.urgentOp(d); u >= 0 && b.urgent[u] <= b.cur[d] {
		return u
	}
	if b.schedAt(fc, d) <= b.cur[d] {
		return fc
	}
	return -1
}

// awakeNext is SCTDevice.get_next_ts of an awake device: the earlier of
// its favourite child's start there and the earliest urgent time.
func (b *baechi) awakeNext(d int) int64 {
	next := int64(baechiNone)
	if fc := b.fav[b.last[d]]; b.dev[fc] < 0 {
		next = b.schedAt(fc, d)
	}
	if u := b.urgentOp(d); u >= 0 && (next == baechiNone || b.urgent[u] < next) {
		next = b.urgent[u]
	}
	return next
}

// favLPEdge is an edge of the favourite-child LP: Baechi's edge ID is its
// index.
type favLPEdge struct {
	from, to graph.OpID
	// cost is the edge's transfer time in microseconds.
	cost float64
}

// favLP is FavoriteChildLPSolver's problem.
type favLP struct {
	n     int
	edges []favLPEdge
	// weight is each op's time in microseconds.
	weight []float64
	// out and in list each op's edges by ID.
	out, in [][]int32
}

// baechiLP builds the LP. Edge IDs follow placer_lib.py: edges are
// numbered as each op's inputs are met, ops by ID.
func baechiLP(b *baechi) *favLP {
	n := len(b.g.Ops)
	lp := &favLP{n: n, weight: make([]float64, n), out: make([][]int32, n), in: make([][]int32, n)}
	for i := range n {
		op := graph.OpID(i)
		devs := b.lim.devices(op)
		for _, d := range devs {
			lp.weight[i] += float64(b.weight(op, d))
		}
		lp.weight[i] /= float64(len(devs))
		for _, e := range b.in[i] {
			id := int32(len(lp.edges))
			lp.edges = append(lp.edges, favLPEdge{from: e.from, to: op, cost: b.meanCost(e)})
			lp.out[e.from] = append(lp.out[e.from], id)
			lp.in[i] = append(lp.in[i], id)
		}
	}
	return lp
}

// meanCost is edge e's transfer time, the sum of its tensors', averaged
// over the ordered pairs of distinct devices (Baechi's is the same
// between any two).
func (b *baechi) meanCost(e baechiEdge) float64 {
	if b.nd < 2 {
		return 0
	}
	var sum int64
	for s := range b.nd {
		for r := range b.nd {
			if s == r {
				continue
			}
			for _, key := range e.keys {
				sum += b.cost(key, s, r)
			}
		}
	}
	return float64(sum) / float64(b.nd*(b.nd-1))
}

// solve returns the relaxed x of every edge. Columns are Baechi's:
// edges, start times, then the makespan; every row of Baechi's is here
// but the bounds on x and s, which are column bounds.
func (lp *favLP) solve() ([]float64, error) {
	ne := len(lp.edges)
	sCol := func(op graph.OpID) int { return ne + int(op) }
	wCol := ne + lp.n
	prog := &cbc.Problem{Cols: make([][]cbc.Entry, wCol+1)}
	cols := prog.Cols
	row := func(upper float64) int {
		prog.RowLower, prog.RowUpper = append(prog.RowLower, math.Inf(-1)), append(prog.RowUpper, upper)
		return len(prog.RowLower) - 1
	}
	add := func(col, r int, v float64) { cols[col] = append(cols[col], cbc.Entry{Row: r, Value: v}) }
	// s_i - s_j + c_ij x_ij <= -p_i
	for e, ed := range lp.edges {
		r := row(-lp.weight[ed.from])
		add(sCol(ed.from), r, 1)
		add(sCol(ed.to), r, -1)
		add(e, r, ed.cost)
	}
	// -sum x <= 1 - k: at most one favourite child, and parent.
	for _, side := range [][][]int32{lp.out, lp.in} {
		for _, es := range side {
			if len(es) == 0 {
				continue
			}
			r := row(float64(1 - len(es)))
			for _, e := range es {
				add(int(e), r, -1)
			}
		}
	}
	// s_i - w <= -p_i
	for i := range lp.n {
		r := row(-lp.weight[i])
		add(sCol(graph.OpID(i)), r, 1)
		add(wCol, r, -1)
	}
	prog.ColLower, prog.ColUpper, prog.Obj = make([]float64, len(cols)), make([]float64, len(cols)), make([]float64, len(cols))
	for j := range prog.ColLower {
		switch {
		case j < ne:
			prog.ColUpper[j] = 1
		case j < wCol:
			prog.ColUpper[j] = math.Inf(1)
		default:
			prog.ColLower[j], prog.ColUpper[j] = math.Inf(-1), math.Inf(1)
		}
	}
	prog.Obj[wCol] = 1
	sol, err := cbc.SolveLP(prog)
	if err != nil {
		return nil, fmt.Errorf("m-sct-baechi: the favourite-child LP (%d ops, %d edges): %w", lp.n, ne, err)
	}
	return sol.X[:ne], nil
}

// favourites is SCT._assign_favorite_child on x rounded as
// refine_favorite_child_edges does: fav[op] is op's favourite child or
// -1. Edges are walked by source, then target, both by ID (networkx's
// order for Baechi's graph).
func (lp *favLP) favourites(x []float64, threshold float64) []graph.OpID {
	fav := make([]graph.OpID, lp.n)
	parent := make([]graph.OpID, lp.n)
	for i := range fav {
		fav[i], parent[i] = -1, -1
	}
	for u := range lp.n {
		// An op's out-edges are numbered by target: targets are met in
		// ID order.
		for _, e := range lp.out[u] {
			if math.RoundToEven(x[e]-threshold+0.5) != 0 {
				continue
			}
			v := lp.edges[e].to
			fav[u] = v
			if p := parent[v]; p >= 0 {
				fav[p] = -1
			}
			parent[v] = graph.OpID(u)
		}
	}
	return fav
}

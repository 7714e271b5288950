package placer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/cbc"
	"github.com/opplace/opplace/internal/progress"
	"github.com/opplace/opplace/sim"
)

// Defaults of the ilp placer.
const (
	DefaultILPGroups  = 40
	DefaultILPSeconds = 10.0
	// DefaultILPNodes bounds Cbc's search by nodes, which unlike time
	// gives the same answer on every machine.
	DefaultILPNodes = 200
)

func init() {
	Register("ilp", fmt.Sprintf("Pesto-style exact placement and ordering by MILP (COIN-OR Cbc) on a graph coarsened to about %d groups", DefaultILPGroups),
		func() Placer { return &ILP{} })
}

// ILP places and orders a coarsened graph exactly, after Pesto (Hafeez et
// al. 2021): the co-placement groups (Group) are merged into about Groups
// units (Coarsen) and a mixed-integer program chooses each unit's device
// and start time:
//
//	minimise C
//	sum_d x_gd = 1                                      each unit on one device
//	s_h >= s_g + p_g(x) + c_dd'(bytes) (x_gd + x_hd' - 1) each edge g->h, d != d'
//	s_h >= s_g + p_g(x)                                   each edge
//	s_h >= s_g + p_g(x) - M(1-o_gh) - M(2-x_gd-x_hd)      units with no path between
//	s_g >= s_h + p_h(x) - M o_gh    - M(2-x_gd-x_hd)      them, each common device
//	sum_g m_g x_gd <= memory_d                            each device
//	x_gd = x_hd                                           colocated units
//	C >= s_g + p_g(x)                                     each sink
//	C >= sum_g t_gd x_gd                                  each device
//
// where p_g(x) = sum_d t_gd x_gd is the unit's time on its device and m_g
// its parameters, outputs and scratch (a conservative memory model: the
// simulator frees activations, the MILP does not). M is the makespan of
// the starting solution, the best of every single device and a list
// schedule of the units, which Cbc is given, so the result is never worse
// than that start in the MILP's own terms. Cbc runs to optimality or
// MaxSeconds; the notes give the incumbent, the bound and the gap.
type ILP struct {
	// Groups is the target number of units; 0 means DefaultILPGroups.
	Groups int
	// MaxSeconds limits Cbc; 0 means DefaultILPSeconds. Only a search
	// stopped by time can differ between runs.
	MaxSeconds float64
	// MaxNodes limits Cbc's branch-and-bound nodes; 0 means
	// DefaultILPNodes.
	MaxNodes int
	// Start is a placement to start from (a heuristic's), or none: each
	// unit takes the device most of its work has there, and the MILP
	// starts from the best of it, every single device and a list
	// schedule of the units.
	Start sim.Placement
	notes []string
}

// Notes reports the model's size, Cbc's status, incumbent and bound.
func (m *ILP) Notes() []string { return m.notes }

// WarmStart makes pl the MILP's first candidate start (see Start).
func (m *ILP) WarmStart(pl sim.Placement) { m.Start = pl }

// ilpModel is the coarse problem in microseconds.
type ilpModel struct {
	p       *Problem
	gs      *Groups
	gg      *groupGraph
	nd      int
	t       [][]float64 // t[g][d], +Inf where not allowed
	mem     []float64   // m_g in bytes
	coloc   [][2]int32  // units that must share a device
	reach   [][]uint64  // reach[g] bitset of units reachable from g
	allowed [][]int
	// apart[k][g] is unit g's group in separate rule k, -1 for none:
	// units of different groups of a rule never share a device.
	apart [][]int8
	// capacity is what the memory model may put on each device: its
	// memory less the largest transient any op needs (cost.Transient).
	capacity []float64
	// size describes the model for notes and messages.
	size string
}

func (m *ILP) Place(ctx context.Context, p *Problem) (sim.Placement, error) {
	return placed(m.PlaceJudged(ctx, p))
}

// PlaceJudged solves the MILP and checks its placement with the judge.
// The MILP's memory model does not see the copies a device receives, so
// where the simulator finds a device over its memory the MILP is solved
// again with that device's capacity lowered by the overshoot (below the
// load the MILP put there), as the list placers do (placeFitting), within
// the one time limit.
func (m *ILP) PlaceJudged(ctx context.Context, p *Problem) (sim.Placement, *sim.Result, error) {
	m.notes = nil
	target, secs := m.Groups, m.MaxSeconds
	if target <= 0 {
		target = DefaultILPGroups
	}
	if secs <= 0 {
		secs = DefaultILPSeconds
	}
	md, err := m.model(p, target)
	if err != nil {
		return sim.Placement{}, nil, err
	}
	devs := p.Costs.Cluster.Devices
	// The start, simulated: the MILP's placement is kept only where the
	// judge finds it faster, since the MILP runs each unit whole and so
	// can rank two placements otherwise than the simulator.
	given := m.Start
	var givenRes *sim.Result
	if given.Device != nil {
		if r, err := p.Simulate(given); err == nil && fitsAll(r, devs) {
			givenRes = r
		}
	}
	deadline := time.Now().Add(time.Duration(secs * float64(time.Second)))
	for round := 0; ; round++ {
		left := secs
		if round > 0 {
			left = time.Until(deadline).Seconds()
		}
		if left <= 0 {
			return sim.Placement{}, nil, Infeasible(p, fmt.Sprintf("the MILP on %s: the simulator found a device over its memory, and the %gs limit left no time to solve again", md.size, secs))
		}
		dev, start, err := m.solve(ctx, md, left)
		if err != nil {
			return sim.Placement{}, nil, err
		}
		if err := ctx.Err(); err != nil {
			return sim.Placement{}, nil, err
		}
		dev = md.canonical(dev)
		pl := md.placement(dev, start)
		res, err := p.Simulate(pl)
		if err != nil {
			return sim.Placement{}, nil, err
		}
		load := make([]float64, md.nd)
		for u, d := range dev {
			load[d] += md.mem[u]
		}
		worst, over := -1, int64(0)
		for d, peak := range res.PeakMemory {
			if o := peak - devs[d].Memory; o > 0 {
				md.capacity[d] = min(md.capacity[d], load[d]) - float64(o)
				if o > over {
					worst, over = d, o
				}
			}
		}
		if worst < 0 {
			if round > 0 {
				m.notes = append(m.notes, fmt.Sprintf("solved %d times: the simulator found a device over its memory where the MILP did not, and the MILP was solved again with that device's capacity lowered", round+1))
			}
			if givenRes != nil && givenRes.Step < res.Step {
				m.notes = append(m.notes, fmt.Sprintf("the MILP's placement simulates to %.3f ms, slower than the start's %.3f ms (the MILP runs each unit whole): kept the start",
					res.Step*1e3, givenRes.Step*1e3))
				return given, givenRes, nil
			}
			if givenRes != nil {
				m.notes = append(m.notes, fmt.Sprintf("the MILP's placement simulates to %.3f ms, %.1f%% faster than the start's %.3f ms",
					res.Step*1e3, 100*(1-res.Step/givenRes.Step), givenRes.Step*1e3))
			}
			return pl, res, nil
		}
		if round == fitRounds {
			return sim.Placement{}, nil, Infeasible(p, fmt.Sprintf("the MILP on %s was solved %d times, and the simulator still found %s over its memory: it peaks at %s, which holds %s",
				md.size, fitRounds+1, devs[worst].Name, cluster.FormatBytes(res.PeakMemory[worst]), cluster.FormatBytes(devs[worst].Memory)))
		}
		m.Start = pl // the last placement, repaired where it can be, starts the next solve
	}
}

// fitsAll reports whether every device's simulated peak is within its
// memory.
func fitsAll(r *sim.Result, devs []cluster.Device) bool {
	for d, peak := range r.PeakMemory {
		if peak > devs[d].Memory {
			return false
		}
	}
	return true
}

// model chooses the units and builds the MILP's data.
func (m *ILP) model(p *Problem, target int) (*ilpModel, error) {
	lim, err := newLimits(p)
	if err != nil {
		return nil, err
	}
	// Co-placement chains whole branches into their join (an Inception
	// block becomes one group), hiding the parallelism the MILP is for:
	// without a training step's structure to go by (stepUnits), coarsen
	// from chains of ops, with colocation merged.
	base, err := group(p, chains)
	if err != nil {
		return nil, err
	}
	// Units with no path between them need ordering constraints on every
	// common device, and those make the MILP hard: coarsen further until
	// there are at most maxOrderRows of them.
	var md *ilpModel
	fine := false // base is the colocation classes themselves
	for {
		next, how := stepUnits(p, lim, target, m.Start.Device), "forward units, each with a mirror unit of its gradient and update ops"
		if next == nil {
			next, how = Coarsen(p, base, target), fmt.Sprintf("from %d chains", base.Len())
		}
		nm, err := newILPModel(p, next)
		if errors.Is(err, errUnitsApart) && md != nil {
			break // keep the last units that met
		}
		if errors.Is(err, errUnitsApart) && !fine {
			// Pins coarsened into colocated units left them no common
			// device: start again from the colocation classes.
			if base, err = group(p, noMerge); err != nil {
				return nil, err
			}
			fine, target = true, base.Len()
			continue
		}
		if err != nil {
			return nil, err
		}
		md = nm
		md.size = fmt.Sprintf("%d units (%s) of %d ops", next.Len(), how, len(p.Graph.Ops))
		if md.orderRows() <= maxOrderRows || target <= 2 {
			break
		}
		target = target * 3 / 4
	}
	if n := md.pairRows(); n > maxPairRows {
		return nil, fmt.Errorf("ilp: its program would have %d transfer rows (a row per edge and pair of devices its ends may run on, %d devices), more than the %d it builds and solves in seconds", n, md.nd, maxPairRows)
	}
	return md, nil
}

// maxPairRows bounds the transfer rows of the program (pairRows): on a
// cluster of hundreds of devices they grow with the square of its size
// (2.4 million per edge on 1,536 GPUs), and the program is not built.
const maxPairRows = 2_000_000

// pairRows is how many transfer rows build makes: per edge between units
// that moves bytes, a row per pair of distinct devices its ends may run
// on.
func (md *ilpModel) pairRows() int {
	n := 0
	for _, e := range md.gg.edges {
		if e.bytes != 0 {
			n += len(md.allowed[e.from]) * len(md.allowed[e.to])
		}
	}
	return n
}

// solve runs Cbc once on md within secs, from the best starting solution
// (see start), and returns each unit's device and start.
func (m *ILP) solve(ctx context.Context, md *ilpModel, secs float64) ([]int, []float64, error) {
	p := md.p
	startDev, startS, ub, from := md.start(m.Start)
	if startDev != nil {
		startDev = md.canonical(startDev)
	}
	begin := time.Now()
	prob, cols := md.build(startDev, startS, ub)
	prob.MaxSeconds = secs
	prob.MaxNodes = m.MaxNodes
	prob.NoCuts = true
	if prob.MaxNodes <= 0 {
		prob.MaxNodes = DefaultILPNodes
	}
	solving := progress.Timed(progress.From(ctx), fmt.Sprintf("ilp: Cbc (%.3gs limit)", secs), time.Duration(secs*float64(time.Second)))
	sol, err := cbc.Solve(prob)
	elapsed := time.Since(begin)
	solving()
	if err != nil {
		return nil, nil, err
	}
	size := fmt.Sprintf("%s, %d variables, %d constraints", md.size, len(prob.Cols), len(prob.RowLower))
	switch {
	case sol.X != nil:
		dev, start := cols.decode(sol.X)
		gap := 0.0
		if sol.Objective > 0 {
			gap = (sol.Objective - sol.Bound) / sol.Objective
		}
		status := sol.Status.String()
		if sol.Status != cbc.Optimal {
			status = fmt.Sprintf("stopped at its limit of %d nodes", prob.MaxNodes)
			if elapsed.Seconds() >= 0.95*secs {
				status = fmt.Sprintf("stopped at its time limit (%.3gs; a search stopped by time may end elsewhere on another run)", secs)
			}
		}
		m.notes = append(m.notes, fmt.Sprintf("MILP on %s: %s after %s, makespan %.3f ms (coarse model; start: %s at %.3f ms), bound %.3f ms, gap %.1f%%",
			size, status, elapsed.Round(time.Millisecond), sol.Objective/1e3, from, ub/1e3, sol.Bound/1e3, 100*gap))
		return dev, start, nil
	case sol.Status == cbc.Infeasible:
		return nil, nil, Infeasible(p, fmt.Sprintf("the MILP on %s has no solution: its memory model (%s) rejects every placement of these units", size, ilpMemoryModel))
	}
	ended := fmt.Sprintf("found no solution in %s", elapsed.Round(time.Millisecond))
	if sol.Overran {
		ended = fmt.Sprintf("ran past its %.3gs limit (it does not look at the clock inside its root LP and heuristics) and was stopped after %s", secs, elapsed.Round(time.Millisecond))
	}
	if startDev != nil {
		m.notes = append(m.notes, fmt.Sprintf("MILP on %s: Cbc %s; kept the starting solution (%s)", size, ended, from))
		return startDev, startS, nil
	}
	return nil, nil, Infeasible(p, fmt.Sprintf("the MILP on %s: Cbc %s (limits %.3gs, %d nodes), and its memory model (%s) left no starting solution", size, ended, secs, prob.MaxNodes, ilpMemoryModel))
}

// ilpMemoryModel says what the MILP counts on a device, for messages.
const ilpMemoryModel = "each unit's parameters, weight gradients and optimizer state, and its forward outputs kept until the backward pass, within each device's memory less the largest op's scratch and gradients; copies received from other devices are not counted"

// errUnitsApart says units that must share a device (colocated ops the
// coarsening put in different units) allow no device in common.
var errUnitsApart = errors.New("colocated units allow no common device")

func newILPModel(p *Problem, gs *Groups) (*ilpModel, error) {
	lim, err := newLimits(p)
	if err != nil {
		return nil, err
	}
	g, nd, ng := p.Graph, p.Costs.NumDevices(), gs.Len()
	md := &ilpModel{p: p, gs: gs, gg: newGroupGraph(p, gs), nd: nd, t: make([][]float64, ng), mem: make([]float64, ng), allowed: make([][]int, ng)}
	var transient int64
	for i := range g.Ops {
		transient = max(transient, p.Costs.Transient(graph.OpID(i)))
	}
	md.capacity = make([]float64, nd)
	for d := range md.capacity {
		md.capacity[d] = float64(p.Costs.Cluster.Devices[d].Memory - transient)
	}
	classUnit := map[int32]int32{}
	for u, members := range gs.Members {
		md.t[u] = make([]float64, nd)
		md.allowed[u] = lim.devices(members[0])
		fp := p.Costs.Footprint(members)
		md.mem[u] = float64(fp.Resident + fp.Stash)
		for _, op := range members {
			md.allowed[u] = intersect(md.allowed[u], lim.devices(op))
			for d := 0; d < nd; d++ {
				md.t[u][d] += 1e6 * p.Costs.OpTime(op, d)
			}
			c := lim.class[op]
			if v, ok := classUnit[c]; !ok {
				classUnit[c] = int32(u)
			} else if v != int32(u) {
				md.coloc = append(md.coloc, [2]int32{v, int32(u)})
			}
		}
		for d := 0; d < nd; d++ {
			if !slices.Contains(md.allowed[u], d) {
				md.t[u][d] = math.Inf(1)
			}
		}
	}
	// Units never mix separate groups (Coarsen and group keep them
	// apart), so a unit's group is its first member's.
	for k := range lim.apart {
		grp := make([]int8, ng)
		for u, members := range gs.Members {
			grp[u] = lim.apart[k][lim.class[members[0]]]
		}
		md.apart = append(md.apart, grp)
	}
	// Colocated units share a device: each may use only the devices both
	// allow, to a fixpoint; none left means the units are wrong.
	for changed := true; changed; {
		changed = false
		for _, c := range md.coloc {
			both := intersect(md.allowed[c[0]], md.allowed[c[1]])
			if len(both) == 0 {
				return nil, errUnitsApart
			}
			for _, u := range c {
				if len(both) < len(md.allowed[u]) {
					md.allowed[u], changed = both, true
					for d := 0; d < nd; d++ {
						if !slices.Contains(both, d) {
							md.t[u][d] = math.Inf(1)
						}
					}
				}
			}
		}
	}
	// Reachability as bitsets, in reverse topological order.
	words := (ng + 63) / 64
	md.reach = make([][]uint64, ng)
	for i := ng - 1; i >= 0; i-- {
		u := md.gg.order[i]
		r := make([]uint64, words)
		for _, e := range md.gg.out[u] {
			v := md.gg.edges[e].to
			r[v/64] |= 1 << (v % 64)
			for w := range r {
				r[w] |= md.reach[v][w]
			}
		}
		md.reach[u] = r
	}
	return md, nil
}

// maxOrderRows bounds the MILP's ordering constraints (see Place).
const maxOrderRows = 1500

// orderRows counts the ordering constraints the MILP would have.
func (md *ilpModel) orderRows() int {
	n := 0
	for a := int32(0); a < int32(len(md.t)); a++ {
		for b := a + 1; b < int32(len(md.t)); b++ {
			if !md.reaches(a, b) && !md.reaches(b, a) {
				n += 2 * len(intersect(md.allowed[a], md.allowed[b]))
			}
		}
	}
	return n
}

func (md *ilpModel) reaches(a, b int32) bool { return md.reach[a][b/64]&(1<<(b%64)) != 0 }

// comm is the transfer time in microseconds between two devices.
func (md *ilpModel) comm(a, b int, bytes int64) float64 {
	return 1e6 * md.p.Costs.Transfer(a, b, bytes)
}

// start is a feasible solution of the MILP, the best of the given
// placement's units (each on the device where most of its work runs in
// it), every single device and an earliest-finish list schedule of the
// units, or nil; from says which.
func (md *ilpModel) start(given sim.Placement) (dev []int, s []float64, end float64, from string) {
	end = math.Inf(1)
	try := func(prefer []int, name string) {
		d, st, e := md.listSchedule(prefer)
		if d != nil && e < end {
			dev, s, end, from = d, st, e, name
		}
	}
	if given.Device != nil {
		try(md.units(given), "the given placement")
	}
	prefer := make([]int, md.gs.Len())
	for d := 0; d < md.nd; d++ {
		for u := range prefer {
			prefer[u] = d
		}
		try(prefer, "one device")
	}
	try(nil, "a list schedule")
	return dev, s, end, from
}

// units maps a placement of ops to one device per unit: the device where
// most of the unit's work runs (the lowest on a tie).
func (md *ilpModel) units(pl sim.Placement) []int {
	dev := make([]int, md.gs.Len())
	work := make([]float64, md.nd)
	for u, members := range md.gs.Members {
		clear(work)
		for _, op := range members {
			if d := pl.Device[op]; d >= 0 && d < md.nd {
				work[d] += md.p.Costs.FastestTime(op) + 1e-12 // ops of no work still vote
			}
		}
		dev[u] = 0
		for d := range work {
			if work[d] > work[dev[u]] {
				dev[u] = d
			}
		}
	}
	return dev
}

// listSchedule places the units in topological order, each on the device
// where it finishes first (or on prefer[u] when prefer is not nil and
// the unit may run and fits there), within the MILP's memory model; nil
// if some unit fits nowhere.
func (md *ilpModel) listSchedule(prefer []int) ([]int, []float64, float64) {
	ng := md.gs.Len()
	dev := make([]int, ng)
	s := make([]float64, ng)
	free := make([]float64, md.nd)
	load := make([]float64, md.nd)
	placed := make([]bool, ng)
	// Colocated units go where the first of them goes: it reserves their
	// memory there, or a device filled by forward units could take none
	// of their gradients.
	tied := graph.NewUnionFind[int32](ng)
	for _, c := range md.coloc {
		tied.Union(c[0], c[1])
	}
	tiedMem := make([]float64, ng)
	for u := range tiedMem {
		tiedMem[tied.Find(int32(u))] += md.mem[u]
	}
	reserved := make([]bool, ng)
	var makespan float64
	for _, u := range md.gg.order {
		r := tied.Find(u)
		need := 0.0
		if !reserved[r] {
			need = tiedMem[r]
		}
		best, bestEnd := -1, math.Inf(1)
		for _, d := range md.allowed[u] {
			if load[d]+need > md.capacity[d] || md.colocElsewhere(dev, s, u, d) || md.apartClash(dev, placed, u, d) {
				continue
			}
			st := free[d]
			for _, e := range md.gg.in[u] {
				ed := md.gg.edges[e]
				st = max(st, s[ed.from]+md.t[ed.from][dev[ed.from]]+md.comm(dev[ed.from], d, ed.bytes))
			}
			end := st + md.t[u][d]
			if prefer != nil && d == prefer[u] {
				best, bestEnd = d, end
				break
			}
			if end < bestEnd {
				best, bestEnd = d, end
			}
		}
		if best < 0 {
			return nil, nil, 0
		}
		dev[u] = best
		placed[u] = true
		reserved[r] = true
		s[u] = bestEnd - md.t[u][best]
		free[best] = bestEnd
		load[best] += need
		makespan = max(makespan, bestEnd)
	}
	for _, c := range md.coloc {
		if dev[c[0]] != dev[c[1]] {
			return nil, nil, 0
		}
	}
	return dev, s, makespan
}

// apartClash reports whether unit u on device d would share it with a
// placed unit of another group of a separate rule.
func (md *ilpModel) apartClash(dev []int, placed []bool, u int32, d int) bool {
	for _, grp := range md.apart {
		if grp[u] < 0 {
			continue
		}
		for v, x := range grp {
			if x >= 0 && x != grp[u] && placed[v] && dev[v] == d {
				return true
			}
		}
	}
	return false
}

// colocElsewhere reports whether unit u is colocated with an earlier
// unit placed on a device other than d. Units later in the order are not
// placed yet; their dev is meaningless and ignored.
func (md *ilpModel) colocElsewhere(dev []int, s []float64, u int32, d int) bool {
	for _, c := range md.coloc {
		var other int32 = -1
		switch u {
		case c[0]:
			other = c[1]
		case c[1]:
			other = c[0]
		}
		if other >= 0 && md.before(other, u) && dev[other] != d {
			return true
		}
	}
	return false
}

// before reports whether a precedes b in the topological order of units.
func (md *ilpModel) before(a, b int32) bool {
	return slices.Index(md.gg.order, a) < slices.Index(md.gg.order, b)
}

// ilpCols records where each variable lives.
type ilpCols struct {
	md   *ilpModel
	x    [][]int // x[u][d] column or -1
	s    []int
	c    int
	pair map[[2]int32]int
}

func (c *ilpCols) decode(x []float64) ([]int, []float64) {
	ng := len(c.s)
	dev := make([]int, ng)
	s := make([]float64, ng)
	for u := 0; u < ng; u++ {
		best := -1
		for d, j := range c.x[u] {
			if j >= 0 && (best < 0 || x[j] > x[c.x[u][best]]) {
				best = d
			}
		}
		dev[u] = best
		s[u] = x[c.s[u]]
	}
	return dev, s
}

// build writes the MILP in column form, with the start solution.
func (md *ilpModel) build(startDev []int, startS []float64, ub float64) (*cbc.Problem, *ilpCols) {
	ng, nd := md.gs.Len(), md.nd
	pr := &cbc.Problem{}
	cols := &ilpCols{md: md, x: make([][]int, ng), s: make([]int, ng), pair: map[[2]int32]int{}}
	var startX []float64
	addCol := func(lo, hi, obj float64, integer bool, start float64) int {
		j := len(pr.Cols)
		pr.Cols = append(pr.Cols, nil)
		pr.ColLower = append(pr.ColLower, lo)
		pr.ColUpper = append(pr.ColUpper, hi)
		pr.Obj = append(pr.Obj, obj)
		if integer {
			pr.Integer = append(pr.Integer, j)
		}
		startX = append(startX, start)
		return j
	}
	row := func(lo, hi float64, terms ...cbc.Entry) {
		r := len(pr.RowLower)
		pr.RowLower = append(pr.RowLower, lo)
		pr.RowUpper = append(pr.RowUpper, hi)
		for _, t := range terms {
			if t.Value != 0 {
				pr.Cols[t.Row] = append(pr.Cols[t.Row], cbc.Entry{Row: r, Value: t.Value})
			}
		}
	}
	// In row(), Entry.Row names a column; rows are numbered as added.
	term := func(col int, v float64) cbc.Entry { return cbc.Entry{Row: col, Value: v} }
	bigM := ub
	if math.IsInf(bigM, 1) {
		bigM = 0
		for u := 0; u < ng; u++ {
			bigM += slices.Max(finite(md.t[u]))
		}
		// Every edge may cross the slowest link, as the rules can force.
		var slowest [2]int
		for a := 0; a < nd; a++ {
			for b := 0; b < nd; b++ {
				if md.comm(a, b, 1<<20) > md.comm(slowest[0], slowest[1], 1<<20) {
					slowest = [2]int{a, b}
				}
			}
		}
		for _, e := range md.gg.edges {
			bigM += 2 * md.comm(slowest[0], slowest[1], e.bytes)
		}
	}
	has := startDev != nil
	for u := 0; u < ng; u++ {
		cols.x[u] = make([]int, nd)
		for d := 0; d < nd; d++ {
			cols.x[u][d] = -1
			if slices.Contains(md.allowed[u], d) {
				v := 0.0
				if has && startDev[u] == d {
					v = 1
				}
				cols.x[u][d] = addCol(0, 1, 0, true, v)
			}
		}
		v := 0.0
		if has {
			v = startS[u]
		}
		cols.s[u] = addCol(0, bigM, 0, false, v)
	}
	cmax := 0.0
	if has {
		cmax = ub
	}
	cols.c = addCol(0, bigM, 1, false, cmax)
	// p_g(x) terms, scaled.
	ptime := func(u int32, sign float64) []cbc.Entry {
		var ts []cbc.Entry
		for d, j := range cols.x[u] {
			if j >= 0 {
				ts = append(ts, term(j, sign*md.t[u][d]))
			}
		}
		return ts
	}
	for u := 0; u < ng; u++ {
		var ts []cbc.Entry
		for _, j := range cols.x[u] {
			if j >= 0 {
				ts = append(ts, term(j, 1))
			}
		}
		row(1, 1, ts...)
		if len(md.gg.out[u]) == 0 {
			row(0, cbc.Inf, append([]cbc.Entry{term(cols.c, 1), term(cols.s[u], -1)}, ptime(int32(u), -1)...)...)
		}
	}
	for _, e := range md.gg.edges {
		g, h := e.from, e.to
		base := append([]cbc.Entry{term(cols.s[h], 1), term(cols.s[g], -1)}, ptime(g, -1)...)
		row(0, cbc.Inf, base...)
		if e.bytes == 0 {
			continue
		}
		for _, d := range md.allowed[g] {
			for _, d2 := range md.allowed[h] {
				if d == d2 {
					continue
				}
				c := md.comm(d, d2, e.bytes)
				row(-c, cbc.Inf, append(slices.Clone(base), term(cols.x[g][d], -c), term(cols.x[h][d2], -c))...)
			}
		}
	}
	// Units with no path between them must not overlap on one device. The
	// start orders them as the list schedule did: by topological order.
	rank := make([]int, ng)
	for i, u := range md.gg.order {
		rank[u] = i
	}
	for a := int32(0); a < int32(ng); a++ {
		for b := a + 1; b < int32(ng); b++ {
			if md.reaches(a, b) || md.reaches(b, a) {
				continue
			}
			common := intersect(md.allowed[a], md.allowed[b])
			if len(common) == 0 {
				continue
			}
			v := 0.0
			if has && rank[a] < rank[b] {
				v = 1
			}
			o := addCol(0, 1, 0, true, v)
			cols.pair[[2]int32{a, b}] = o
			for _, d := range common {
				// a before b: s_b - s_a - p_a - M o - M x_ad - M x_bd >= -3M
				row(-3*bigM, cbc.Inf, append([]cbc.Entry{term(cols.s[b], 1), term(cols.s[a], -1), term(o, -bigM),
					term(cols.x[a][d], -bigM), term(cols.x[b][d], -bigM)}, ptime(a, -1)...)...)
				// b before a: s_a - s_b - p_b + M o - M x_ad - M x_bd >= -2M
				row(-2*bigM, cbc.Inf, append([]cbc.Entry{term(cols.s[a], 1), term(cols.s[b], -1), term(o, bigM),
					term(cols.x[a][d], -bigM), term(cols.x[b][d], -bigM)}, ptime(b, -1)...)...)
			}
		}
	}
	// A device's load is at most the makespan: redundant for integer
	// solutions, but it lifts the relaxation's bound far above what the
	// big-M ordering rows give.
	for d := 0; d < nd; d++ {
		ts := []cbc.Entry{term(cols.c, 1)}
		for u := 0; u < ng; u++ {
			if j := cols.x[u][d]; j >= 0 {
				ts = append(ts, term(j, -md.t[u][d]))
			}
		}
		row(0, cbc.Inf, ts...)
	}
	for d := 0; d < nd; d++ {
		// Scaled by the capacity (bytes are ~1e10); a device with none
		// left takes only units of no memory.
		capacity, upper := md.capacity[d], 1.0
		if capacity <= 0 {
			capacity, upper = 1<<30, 0
		}
		var ts []cbc.Entry
		for u := 0; u < ng; u++ {
			if j := cols.x[u][d]; j >= 0 {
				ts = append(ts, term(j, md.mem[u]/capacity))
			}
		}
		row(-cbc.Inf, upper, ts...)
	}
	// Units of different groups of a separate rule never share a device.
	for _, grp := range md.apart {
		for a := 0; a < ng; a++ {
			for b := a + 1; b < ng; b++ {
				if grp[a] < 0 || grp[b] < 0 || grp[a] == grp[b] {
					continue
				}
				for d := 0; d < nd; d++ {
					if x, y := cols.x[a][d], cols.x[b][d]; x >= 0 && y >= 0 {
						row(-cbc.Inf, 1, term(x, 1), term(y, 1))
					}
				}
			}
		}
	}
	for _, c := range md.coloc {
		for d := 0; d < nd; d++ {
			a, b := cols.x[c[0]][d], cols.x[c[1]][d]
			switch {
			case a >= 0 && b >= 0:
				row(0, 0, term(a, 1), term(b, -1))
			case a >= 0:
				row(0, 0, term(a, 1))
			case b >= 0:
				row(0, 0, term(b, 1))
			}
		}
	}
	// Interchangeable devices are used in order of first use along the
	// units' topological order: device c_j of a class runs a unit only
	// if c_{j-1} runs one earlier. Every solution has a relabelling that
	// obeys this (canonical computes it, and the start is given so), so
	// no makespan is lost, and Cbc no longer searches the class's |C|!
	// copies of each placement.
	for _, class := range md.interchangeable() {
		for j := 1; j < len(class); j++ {
			for r, u := range md.gg.order {
				xj := cols.x[u][class[j]]
				if xj < 0 {
					continue
				}
				ts := []cbc.Entry{term(xj, 1)}
				for _, v := range md.gg.order[:r] {
					if xp := cols.x[v][class[j-1]]; xp >= 0 {
						ts = append(ts, term(xp, -1))
					}
				}
				row(-cbc.Inf, 0, ts...)
			}
		}
	}
	if has {
		pr.Start = startX
	}
	return pr, cols
}

func finite(v []float64) []float64 {
	var out []float64
	for _, x := range v {
		if !math.IsInf(x, 0) {
			out = append(out, x)
		}
	}
	if out == nil {
		out = []float64{0}
	}
	return out
}

// placement expands unit devices to ops and orders each device's ops by
// their unit's start, then topological position.
func (md *ilpModel) placement(dev []int, start []float64) sim.Placement {
	p := md.p
	n := len(p.Graph.Ops)
	pl := sim.Placement{Device: make([]int, n), Priority: make([]int32, n)}
	for i := range pl.Device {
		pl.Device[i] = dev[md.gs.Of[i]]
	}
	byStart := slices.Clone(p.Order)
	sort.SliceStable(byStart, func(a, b int) bool {
		return start[md.gs.Of[byStart[a]]] < start[md.gs.Of[byStart[b]]]
	})
	for i, op := range byStart {
		pl.Priority[op] = int32(i)
	}
	return pl
}

// canonical renames interchangeable devices (see interchangeable) in
// order of first use along the units' topological order, so that among
// the solver's symmetric optima the answer is always the same one.
func (md *ilpModel) canonical(dev []int) []int {
	nd := md.nd
	rename := make([]int, nd)
	for d := range rename {
		rename[d] = -1
	}
	taken := make([]bool, nd)
	classOf := make([]int, nd)
	classes := md.interchangeable()
	for k, c := range classes {
		for _, d := range c {
			classOf[d] = k
		}
	}
	for _, u := range md.gg.order {
		d := dev[u]
		if rename[d] >= 0 {
			continue
		}
		for _, k := range classes[classOf[d]] {
			if !taken[k] {
				rename[d], taken[k] = k, true
				break
			}
		}
	}
	// Devices never used keep the names left over in their class.
	for d := 0; d < nd; d++ {
		if rename[d] < 0 {
			for _, k := range classes[classOf[d]] {
				if !taken[k] {
					rename[d], taken[k] = k, true
					break
				}
			}
		}
	}
	out := make([]int, len(dev))
	for u, d := range dev {
		out[u] = rename[d]
	}
	return out
}

// interchangeable partitions the devices into classes whose members the
// MILP cannot tell apart (see interchangeableDevices).
func (md *ilpModel) interchangeable() [][]int {
	return interchangeableDevices(md.p.Costs, md.capacity, md.allowed)
}

// interchangeableDevices partitions the devices into classes whose
// members a placement search cannot tell apart: one type, one capacity,
// the same links to each other and to every other device, and every unit
// (allowed lists each unit's devices) allowed on all or none of them. Any
// permutation within a class maps placements to placements of equal
// step. Classes are in order of their first device, each ascending.
func interchangeableDevices(c *cost.Table, capacity []float64, allowed [][]int) [][]int {
	nd := c.NumDevices()
	same := func(a, b int) bool {
		if !c.SameType(a, b) || capacity[a] != capacity[b] {
			return false
		}
		const probe = 1 << 20
		if c.Transfer(a, b, probe) != c.Transfer(b, a, probe) {
			return false
		}
		for k := 0; k < nd; k++ {
			if k != a && k != b && (c.Transfer(a, k, probe) != c.Transfer(b, k, probe) || c.Transfer(k, a, probe) != c.Transfer(k, b, probe)) {
				return false
			}
		}
		for u := range allowed {
			if slices.Contains(allowed[u], a) != slices.Contains(allowed[u], b) {
				return false
			}
		}
		return true
	}
	var classes [][]int
	placed := make([]bool, nd)
	for a := 0; a < nd; a++ {
		if placed[a] {
			continue
		}
		class := []int{a}
		for b := a + 1; b < nd; b++ {
			if !placed[b] && same(a, b) {
				class = append(class, b)
				placed[b] = true
			}
		}
		classes = append(classes, class)
	}
	return classes
}

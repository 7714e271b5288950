package pipeline

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/plan"
)

// FusionNone leaves the graph as imported.
const FusionNone = "none"

// FusionAuto is FusionHybrid, except for a model file that carries its
// own measured op times (a costed graph) and no cost model overrides
// them: those times describe the ops as the runtime ran them, already
// fused or not, so re-pricing fused groups would count fusion twice.
const FusionAuto = "auto"

// FusionHybrid runs vertical then horizontal fusion.
const FusionHybrid = "hybrid"

// FusionReport is what the fuse stage did.
type FusionReport struct {
	Mode string
	// OpsBefore and OpsAfter count the ops placement saw without and with
	// fusion.
	OpsBefore, OpsAfter int
	// Passes says how many merges each pass made.
	Passes []graph.PassResult
	// Coarse is the fused graph and its map to the original ops; nil for
	// FusionNone.
	Coarse *graph.Coarse
}

// fusedState carries the fusion from the fuse stage to assemble, which
// expands the plan back to the original ops.
type fusedState struct {
	coarse *graph.Coarse
	// fine prices the original ops.
	fine cost.Model
}

// fuseGraph runs the fusion mode of Options.Fusion and replaces the graph
// that costing and placement see by the fused one, whose ops are the fused
// groups. The cost model is wrapped so a fused op is priced from its
// members (see fusedCosts), and assemble lists every original op again.
func fuseGraph(_ context.Context, r *run) error {
	rt, err := runtimeOf(r.opts)
	if err != nil {
		return err
	}
	mode := rt.Fusion
	switch {
	case (mode == FusionAuto || mode == "") && r.model.Costs != nil && r.opts.CostModel == nil:
		mode = FusionNone
	case mode == FusionAuto || mode == "":
		mode = FusionHybrid
	}
	g := r.model.Graph
	rep := r.opts.FusionReport
	if rep != nil {
		*rep = FusionReport{Mode: mode, OpsBefore: len(g.Ops), OpsAfter: len(g.Ops)}
	}
	if mode == FusionNone {
		return nil
	}
	// The fine model's checks run on the graph the user wrote, so a bad
	// input reads the same with or without fusion.
	fine := r.costModel()
	if err := checkCluster(fine, g, r.cluster); err != nil {
		return err
	}
	sets := deviceSets(g, r.cluster, fine)
	if r.given != nil {
		// Fusion never merges ops the given placement puts apart.
		sets = r.given.devicesOf(g, r.cluster, fine)
	}
	if r.rules != nil {
		// Nor ops the user's rules bind differently.
		var fixed []int
		if r.given != nil {
			fixed = r.given.device
		}
		sets = r.rules.fusionSets(g, r.cluster, fine, fixed)
	}
	fu, err := graph.FuseOn(g, g.BuildAdjacency(), mode, sets)
	if err != nil {
		return &InputError{fmt.Errorf("%s: %w", r.opts.ModelPath, err)}
	}
	c, err := graph.Coarsen(g, fu.Groups)
	if err != nil {
		return fmt.Errorf("%s: fusion %s: %w", r.opts.ModelPath, mode, err)
	}
	r.opts.CostModel = FusedCosts(c, r.costModel())
	m := *r.model
	m.Graph = c.Graph
	r.model = &m
	r.fused = &fusedState{coarse: c, fine: fine}
	if rep != nil {
		rep.OpsAfter, rep.Passes, rep.Coarse = len(c.Graph.Ops), fu.Passes, c
	}
	return nil
}

// deviceSets is which device types of c run each op under model, for
// fusion to keep ops that share none apart; nil when every op runs
// everywhere, as under the roofline.
func deviceSets(g *graph.Graph, c *cluster.Cluster, model cost.Model) *graph.DeviceSets {
	if _, ok := model.(cost.Roofline); ok {
		return nil
	}
	var types []*cluster.DeviceType
	for i := range c.Devices {
		if !slices.Contains(types, c.Devices[i].Type) {
			types = append(types, c.Devices[i].Type)
		}
	}
	words := (len(types) + 63) / 64
	sets := &graph.DeviceSets{Words: words, Bits: make([]uint64, len(g.Ops)*words)}
	restricted := false
	for op := range g.Ops {
		for k, dt := range types {
			if math.IsInf(model.OpTime(g, graph.OpID(op), dt), 1) {
				restricted = true
				continue
			}
			sets.Bits[op*words+k/64] |= 1 << (k % 64)
		}
	}
	if !restricted {
		return nil
	}
	return sets
}

// FusedCosts prices the ops of a fused graph from a model of the original
// graph. A group of one op costs what fine says. A group of several costs
// the sum of its members' times scaled by what fusing saves under the
// roofline: sum × roofline(group) / Σ roofline(member). The roofline of a
// group charges its summed FLOPs, only the bytes that cross its boundary
// and one launch, so with fine = the roofline the group costs exactly
// roofline(group); with measured member times the measured total shrinks
// by the predicted share of saved traffic and launches.
func FusedCosts(c *graph.Coarse, fine cost.Model) cost.Model {
	roof, _ := fine.(cost.Roofline) // the fine roofline's settings (tf32), else the default
	return fusedCosts{c: c, fine: fine, roof: roof}
}

type fusedCosts struct {
	c    *graph.Coarse
	fine cost.Model
	roof cost.Roofline
}

// TransferTime passes on the fine model's measured transfers: fusion
// keeps every tensor under its ID.
func (m fusedCosts) TransferTime(g *graph.Graph, t graph.TensorID, from, to *cluster.Device, def float64) float64 {
	tm, ok := m.fine.(cost.TransferModel)
	if !ok {
		return def
	}
	if g == m.c.Graph {
		g = m.c.Fine
	}
	return tm.TransferTime(g, t, from, to, def)
}

// Advice passes on the fine model's advice about the original graph.
func (m fusedCosts) Advice(g *graph.Graph, c *cluster.Cluster, batch int64) []string {
	a, ok := m.fine.(cost.Advisor)
	if !ok {
		return nil
	}
	if g == m.c.Graph {
		g = m.c.Fine
	}
	return a.Advice(g, c, batch)
}

// CheckCluster runs the fine model's check on the original graph, so its
// message names the op as the model file does.
func (m fusedCosts) CheckCluster(g *graph.Graph, c *cluster.Cluster) error {
	if g == m.c.Graph {
		g = m.c.Fine
	}
	return checkCluster(m.fine, g, c)
}

// Shape implements cost.Shaper when the fine model does: a fused
// kernel's shape is the roofline's of the kernel, as its time is when the
// fine model is the roofline; an op fusion left alone keeps the fine
// model's.
func (m fusedCosts) Shape(g *graph.Graph, op graph.OpID, dt *cluster.DeviceType) cost.Shape {
	sh, ok := m.fine.(cost.Shaper)
	switch {
	case !ok:
		return cost.Shape{}
	case g != m.c.Graph:
		return sh.Shape(g, op, dt)
	case len(m.c.Members[op]) == 1:
		return sh.Shape(m.c.Fine, m.c.Members[op][0], dt)
	}
	return m.roof.Shape(g, op, dt)
}

func (m fusedCosts) OpTime(g *graph.Graph, op graph.OpID, dt *cluster.DeviceType) float64 {
	if g != m.c.Graph {
		return m.fine.OpTime(g, op, dt)
	}
	members := m.c.Members[op]
	if len(members) == 1 {
		return m.fine.OpTime(m.c.Fine, members[0], dt)
	}
	var sum, roofSum float64
	for _, f := range members {
		sum += m.fine.OpTime(m.c.Fine, f, dt)
		roofSum += m.roof.OpTime(m.c.Fine, f, dt)
	}
	fused := m.roof.OpTime(g, op, dt)
	// A group whose members compute at different peaks (a half-precision
	// matmul fused with a float32 cast under amp) charges each member's
	// FLOPs at its own peak, not all at the first input's type's.
	peak := m.roof.Peak(g, op, dt)
	if slices.ContainsFunc(members, func(f graph.OpID) bool {
		return m.c.Fine.Ops[f].Work.FLOPs > 0 && m.roof.Peak(m.c.Fine, f, dt) != peak
	}) && fused > 0 {
		var compute float64
		for _, f := range members {
			compute += m.roof.ComputeTime(m.c.Fine, f, dt)
		}
		fused = max(compute, m.roof.MemoryTime(g, op, dt)) + dt.LaunchOverhead
	}
	switch {
	case math.IsInf(sum, 1):
		return sum
	case sum == roofSum || roofSum <= 0:
		// The fine model is the roofline (or prices every member at zero).
		if sum == roofSum {
			return fused
		}
		return sum
	}
	return sum * fused / roofSum
}

// expandFusion turns the plan of a fused graph back into one listing every
// original op: a fused group's ops run on the group's device, each spanning
// the group's kernel, listed in the original graph's topological order
// within the group. The result's graph and simulation are the original
// graph's too; transfers name the same tensors in both.
func expandFusion(r *run) error {
	fs := r.fused
	if fs == nil || r.plan == nil {
		return nil
	}
	c := fs.coarse
	fine := c.Fine
	adj := fine.BuildAdjacency()
	order, err := fine.TopoOrder(adj)
	if err != nil {
		return err
	}
	pos := make([]int, len(fine.Ops))
	for i, op := range order {
		pos[op] = i
	}
	byName := make(map[string]int, len(r.plan.Ops))
	for i, op := range r.plan.Ops {
		byName[op.Name] = i
	}
	ops := make([]plan.Op, 0, len(fine.Ops))
	perDevice := map[string]int{}
	for _, coarseID := range r.problem.Order {
		k, ok := byName[c.Graph.Ops[coarseID].Name]
		if !ok {
			return fmt.Errorf("plan lacks fused op %q", c.Graph.Ops[coarseID].Name)
		}
		po := r.plan.Ops[k]
		members := slices.Clone(c.Members[coarseID])
		slices.SortFunc(members, func(a, b graph.OpID) int { return pos[a] - pos[b] })
		for _, f := range members {
			op := po
			op.Name, op.Type, op.Phase = fine.Ops[f].Name, fine.Ops[f].Type, fine.Ops[f].Phase.String()
			ops = append(ops, op)
			perDevice[op.Device]++
		}
	}
	r.plan.Ops = ops
	for i := range r.plan.Devices {
		r.plan.Devices[i].Ops = perDevice[r.plan.Devices[i].Name]
	}
	if r.sim != nil {
		s := *r.sim
		s.Start, s.End = graph.Expand(c, r.sim.Start), graph.Expand(c, r.sim.End)
		r.sim = &s
	}
	if r.placed != nil {
		pl := *r.placed
		if pl.Split != nil && r.outcomes[r.chosen].Tensor != nil {
			pl.Split = r.outcomes[r.chosen].Tensor.Split
		}
		pl.Device = graph.Expand(c, pl.Device)
		if pl.Priority != nil {
			pl.Priority = graph.Expand(c, pl.Priority)
		}
		if pl.OpStage != nil {
			pl.OpStage = graph.Expand(c, pl.OpStage)
		}
		r.placed = &pl
	}
	m := *r.model
	m.Graph = fine
	r.model = &m
	return nil
}

// Groups lists the fused groups the plan was made on, each its fused op's
// name followed by its members' op names; nil without fusion.
func (r *FusionReport) Groups() [][]string {
	if r == nil || r.Coarse == nil {
		return nil
	}
	var groups [][]string
	for k, members := range r.Coarse.Members {
		if len(members) < 2 {
			continue
		}
		names := []string{r.Coarse.Graph.Ops[k].Name}
		for _, m := range members {
			names = append(names, r.Coarse.Fine.Ops[m].Name)
		}
		groups = append(groups, names)
	}
	return groups
}

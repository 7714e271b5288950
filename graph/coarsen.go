package graph

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// FusedType is the Type of a coarse op that fuses two or more kernels.
const FusedType = "Fused"

// Coarse is a graph whose ops are the groups of a Grouping over a finer
// graph, with the maps between the two.
//
// The coarse graph has the fine graph's tensors, with the same IDs,
// names and shapes, so a transfer or a tensor found in one names the same
// value in the other. A tensor read only inside its producer's group (an
// intermediate a fused kernel keeps in registers) stays in the list but
// belongs to no coarse op: it moves no bytes and takes no memory.
type Coarse struct {
	Graph *Graph
	Fine  *Graph
	// GroupOf maps each fine op to its coarse op.
	GroupOf []OpID
	// Members lists each coarse op's fine ops, ascending.
	Members [][]OpID
}

// Coarsen builds the graph whose ops are gr's groups, in the order of
// their smallest members. A coarse op of one fine op is a copy of it
// (name, type, attributes). A coarse op of several reads every tensor its
// members read from outside the group (once), writes every tensor read
// outside the group or a graph output, and has
//
//   - Work.FLOPs and MACs summed (every member's arithmetic still runs),
//   - Work.TempBytes the largest member's (members run one after another
//     inside the kernel, reusing scratch),
//   - the members' common Colocate key and Device pin,
//   - Type FusedType, or the type of its only kernel-launching member when
//     the others are view ops (Reshape, Constant, ...), so a cost model
//     prices it like that kernel,
//   - a name joining its members' names with "+" (the first three and a
//     count past that), made unique.
//
// Persistent memory is the parameters the coarse op reads, so it sums
// over members; bytes moved are the external inputs and outputs only, so
// intermediates drop out of a roofline's memory term. Coarsen fails when
// the grouping's quotient graph has a cycle or a group mixes
// Colocate keys or Device pins.
func Coarsen(g *Graph, gr *Grouping) (*Coarse, error) {
	groups := gr.Groups()
	n := len(g.Ops)
	groupOf := make([]OpID, n)
	for k, members := range groups {
		for _, m := range members {
			groupOf[m] = OpID(k)
		}
	}
	cg := New(g.Name, len(groups), len(g.Tensors))
	for i := range g.Tensors {
		t := g.Tensors[i]
		t.Shape = slices.Clone(t.Shape)
		if _, err := cg.AddTensor(t); err != nil {
			return nil, err
		}
	}
	cg.Inputs = slices.Clone(g.Inputs)
	cg.Outputs = slices.Clone(g.Outputs)
	isOutput := make([]bool, len(g.Tensors))
	for _, t := range g.Outputs {
		isOutput[t] = true
	}
	// Control dependencies are set after every op is in: a group's
	// dependency may be a group with a larger ID.
	deps := make([][]OpID, len(groups))
	for k, members := range groups {
		first := &g.Ops[members[0]]
		for _, m := range members {
			deps[k] = append(deps[k], g.Ops[m].ControlDeps...)
		}
		deps[k] = remapDeps(deps[k], groupOf, OpID(k))
		if len(members) == 1 {
			op := *first
			op.Inputs = slices.Clone(op.Inputs)
			op.Outputs = slices.Clone(op.Outputs)
			op.ControlDeps = nil
			if _, err := cg.AddOp(op); err != nil {
				return nil, err
			}
			continue
		}
		op := Op{Name: fusedName(g, cg, members), Type: FusedType, Colocate: first.Colocate, Device: first.Device, Phase: first.Phase}
		var launching []OpID
		seenIn := map[TensorID]bool{}
		for _, m := range members {
			mo := &g.Ops[m]
			if mo.Colocate != first.Colocate || mo.Device != first.Device {
				return nil, fmt.Errorf("fused group %q joins ops with different colocation or device constraints (%q and %q)", op.Name, first.Name, mo.Name)
			}
			if !IsViewOp(mo.Type) {
				launching = append(launching, m)
			}
			op.Work.FLOPs = addWork(op.Work.FLOPs, mo.Work.FLOPs)
			op.Work.MACs = addWork(op.Work.MACs, mo.Work.MACs)
			op.Work.TempBytes = max(op.Work.TempBytes, mo.Work.TempBytes)
			op.Work.Estimated = op.Work.Estimated || mo.Work.Estimated
			for _, t := range mo.Inputs {
				if p := g.Tensors[t].Producer; (p == NoOp || groupOf[p] != OpID(k)) && !seenIn[t] {
					seenIn[t] = true
					op.Inputs = append(op.Inputs, t)
				}
			}
			for _, t := range mo.Outputs {
				external := isOutput[t]
				for _, c := range g.Tensors[t].Consumers {
					external = external || groupOf[c] != OpID(k)
				}
				if external {
					op.Outputs = append(op.Outputs, t)
				}
			}
		}
		switch len(launching) {
		case 0:
			op.Type = first.Type
		case 1:
			op.Type, op.Domain, op.Attrs = g.Ops[launching[0]].Type, g.Ops[launching[0]].Domain, g.Ops[launching[0]].Attrs
		}
		if _, err := cg.AddOp(op); err != nil {
			return nil, err
		}
	}
	for k := range cg.Ops {
		cg.Ops[k].ControlDeps = deps[k]
	}
	// Intermediates were neither inputs nor outputs of a coarse op, so
	// they have no producer and no consumers there.
	adj := cg.BuildAdjacency()
	if _, err := cg.TopoOrder(adj); err != nil {
		return nil, fmt.Errorf("fusion made a cycle: %w", err)
	}
	return &Coarse{Graph: cg, Fine: g, GroupOf: groupOf, Members: groups}, nil
}

// remapDeps maps control dependencies to coarse ops, dropping ones inside
// the group and duplicates.
func remapDeps(deps []OpID, groupOf []OpID, self OpID) []OpID {
	var out []OpID
	for _, d := range deps {
		if c := groupOf[d]; c != self && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// fusedName names a group after its members, unique in both graphs.
func fusedName(g, cg *Graph, members []OpID) string {
	var names []string
	for i, m := range members {
		if i == 3 {
			names = append(names, fmt.Sprintf("(%d ops)", len(members)))
			break
		}
		names = append(names, g.Ops[m].Name)
	}
	name := strings.Join(names, "+")
	base := name
	for i := 2; ; i++ {
		_, fine := g.OpByName(name)
		_, coarse := cg.OpByName(name)
		if !fine && !coarse {
			return name
		}
		name = fmt.Sprintf("%s#%d", base, i)
	}
}

// Expand maps a per-coarse-op slice to the fine ops: each fine op gets
// its group's value.
func Expand[T any](c *Coarse, coarse []T) []T {
	out := make([]T, len(c.GroupOf))
	for i, k := range c.GroupOf {
		out[i] = coarse[k]
	}
	return out
}

// addWork adds two non-negative work counts, saturating at MaxInt64: a
// fused group is one kernel's work, far below it, but its members are
// each bounded only at 2^62 (train), so their sum must not wrap.
func addWork(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

package view

import (
	"fmt"

	"github.com/opplace/opplace/graph"
)

// writeOps draws every kept op inside its device's cluster, fused groups
// as dashed clusters within it, edges that cross devices labelled with
// the bytes, and the critical path in red.
func writeOps(d *dot, l *layout, o Options) error {
	var kept []int
	keep := make([]bool, len(l.p.Ops))
	for i := range l.p.Ops {
		if l.keep(i, o) {
			kept = append(kept, i)
			keep[i] = true
		}
	}
	if len(kept) > MaxOpViewOps {
		return &TooLargeError{Ops: len(kept), Limit: MaxOpViewOps}
	}
	cp := newTimeline(l).criticalPath()
	groupOf := map[string]int{}
	for k, grp := range o.Groups {
		for _, m := range grp[1:] {
			groupOf[m] = k
		}
	}
	byDev := make([][]int, len(l.p.Devices))
	for _, i := range kept {
		byDev[l.opDev[i]] = append(byDev[l.opDev[i]], i)
	}
	drawOp := func(i int) {
		op := &l.p.Ops[i]
		attrs := []attr{{"label", fmt.Sprintf("%s\n%s, %s", op.Name, op.Type, formatMS(busyMS(op)))}, {"fillcolor", color(l.opDev[i])}}
		if cp.ops[i] {
			attrs = append(attrs, attr{"color", criticalColor}, attr{"penwidth", "2.5"})
		}
		d.node(op.Name, attrs...)
	}
	drawDevice := func(dev int) {
		if len(byDev[dev]) == 0 {
			return
		}
		d.open(fmt.Sprintf("dev%d", dev), attr{"label", deviceLabel(l.p, dev)}, attr{"style", "rounded"}, attr{"color", "#666666"})
		// A fused group never spans devices, so it nests in one.
		inGroup := map[int][]int{}
		var groups []int
		for _, i := range byDev[dev] {
			k, ok := groupOf[l.p.Ops[i].Name]
			if !ok {
				drawOp(i)
				continue
			}
			if _, seen := inGroup[k]; !seen {
				groups = append(groups, k)
			}
			inGroup[k] = append(inGroup[k], i)
		}
		for _, k := range groups {
			d.open(fmt.Sprintf("fused_%d", k), attr{"label", "fused: " + o.Groups[k][0]}, attr{"style", "dashed"}, attr{"color", "#555555"})
			for _, i := range inGroup[k] {
				drawOp(i)
			}
			d.close()
		}
		d.close()
	}
	drawStages(d, l, drawDevice)
	g := l.g
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.Producer == graph.NoOp {
			continue
		}
		p, ok := l.opIndex[g.Ops[t.Producer].Name]
		if !ok || !keep[p] {
			continue
		}
		seen := map[graph.OpID]bool{}
		for _, c := range t.Consumers {
			ci, ok := l.opIndex[g.Ops[c].Name]
			if seen[c] || !ok || !keep[ci] {
				continue
			}
			seen[c] = true
			var attrs []attr
			if l.opDev[p] != l.opDev[ci] {
				attrs = append(attrs, attr{"label", formatBytes(t.Bytes())}, attr{"color", transferColor}, attr{"fontcolor", transferColor}, attr{"penwidth", "1.5"})
			}
			if cp.edges[[2]int{p, ci}] {
				attrs = append(attrs, attr{"color", criticalColor}, attr{"penwidth", "2.5"})
			}
			d.edge(l.p.Ops[p].Name, l.p.Ops[ci].Name, attrs...)
		}
	}
	for id := range g.Ops {
		ci, ok := l.opIndex[g.Ops[id].Name]
		if !ok || !keep[ci] {
			continue
		}
		for _, dep := range g.Ops[id].ControlDeps {
			if p, ok := l.opIndex[g.Ops[dep].Name]; ok && keep[p] {
				d.edge(l.p.Ops[p].Name, l.p.Ops[ci].Name, attr{"style", "dashed"})
			}
		}
	}
	return nil
}

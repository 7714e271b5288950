package plan

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
)

// palette colours devices; it repeats past twelve devices.
var palette = []string{
	"#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
	"#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f",
}

// largeGraphOps is the size past which the DOT asks for a cheaper layout.
const largeGraphOps = 400

// WriteDOT draws the placed graph for Graphviz: one cluster per device
// with its ops filled in the device's colour, data edges between ops, and
// edges that cross devices drawn bold and labelled with the bytes sent.
func WriteDOT(w io.Writer, p *Plan, g *graph.Graph) error {
	devOf := make(map[string]string, len(p.Ops))
	for _, op := range p.Ops {
		devOf[op.Name] = op.Device
	}
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %s {\n", strconv.Quote(g.Name))
	// newrank avoids Graphviz's "trouble in init_rank" on edges between
	// clusters; past a few hundred ops, straight edges and bounded
	// network-simplex passes keep dot's layout to seconds, not minutes.
	b.WriteString("  graph [rankdir=TB, fontname=\"Helvetica\", newrank=true")
	if len(p.Ops) > largeGraphOps {
		b.WriteString(", splines=line, nslimit=2, mclimit=0.3")
	}
	b.WriteString("];\n")
	b.WriteString("  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n")
	b.WriteString("  edge [color=\"#777777\", arrowsize=0.6];\n")
	fmt.Fprintf(&b, "  label=%s;\n  labelloc=t;\n", strconv.Quote(fmt.Sprintf("%s on %s: %s, predicted %.3f ms (bound %.3f ms)",
		p.Model, p.Cluster, p.Strategy, p.PredictedStepMS, p.LowerBoundMS)))

	byDevice := make(map[string][]Op, len(p.Devices))
	for _, op := range p.Ops {
		byDevice[op.Device] = append(byDevice[op.Device], op)
	}
	// Stages label their first device's cluster when the plan has several
	// or replicates one; a placement's single stage is its devices.
	stageOf := map[string]*Stage{}
	for i := range p.Stages {
		if len(p.Stages) > 1 || p.Stages[i].Replicas > 1 {
			stageOf[p.Stages[i].Devices[0]] = &p.Stages[i]
		}
	}
	for i, d := range p.Devices {
		color := palette[i%len(palette)]
		label := fmt.Sprintf("%s (%s): %d ops, busy %.3f ms", d.Name, d.Type, d.Ops, d.BusyMS)
		if st := stageOf[d.Name]; st != nil {
			label = fmt.Sprintf("stage %d on %s (%s): %d ops, %.3f ms per micro-batch", st.Index, strings.Join(st.Devices, ", "), d.Type, d.Ops, st.TimeMS)
		}
		fmt.Fprintf(&b, "  subgraph %s {\n", strconv.Quote(fmt.Sprintf("cluster_%d", i)))
		fmt.Fprintf(&b, "    label=%s;\n    style=rounded;\n    color=%s;\n", strconv.Quote(label), strconv.Quote(color))
		for _, op := range byDevice[d.Name] {
			fmt.Fprintf(&b, "    %s [label=%s, fillcolor=%s];\n", strconv.Quote(op.Name),
				strconv.Quote(op.Name+"\n"+op.Type), strconv.Quote(color))
		}
		b.WriteString("  }\n")
	}
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.Producer == graph.NoOp {
			continue
		}
		from := g.Ops[t.Producer].Name
		seen := map[graph.OpID]bool{}
		for _, c := range t.Consumers {
			if seen[c] {
				continue
			}
			seen[c] = true
			to := g.Ops[c].Name
			if devOf[from] != devOf[to] {
				fmt.Fprintf(&b, "  %s -> %s [label=%s, color=\"#d62728\", penwidth=2, fontsize=9];\n",
					strconv.Quote(from), strconv.Quote(to), strconv.Quote(cluster.FormatBytes(t.Bytes())))
			} else {
				fmt.Fprintf(&b, "  %s -> %s;\n", strconv.Quote(from), strconv.Quote(to))
			}
		}
	}
	for i := range g.Ops {
		for _, d := range g.Ops[i].ControlDeps {
			fmt.Fprintf(&b, "  %s -> %s [style=dashed];\n", strconv.Quote(g.Ops[d].Name), strconv.Quote(g.Ops[i].Name))
		}
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

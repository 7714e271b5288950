package view

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/printable"
	"github.com/opplace/opplace/plan"
)

// Colours shared by the views.
const (
	criticalColor = "#d62728" // the critical path
	transferColor = "#1f77b4" // data crossing devices
	edgeColor     = "#999999"
	idleColor     = "#eeeeee"
)

// WriteDOT draws plan p (made for graph g) at the options' level for
// Graphviz. The device and stage views need only the plan; g may then be
// nil.
func WriteDOT(w io.Writer, p *plan.Plan, g *graph.Graph, o Options) error {
	l, err := newLayout(p, g)
	if err != nil {
		return err
	}
	if o.MaxBlocks <= 0 {
		o.MaxBlocks = DefaultMaxBlocks
	}
	if (o.Detail == Modules || o.Detail == Ops) && g == nil {
		return fmt.Errorf("the %s view needs the graph the plan was made for", o.Detail)
	}
	if o.Stage != AllStages && l.p.Stage(o.Stage) == nil && !(o.Stage == 0 && len(p.Stages) == 0) {
		return fmt.Errorf("the plan has no stage %d (it has %d)", o.Stage, max(1, len(p.Stages)))
	}
	d := newDOT(p)
	switch o.Detail {
	case Devices:
		writeDevices(d, l)
	case Stages:
		writeStages(d, l)
	case Modules, "":
		writeModules(d, l, o)
	case Ops:
		if err := writeOps(d, l, o); err != nil {
			return err
		}
	default:
		_, err := ParseDetail(string(o.Detail))
		return err
	}
	d.b.WriteString("}\n")
	_, err = io.WriteString(w, d.b.String())
	return err
}

// dot accumulates a Graphviz digraph.
type dot struct {
	b      strings.Builder
	indent string
}

// attr is one Graphviz attribute; values are quoted when written.
type attr struct{ k, v string }

func newDOT(p *plan.Plan) *dot {
	d := &dot{indent: "  "}
	fmt.Fprintf(&d.b, "digraph %s {\n", quote(p.Model))
	// newrank lets edges cross clusters without dot's "trouble in
	// init_rank"; the views stay at a few dozen nodes, so dot's default
	// spline routing stays fast.
	d.line("graph", attr{"rankdir", "TB"}, attr{"newrank", "true"}, attr{"fontname", "Helvetica"}, attr{"fontsize", "12"},
		attr{"labelloc", "t"}, attr{"label", title(p)}, attr{"nodesep", "0.3"}, attr{"ranksep", "0.35"})
	d.line("node", attr{"shape", "box"}, attr{"style", "rounded,filled"}, attr{"fontname", "Helvetica"}, attr{"fontsize", "10"})
	d.line("edge", attr{"color", edgeColor}, attr{"arrowsize", "0.6"}, attr{"fontname", "Helvetica"}, attr{"fontsize", "9"})
	return d
}

// title is the view's caption: what was planned, how fast, against what
// bound.
func title(p *plan.Plan) string {
	s := fmt.Sprintf("%s on %s: %s, %s predicted (bound %s, gap %s)", p.Model, p.Cluster, p.Strategy,
		formatMS(p.PredictedStepMS), formatMS(p.LowerBoundMS), percent(p.Gap))
	if p.MicroBatches > 1 {
		s += fmt.Sprintf(", %d micro-batches (%s)", p.MicroBatches, p.Schedule)
	}
	return s
}

func (d *dot) line(stmt string, attrs ...attr) {
	d.b.WriteString(d.indent)
	d.b.WriteString(stmt)
	d.attrs(attrs)
	d.b.WriteString(";\n")
}

func (d *dot) attrs(attrs []attr) {
	if len(attrs) == 0 {
		return
	}
	d.b.WriteString(" [")
	for i, a := range attrs {
		if i > 0 {
			d.b.WriteString(", ")
		}
		d.b.WriteString(a.k)
		d.b.WriteByte('=')
		d.b.WriteString(quote(a.v))
	}
	d.b.WriteByte(']')
}

// Node IDs are Go-quoted, which keeps them distinct and ASCII (Graphviz
// shows the label, not the ID).
func (d *dot) node(id string, attrs ...attr) { d.line(strconv.Quote(id), attrs...) }

func (d *dot) edge(from, to string, attrs ...attr) {
	d.line(strconv.Quote(from)+" -> "+strconv.Quote(to), attrs...)
}

// open starts a cluster; close ends it.
func (d *dot) open(id string, attrs ...attr) {
	fmt.Fprintf(&d.b, "%ssubgraph %s {\n", d.indent, strconv.Quote("cluster_"+id))
	d.indent += "  "
	for _, a := range attrs {
		fmt.Fprintf(&d.b, "%s%s=%s;\n", d.indent, a.k, quote(a.v))
	}
}

func (d *dot) close() {
	d.indent = d.indent[:len(d.indent)-2]
	d.b.WriteString(d.indent + "}\n")
}

// drawStages calls drawDevice for every device of the first replica of
// each stage, inside a dashed cluster per stage when the plan is staged.
func drawStages(d *dot, l *layout, drawDevice func(dev int)) {
	forEachStage(l, func(st *plan.Stage, devs []int) {
		if st != nil {
			d.open(fmt.Sprintf("stage%d", st.Index), attr{"label", stageLabel(st)}, attr{"style", "dashed"}, attr{"color", "#333333"})
		}
		for _, dev := range devs {
			drawDevice(dev)
		}
		if st != nil {
			d.close()
		}
	})
}

// deviceLabel describes a device: name, type, ops, busy time and
// utilisation, peak memory against capacity.
func deviceLabel(p *plan.Plan, i int) string {
	dev := &p.Devices[i]
	s := fmt.Sprintf("%s (%s)\n%s, busy %s", dev.Name, dev.Type, count(dev.Ops, "op", "ops"), formatMS(dev.BusyMS))
	if p.PredictedStepMS > 0 {
		s += fmt.Sprintf(" (%s)", percent(dev.BusyMS/p.PredictedStepMS))
	}
	if dev.MemoryBytes > 0 {
		s += fmt.Sprintf("\npeak %s of %s", formatBytes(dev.PeakMemoryBytes), formatBytes(dev.MemoryBytes))
	}
	return s
}

// stageLabel describes a stage: its devices and replicas, time per
// micro-batch, all-reduce.
func stageLabel(st *plan.Stage) string {
	var b strings.Builder
	fmt.Fprintf(&b, "stage %d", st.Index)
	if st.Replicas > 1 {
		fmt.Fprintf(&b, " x %d replicas (%s)", st.Replicas, replicaList(st))
	}
	fmt.Fprintf(&b, ": %s per micro-batch", formatMS(st.TimeMS))
	if st.AllReduceBytes > 0 {
		fmt.Fprintf(&b, ", all-reduce %s in %s", formatBytes(st.AllReduceBytes), formatMS(st.AllReduceMS))
	}
	return b.String()
}

// replicaList names a stage's replicas compactly: "gpu0 | gpu1 | ...",
// eliding the middle of long lists.
func replicaList(st *plan.Stage) string {
	reps := slices.Clone(st.Devices) // one device per replica
	if len(st.ReplicaDevices) > 0 {
		reps = make([]string, len(st.ReplicaDevices))
		for i, r := range st.ReplicaDevices {
			reps[i] = strings.Join(r, "+")
		}
	}
	if len(reps) > 4 {
		reps = append(reps[:2], "...", reps[len(reps)-1])
	}
	return strings.Join(reps, " | ")
}

// quote is s as a DOT string. Names come from the model: what a viewer
// would act on (controls, bidi overrides) is escaped by printable, so
// the DOT file and the SVG rendered from it show it; newlines stay the
// labels' line breaks.
func quote(s string) string { return strconv.Quote(printable.Text(s)) }

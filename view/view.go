// Package view draws a plan for the people who launch it: Graphviz views
// at the level a person reads (devices, stages, blocks of a module's ops,
// single ops) with the step's critical path highlighted, rendered to SVG
// or PNG through Graphviz, and the simulated step as a Chrome trace that
// Perfetto and chrome://tracing open.
//
// Views read the plan document; the op and module views also read the
// graph the plan was made for, for its edges and the critical path.
package view

import (
	"fmt"
	"math"
	"strings"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/plan"
)

// Detail is the level a Graphviz view draws.
type Detail string

const (
	// Devices draws one node per device, stages and their replicas as
	// clusters, and the traffic between devices.
	Devices Detail = "device"
	// Stages draws one node per stage.
	Stages Detail = "stage"
	// Modules draws, inside each device, blocks of consecutive ops of one
	// module path and phase; the default, small whatever the model's size.
	Modules Detail = "module"
	// Ops draws every op: for small graphs, one stage or one module.
	Ops Detail = "op"
)

// Details lists the levels, coarsest first.
var Details = []Detail{Devices, Stages, Modules, Ops}

// ParseDetail reads a level's name.
func ParseDetail(s string) (Detail, error) {
	for _, d := range Details {
		if string(d) == s {
			return d, nil
		}
	}
	names := make([]string, len(Details))
	for i, d := range Details {
		names[i] = string(d)
	}
	return "", fmt.Errorf("unknown view detail %q (use %s)", s, strings.Join(names, ", "))
}

// AllStages is Options.Stage when no stage is singled out.
const AllStages = -1

// DefaultMaxBlocks is the block budget of a module view: dot lays out a
// few dozen nodes in well under a second, and a chain of 32 boxes still
// reads on one screen.
const DefaultMaxBlocks = 32

// MaxOpViewOps bounds an op view: dot's layout time grows faster than
// linearly in nodes and edges, and past a few hundred ops with clusters
// it runs for minutes.
const MaxOpViewOps = 600

// Options choose what a view draws.
type Options struct {
	Detail Detail
	// Stage, unless AllStages, keeps only that stage's ops (module and op
	// views).
	Stage int
	// Module, when set, keeps only ops whose name starts with it (module
	// and op views), e.g. "/layer3/".
	Module string
	// Groups are the fused groups the plan was made on, each its name
	// followed by its members' op names: the op view draws them as
	// clusters, the module view uses them as blocks' keys when op names
	// carry no module path.
	Groups [][]string
	// MaxBlocks is the module view's budget of blocks (0: DefaultMaxBlocks).
	MaxBlocks int
}

// DefaultOptions draws the module view of every stage.
func DefaultOptions() Options {
	return Options{Detail: Modules, Stage: AllStages, MaxBlocks: DefaultMaxBlocks}
}

// TooLargeError reports an op view too large for Graphviz to lay out in
// seconds.
type TooLargeError struct {
	Ops, Limit int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("an op-level view of %d ops is too large to lay out in seconds (at most %d): draw one stage or one module, or a coarser level", e.Ops, e.Limit)
}

// layout is what every view needs from the plan: devices, stages and ops
// indexed, and each op's runs.
type layout struct {
	p *plan.Plan
	g *graph.Graph
	// devIndex maps a device name to its index in p.Devices; stageOf a
	// device to the stage it belongs to (-1: unused).
	devIndex map[string]int
	stageOf  []int
	// opIndex maps an op name to its index in p.Ops; opDev each op's
	// device index, opStage its stage.
	opIndex map[string]int
	opDev   []int
	opStage []int
}

func newLayout(p *plan.Plan, g *graph.Graph) (*layout, error) {
	l := &layout{p: p, g: g, devIndex: make(map[string]int, len(p.Devices)), opIndex: make(map[string]int, len(p.Ops))}
	for i, d := range p.Devices {
		l.devIndex[d.Name] = i
	}
	l.stageOf = make([]int, len(p.Devices))
	stages := p.DeviceStages()
	for i, d := range p.Devices {
		l.stageOf[i] = -1
		if s, ok := stages[d.Name]; ok {
			l.stageOf[i] = s
		}
	}
	l.opDev = make([]int, len(p.Ops))
	l.opStage = make([]int, len(p.Ops))
	for i, op := range p.Ops {
		d, ok := l.devIndex[op.Device]
		if !ok {
			return nil, fmt.Errorf("op %q is placed on %q, which is not among the plan's devices", op.Name, op.Device)
		}
		l.opIndex[op.Name] = i
		l.opDev[i] = d
		l.opStage[i] = max(0, l.stageOf[d])
	}
	return l, nil
}

// staged reports whether the plan is more than one plain stage: several
// stages, or one replicated.
func (l *layout) staged() bool {
	return len(l.p.Stages) > 1 || len(l.p.Stages) == 1 && l.p.Stages[0].Replicas > 1
}

// busyMS is the time an op computed in the step, over all its runs.
func busyMS(op *plan.Op) float64 {
	if len(op.Runs) == 0 {
		return op.EndMS - op.StartMS
	}
	var t float64
	for _, r := range op.Runs {
		t += r.EndMS - r.StartMS
	}
	return t
}

// keep reports whether op i passes the options' stage and module filters.
func (l *layout) keep(i int, o Options) bool {
	if o.Stage != AllStages && l.opStage[i] != o.Stage {
		return false
	}
	return o.Module == "" || strings.HasPrefix(l.p.Ops[i].Name, o.Module)
}

// color is device i's fill.
func color(i int) string { return palette[i%len(palette)] }

// palette colours devices; it repeats past twelve devices.
var palette = []string{
	"#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
	"#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f",
}

// formatMS prints a duration in ms for a label.
func formatMS(ms float64) string { return plan.FormatMS(ms) }

// count prints n with its noun, singular or plural.
func count(n int, one, many string) string { return plan.Count(n, one, many) }

// percent prints a fraction as a whole percentage.
func percent(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*f)
}

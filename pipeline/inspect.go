package pipeline

import (
	"fmt"
	"github.com/opplace/opplace/internal/printable"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
	"github.com/opplace/opplace/onnx"
)

// Inspection is what an imported model holds, op by op and in total:
// opplace inspect's report (its JSON form).
type Inspection struct {
	Model  string        `json:"model"`
	Format string        `json:"format"`
	Opset  int64         `json:"opset"`
	Totals InspectTotals `json:"totals"`
	Inputs []TensorInfo  `json:"inputs"`
	// GraphOutputs are the model's outputs.
	GraphOutputs []TensorInfo  `json:"outputs"`
	OpTypes      []OpTypeCount `json:"op_types"`
	Ops          []OpInfo      `json:"ops"`
	// UnknownShapes names the ops with an output of unknown shape.
	UnknownShapes []string `json:"unknown_shapes"`
	// UnknownOps lists the op types opplace has no shape inference for, in
	// the graph or its control-flow bodies, as "domain:type" outside the
	// ONNX standard domain.
	UnknownOps []string `json:"unknown_ops"`
	Warnings   []string `json:"warnings"`
}

// InspectTotals are a model's totals.
type InspectTotals struct {
	Ops     int   `json:"ops"`
	Tensors int   `json:"tensors"`
	Params  int64 `json:"params"`
	// ParamBytes is the parameters' size in memory.
	ParamBytes int64 `json:"param_bytes"`
	// MACs and FLOPs are summed in float64: a large model's step passes
	// int64 (9.2e18); below 2^53 they are exact integers.
	MACs  float64 `json:"macs"`
	FLOPs float64 `json:"flops"`
	// ActivationBytes sums the bytes of every op output.
	ActivationBytes int64 `json:"activation_bytes"`
}

// TensorInfo describes one tensor; Shape is null when unknown, [] for a
// scalar.
type TensorInfo struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
}

// OpTypeCount is how many ops of a type a model has.
type OpTypeCount struct {
	Type  string `json:"type"`
	Count int    `json:"count"`
}

// OpInfo is one op's outputs, work and parameters.
type OpInfo struct {
	Name    string       `json:"name"`
	Type    string       `json:"type"`
	Outputs []TensorInfo `json:"outputs"`
	MACs    int64        `json:"macs"`
	FLOPs   int64        `json:"flops"`
	// Params counts the elements of the parameter tensors the op reads.
	Params int64 `json:"params"`
	// Estimated marks a cost guessed from tensor sizes (unknown op types,
	// unknown input shapes, loops of unknown trip count).
	Estimated bool `json:"estimated,omitempty"`
}

func tensorInfo(t *graph.Tensor) TensorInfo {
	ti := TensorInfo{Name: t.Name, DType: t.DType.String()}
	if t.ShapeKnown {
		ti.Shape = append([]int64{}, t.Shape...)
	}
	return ti
}

// opTypeKey names an op type, prefixed by its domain outside the ONNX
// standard one.
func opTypeKey(op *graph.Op) string {
	if op.Domain != "" && op.Domain != "ai.onnx" {
		return op.Domain + ":" + op.Type
	}
	return op.Type
}

// Inspect summarises the model m read from path. A graph whose totals
// wrap (a format whose importer does not bound them) is an InputError.
func Inspect(path string, m *Model) (*Inspection, error) {
	// The importers bound their graphs' totals already; a format that does
	// not must still never print a wrapped sum.
	if err := shapes.CheckTotals(m.Graph); err != nil {
		return nil, &InputError{Err: fmt.Errorf("%s: %w", path, err)}
	}
	return summarise(path, m), nil
}

func summarise(path string, m *Model) *Inspection {
	g := m.Graph
	r := &Inspection{Model: path, Format: m.Format, Opset: m.Opset,
		Inputs: []TensorInfo{}, GraphOutputs: []TensorInfo{}, OpTypes: []OpTypeCount{}, Ops: []OpInfo{},
		UnknownShapes: []string{}, UnknownOps: unknownOps(m), Warnings: append([]string{}, m.Warnings...)}
	r.Totals.Ops, r.Totals.Tensors = len(g.Ops), len(g.Tensors)
	r.Totals.FLOPs, r.Totals.MACs = shapes.WorkTotals(g)
	for _, id := range g.Inputs {
		r.Inputs = append(r.Inputs, tensorInfo(g.Tensor(id)))
	}
	for _, id := range g.Outputs {
		r.GraphOutputs = append(r.GraphOutputs, tensorInfo(g.Tensor(id)))
	}
	for i := range g.Tensors {
		if t := &g.Tensors[i]; t.Kind == graph.Parameter {
			r.Totals.Params += t.Elements()
			r.Totals.ParamBytes += t.Bytes()
		}
	}
	counts := map[string]int{}
	for i := range g.Ops {
		op := &g.Ops[i]
		key := opTypeKey(op)
		counts[key]++
		oi := OpInfo{Name: op.Name, Type: key, Outputs: []TensorInfo{}, MACs: op.Work.MACs, FLOPs: op.Work.FLOPs,
			Estimated: op.Work.Estimated}
		var read []graph.TensorID
		for _, id := range op.Inputs {
			if t := g.Tensor(id); t.Kind == graph.Parameter && !slices.Contains(read, id) {
				read = append(read, id)
				oi.Params += t.Elements()
			}
		}
		unknown := false
		for _, id := range op.Outputs {
			t := g.Tensor(id)
			oi.Outputs = append(oi.Outputs, tensorInfo(t))
			r.Totals.ActivationBytes += t.Bytes()
			unknown = unknown || !t.ShapeKnown
		}
		if unknown {
			r.UnknownShapes = append(r.UnknownShapes, op.Name)
		}
		r.Ops = append(r.Ops, oi)
	}
	for t, c := range counts {
		r.OpTypes = append(r.OpTypes, OpTypeCount{t, c})
	}
	slices.SortFunc(r.OpTypes, func(a, b OpTypeCount) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return strings.Compare(a.Type, b.Type)
	})
	return r
}

// unknownOps lists, sorted, the op types of an ONNX model (control-flow
// bodies included) that have no shape inference. Other formats map their
// ops onto known ones and report the rest as warnings.
func unknownOps(m *Model) []string {
	out := []string{}
	if m.Format != "onnx" {
		return out
	}
	var walk func(g *graph.Graph)
	walk = func(g *graph.Graph) {
		for i := range g.Ops {
			op := &g.Ops[i]
			if !onnx.IsSupported(op.Domain, op.Type) {
				out = append(out, opTypeKey(op))
			}
			for _, name := range slices.Sorted(maps.Keys(op.Attrs)) {
				for _, sub := range op.Attrs[name].Graphs {
					walk(sub)
				}
			}
		}
	}
	walk(m.Graph)
	slices.Sort(out)
	return slices.Compact(out)
}

func shapeText(ts []TensorInfo) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = graph.FormatShape(t.Shape, t.Shape != nil)
	}
	return strings.Join(parts, ", ")
}

// nameList renders names for the summary line: "none", or a count with
// the first few names.
func nameList(names []string, one, many string) string {
	if len(names) == 0 {
		return "none"
	}
	noun := many
	if len(names) == 1 {
		noun = one
	}
	const show = 5
	s := fmt.Sprintf("%d %s (%s", len(names), noun, strings.Join(names[:min(show, len(names))], ", "))
	if len(names) > show {
		s += fmt.Sprintf(", … %d more", len(names)-show)
	}
	return s + ")"
}

// WriteInspectionTable renders r as opplace inspect's table: the model's
// inputs and outputs, every op when listOps, then the totals.
func WriteInspectionTable(out io.Writer, r *Inspection, listOps bool) error {
	out = printable.Writer(out) // names from the model file
	tw := printable.NewColumns(tabwriter.NewWriter(out, 0, 4, 2, ' ', 0))
	fmt.Fprintf(tw, "model\t%s (%s, opset %d)\n", r.Model, r.Format, r.Opset)
	for _, t := range r.Inputs {
		fmt.Fprintf(tw, "input\t%s\t%s\t%s\n", t.Name, t.DType, graph.FormatShape(t.Shape, t.Shape != nil))
	}
	for _, t := range r.GraphOutputs {
		fmt.Fprintf(tw, "output\t%s\t%s\t%s\n", t.Name, t.DType, graph.FormatShape(t.Shape, t.Shape != nil))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if listOps {
		fmt.Fprintln(out)
		tw = printable.NewColumns(tabwriter.NewWriter(out, 0, 4, 2, ' ', 0))
		fmt.Fprintln(tw, "op\ttype\toutputs\tMACs\tparams")
		for _, o := range r.Ops {
			est := ""
			if o.Estimated {
				est = " (est.)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d%s\t%d\n", o.Name, o.Type, shapeText(o.Outputs), o.MACs, est, o.Params)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(out)
	t := r.Totals
	tw = printable.NewColumns(tabwriter.NewWriter(out, 0, 4, 2, ' ', 0))
	fmt.Fprintf(tw, "ops\t%d\n", t.Ops)
	fmt.Fprintf(tw, "params\t%d (%s)\n", t.Params, cluster.FormatBytes(t.ParamBytes))
	fmt.Fprintf(tw, "MACs\t%.0f\n", t.MACs)
	fmt.Fprintf(tw, "FLOPs\t%.0f\n", t.FLOPs)
	fmt.Fprintf(tw, "activations\t%s\n", cluster.FormatBytes(t.ActivationBytes))
	types := make([]string, len(r.OpTypes))
	for i, c := range r.OpTypes {
		types[i] = fmt.Sprintf("%s %d", c.Type, c.Count)
	}
	fmt.Fprintf(tw, "op types\t%s\n", strings.Join(types, ", "))
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "unknown shapes: %s; unknown op types: %s\n",
		nameList(r.UnknownShapes, "op", "ops"), nameList(r.UnknownOps, "type", "types"))
	return err
}

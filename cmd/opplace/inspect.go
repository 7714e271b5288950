package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/pipeline"
)

type inspectFlags struct {
	dimFlags
	output  string
	summary bool
	ops     bool
}

func init() { commands = append(commands, newInspectCmd) }

func newInspectCmd() *cobra.Command {
	f := &inspectFlags{}
	cmd := &cobra.Command{
		Use:   "inspect MODEL",
		Short: "Import a model and report every op's shapes, parameters and MACs",
		Long: `inspect imports MODEL, infers every tensor's shape and reports, per op, its
output shapes, MACs and parameters, then the totals (ops, parameters and their
bytes, MACs, FLOPs, activation bytes) and which ops have outputs of unknown shape
or are of a type opplace does not know. Warnings go to stderr.

An op's params are the elements of the parameter tensors (initializers) it
reads, each counted once per op; totals.params counts every parameter tensor
once, so a weight shared by two ops appears in both ops but once in the total.
activation_bytes is the sum over ops of the bytes of their outputs (elements
times element size): everything a step writes, not its peak memory.`,
		Example: `  opplace inspect testdata/models/resnet50.onnx
  opplace inspect testdata/models/bert_base.onnx --dim batch=16 --summary
  opplace inspect testdata/models/bert_base.onnx --shape input_ids=16,128 -o json
  opplace inspect model.onnx --batch 8 --loop-trips 32 --if-branch then`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runInspect(cmd, args[0], f)
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fl.BoolVar(&f.summary, "summary", false, "table output: leave out the per-op table")
	fl.BoolVar(&f.ops, "ops", false, "list every op")
	_ = fl.MarkDeprecated("ops", "every op is listed by default; --summary leaves them out")
	return cmd
}

// inspectReport is inspect's JSON form.
type inspectReport struct {
	Model  string        `json:"model"`
	Format string        `json:"format"`
	Opset  int64         `json:"opset"`
	Totals inspectTotals `json:"totals"`
	Inputs []tensorInfo  `json:"inputs"`
	// GraphOutputs are the model's outputs.
	GraphOutputs []tensorInfo  `json:"outputs"`
	OpTypes      []opTypeCount `json:"op_types"`
	Ops          []opInfo      `json:"ops"`
	// UnknownShapes names the ops with an output of unknown shape.
	UnknownShapes []string `json:"unknown_shapes"`
	// UnknownOps lists the op types opplace has no shape inference for, in
	// the graph or its control-flow bodies, as "domain:type" outside the
	// ONNX standard domain.
	UnknownOps []string `json:"unknown_ops"`
	Warnings   []string `json:"warnings"`
}

type inspectTotals struct {
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

// tensorInfo describes one tensor; Shape is null when unknown, [] for a
// scalar.
type tensorInfo struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
}

type opTypeCount struct {
	Type  string `json:"type"`
	Count int    `json:"count"`
}

type opInfo struct {
	Name    string       `json:"name"`
	Type    string       `json:"type"`
	Outputs []tensorInfo `json:"outputs"`
	MACs    int64        `json:"macs"`
	FLOPs   int64        `json:"flops"`
	// Params counts the elements of the parameter tensors the op reads.
	Params int64 `json:"params"`
	// Estimated marks a cost guessed from tensor sizes (unknown op types,
	// unknown input shapes, loops of unknown trip count).
	Estimated bool `json:"estimated,omitempty"`
}

func runInspect(cmd *cobra.Command, path string, f *inspectFlags) error {
	if f.output != "table" && f.output != "json" {
		return usageError{fmt.Errorf("-o %q: want table or json", f.output)}
	}
	opts, err := f.options()
	if err != nil {
		return err
	}
	m, err := loadModel(path, opts)
	if err != nil {
		return err
	}
	// The importers bound their graphs' totals already; a format that does
	// not must still never print a wrapped sum.
	if err := shapes.CheckTotals(m.Graph); err != nil {
		return &pipeline.InputError{Err: fmt.Errorf("%s: %w", path, err)}
	}
	r := summarise(path, m)
	for _, w := range m.Warnings {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
	}
	out := cmd.OutOrStdout()
	if f.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return writeInspectTable(out, r, !f.summary)
}

func info(t *graph.Tensor) tensorInfo {
	ti := tensorInfo{Name: t.Name, DType: t.DType.String()}
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

func summarise(path string, m *pipeline.Model) *inspectReport {
	g := m.Graph
	r := &inspectReport{Model: path, Format: m.Format, Opset: m.Opset,
		Inputs: []tensorInfo{}, GraphOutputs: []tensorInfo{}, OpTypes: []opTypeCount{}, Ops: []opInfo{},
		UnknownShapes: []string{}, UnknownOps: unknownOps(m), Warnings: append([]string{}, m.Warnings...)}
	r.Totals.Ops, r.Totals.Tensors = len(g.Ops), len(g.Tensors)
	r.Totals.FLOPs, r.Totals.MACs = shapes.WorkTotals(g)
	for _, id := range g.Inputs {
		r.Inputs = append(r.Inputs, info(g.Tensor(id)))
	}
	for _, id := range g.Outputs {
		r.GraphOutputs = append(r.GraphOutputs, info(g.Tensor(id)))
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
		oi := opInfo{Name: op.Name, Type: key, Outputs: []tensorInfo{}, MACs: op.Work.MACs, FLOPs: op.Work.FLOPs,
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
			oi.Outputs = append(oi.Outputs, info(t))
			r.Totals.ActivationBytes += t.Bytes()
			unknown = unknown || !t.ShapeKnown
		}
		if unknown {
			r.UnknownShapes = append(r.UnknownShapes, op.Name)
		}
		r.Ops = append(r.Ops, oi)
	}
	for t, c := range counts {
		r.OpTypes = append(r.OpTypes, opTypeCount{t, c})
	}
	slices.SortFunc(r.OpTypes, func(a, b opTypeCount) int {
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
func unknownOps(m *pipeline.Model) []string {
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

func shapeText(ts []tensorInfo) string {
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

func writeInspectTable(out io.Writer, r *inspectReport, listOps bool) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
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
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
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
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
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

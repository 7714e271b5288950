package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/pipeline"
)

type inspectFlags struct {
	dimFlags
	output string
	ops    bool
}

func init() { commands = append(commands, newInspectCmd) }

func newInspectCmd() *cobra.Command {
	f := &inspectFlags{}
	cmd := &cobra.Command{
		Use:   "inspect MODEL",
		Short: "Import a model and summarise its graph: shapes, parameters, MACs",
		Long: `inspect imports MODEL (ONNX), infers every tensor's shape and prints a summary:
opset, op and parameter counts, MACs and FLOPs, the inputs and outputs with their
shapes, how many ops of each type and how many op outputs are shaped. With --ops
it lists every op with its output shapes and cost. Warnings go to stderr.`,
		Example: `  opplace inspect testdata/models/resnet50.onnx
  opplace inspect testdata/models/bert_base.onnx --dim batch=16 --ops
  opplace inspect model.onnx --batch 8 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runInspect(cmd, args[0], f)
		},
	}
	f.register(cmd)
	cmd.Flags().StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	cmd.Flags().BoolVar(&f.ops, "ops", false, "list every op")
	return cmd
}

// inspectReport is inspect's JSON form.
type inspectReport struct {
	Model    string        `json:"model"`
	Opset    int64         `json:"opset"`
	Ops      int           `json:"ops"`
	Tensors  int           `json:"tensors"`
	Params   int64         `json:"params"`
	MACs     int64         `json:"macs"`
	FLOPs    int64         `json:"flops"`
	Shaped   int           `json:"shaped_outputs"`
	Outputs  int           `json:"op_outputs"`
	Inputs   []tensorInfo  `json:"inputs"`
	GOutputs []tensorInfo  `json:"outputs"`
	OpTypes  []opTypeCount `json:"op_types"`
	OpList   []opInfo      `json:"op_list,omitempty"`
	Warnings []string      `json:"warnings,omitempty"`
}

type tensorInfo struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	Shape string `json:"shape"`
}

type opTypeCount struct {
	Type  string `json:"type"`
	Count int    `json:"count"`
}

type opInfo struct {
	Name      string   `json:"name"`
	Type      string   `json:"type"`
	Outputs   []string `json:"outputs"`
	MACs      int64    `json:"macs"`
	FLOPs     int64    `json:"flops"`
	Estimated bool     `json:"estimated,omitempty"`
}

func runInspect(cmd *cobra.Command, path string, f *inspectFlags) error {
	if f.output != "table" && f.output != "json" {
		return usageError{fmt.Errorf("-o %q: want table or json", f.output)}
	}
	opts, err := f.options()
	if err != nil {
		return err
	}
	m, err := pipeline.LoadModel(path, opts)
	if err != nil {
		return err
	}
	r := summarise(path, m, f.ops)
	for _, w := range m.Warnings {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
	}
	out := cmd.OutOrStdout()
	if f.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return writeInspectTable(out, r)
}

func summarise(path string, m *pipeline.Model, listOps bool) *inspectReport {
	g := m.Graph
	r := &inspectReport{Model: path, Opset: m.Opset, Ops: len(g.Ops), Tensors: len(g.Tensors), Warnings: m.Warnings}
	info := func(id graph.TensorID) tensorInfo {
		t := g.Tensor(id)
		return tensorInfo{t.Name, t.DType.String(), t.ShapeString()}
	}
	for _, id := range g.Inputs {
		r.Inputs = append(r.Inputs, info(id))
	}
	for _, id := range g.Outputs {
		r.GOutputs = append(r.GOutputs, info(id))
	}
	for i := range g.Tensors {
		if g.Tensors[i].Kind == graph.Parameter {
			r.Params += g.Tensors[i].Elements()
		}
	}
	counts := map[string]int{}
	for i := range g.Ops {
		op := &g.Ops[i]
		r.MACs += op.Work.MACs
		r.FLOPs += op.Work.FLOPs
		key := op.Type
		if op.Domain != "" && op.Domain != "ai.onnx" {
			key = op.Domain + ":" + op.Type
		}
		counts[key]++
		oi := opInfo{Name: op.Name, Type: key, MACs: op.Work.MACs, FLOPs: op.Work.FLOPs, Estimated: op.Work.Estimated}
		for _, o := range op.Outputs {
			r.Outputs++
			if g.Tensor(o).ShapeKnown {
				r.Shaped++
			}
			oi.Outputs = append(oi.Outputs, g.Tensor(o).ShapeString())
		}
		if listOps {
			r.OpList = append(r.OpList, oi)
		}
	}
	for t, c := range counts {
		r.OpTypes = append(r.OpTypes, opTypeCount{t, c})
	}
	slices.SortFunc(r.OpTypes, func(a, b opTypeCount) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		if a.Type < b.Type {
			return -1
		}
		return 1
	})
	return r
}

func writeInspectTable(out io.Writer, r *inspectReport) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "model\t%s\n", r.Model)
	fmt.Fprintf(tw, "opset\t%d\n", r.Opset)
	fmt.Fprintf(tw, "ops\t%d\n", r.Ops)
	fmt.Fprintf(tw, "params\t%d\n", r.Params)
	fmt.Fprintf(tw, "MACs\t%d\n", r.MACs)
	fmt.Fprintf(tw, "FLOPs\t%d\n", r.FLOPs)
	fmt.Fprintf(tw, "shaped\t%d/%d op outputs\n", r.Shaped, r.Outputs)
	for _, t := range r.Inputs {
		fmt.Fprintf(tw, "input\t%s\t%s\t%s\n", t.Name, t.DType, t.Shape)
	}
	for _, t := range r.GOutputs {
		fmt.Fprintf(tw, "output\t%s\t%s\t%s\n", t.Name, t.DType, t.Shape)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "op type\tcount")
	for _, c := range r.OpTypes {
		fmt.Fprintf(tw, "%s\t%d\n", c.Type, c.Count)
	}
	if len(r.OpList) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "op\ttype\toutputs\tMACs\tFLOPs")
		for _, o := range r.OpList {
			est := ""
			if o.Estimated {
				est = " (est.)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%d%s\n", o.Name, o.Type, o.Outputs, o.MACs, o.FLOPs, est)
		}
	}
	return tw.Flush()
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/opplace/opplace/onnx/onnxpb"
)

// inspectJSON is the part of inspect's JSON the tests read.
type inspectJSON struct {
	Totals struct {
		Ops             int     `json:"ops"`
		Params          int64   `json:"params"`
		ParamBytes      int64   `json:"param_bytes"`
		MACs            float64 `json:"macs"`
		FLOPs           float64 `json:"flops"`
		ActivationBytes int64   `json:"activation_bytes"`
	} `json:"totals"`
	Ops []struct {
		Name    string `json:"name"`
		Type    string `json:"type"`
		Outputs []struct {
			Name  string  `json:"name"`
			DType string  `json:"dtype"`
			Shape []int64 `json:"shape"`
		} `json:"outputs"`
		MACs   int64 `json:"macs"`
		Params int64 `json:"params"`
	} `json:"ops"`
	UnknownShapes []string `json:"unknown_shapes"`
	UnknownOps    []string `json:"unknown_ops"`
	Warnings      []string `json:"warnings"`
}

// inspectModels are the shared models' reference facts
// (/work/shared/models/facts.json).
var inspectModels = []struct {
	name   string
	flags  []string
	nodes  int
	params int64
	macs   int64
}{
	{"resnet50", nil, 169, 25507944, 130853896192},
	{"inception_v3", nil, 316, 23802088, 182822915072},
	{"vgg16", nil, 48, 138350184, 495048458240},
	{"mobilenet_v2", nil, 209, 3475008, 19249553408},
	{"bert_base", []string{"--dim", "batch=16"}, 1086, 131999232, 226784968704},
	{"gpt2_small", []string{"--dim", "batch=8"}, 1183, 163000320, 1166593228800},
	{"transformer", nil, 1793, 44047872, 92610232320},
	{"gnmt", nil, 4857, 132742400, 255684771840},
	{"gpt2_xl", []string{"--dim", "batch=4"}, 4519, 1638022400, 7013407129600},
}

// inspect runs `opplace inspect args... -o json` and decodes the report,
// checking that every documented field is present.
func inspect(t *testing.T, args ...string) (*inspectJSON, string) {
	t.Helper()
	code, stdout, stderr := invoke(t, append([]string{"inspect", "-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var fields struct {
		Totals        map[string]json.RawMessage   `json:"totals"`
		Ops           []map[string]json.RawMessage `json:"ops"`
		UnknownShapes json.RawMessage              `json:"unknown_shapes"`
		UnknownOps    json.RawMessage              `json:"unknown_ops"`
	}
	if err := json.Unmarshal([]byte(stdout), &fields); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	for _, k := range []string{"ops", "params", "param_bytes", "macs", "flops", "activation_bytes"} {
		if _, ok := fields.Totals[k]; !ok {
			t.Errorf("totals.%s missing", k)
		}
	}
	for _, op := range fields.Ops[:min(1, len(fields.Ops))] {
		for _, k := range []string{"name", "type", "outputs", "macs", "params"} {
			if _, ok := op[k]; !ok {
				t.Errorf("ops[0].%s missing", k)
			}
		}
	}
	for k, v := range map[string]json.RawMessage{"unknown_shapes": fields.UnknownShapes, "unknown_ops": fields.UnknownOps} {
		if !strings.HasPrefix(string(v), "[") {
			t.Errorf("%s = %s, want an array", k, v)
		}
	}
	var r inspectJSON
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	return &r, stderr
}

var dtypeBytes = map[string]int64{"float32": 4, "int64": 8, "int32": 4, "bool": 1, "float16": 2}

func TestInspectModels(t *testing.T) {
	for _, m := range inspectModels {
		t.Run(m.name, func(t *testing.T) {
			r, stderr := inspect(t, append([]string{filepath.Join(modelDir, m.name+".onnx")}, m.flags...)...)
			if stderr != "" {
				t.Errorf("stderr: %s", stderr)
			}
			if r.Totals.Params != m.params || r.Totals.MACs != float64(m.macs) {
				t.Errorf("params %d, MACs %.0f; want %d, %d", r.Totals.Params, r.Totals.MACs, m.params, m.macs)
			}
			if len(r.Ops) != m.nodes || r.Totals.Ops != m.nodes {
				t.Errorf("%d ops (totals.ops %d), want %d", len(r.Ops), r.Totals.Ops, m.nodes)
			}
			if len(r.UnknownShapes) != 0 || len(r.UnknownOps) != 0 {
				t.Errorf("unknown shapes %v, unknown ops %v", r.UnknownShapes, r.UnknownOps)
			}
			// The totals are the sums of the per-op figures.
			var macs, act int64
			for _, op := range r.Ops {
				macs += op.MACs
				for _, o := range op.Outputs {
					size, ok := dtypeBytes[o.DType]
					if !ok || o.Shape == nil {
						t.Fatalf("op %s output %s: dtype %q shape %v", op.Name, o.Name, o.DType, o.Shape)
					}
					for _, d := range o.Shape {
						size *= d
					}
					act += size
				}
			}
			if float64(macs) != r.Totals.MACs || act != r.Totals.ActivationBytes {
				t.Errorf("per-op MACs sum %d, output bytes sum %d; totals %.0f, %d", macs, act, r.Totals.MACs, r.Totals.ActivationBytes)
			}
			if r.Totals.FLOPs < 2*r.Totals.MACs || r.Totals.ParamBytes < r.Totals.Params {
				t.Errorf("totals %+v", r.Totals)
			}
		})
	}
}

// TestInspectResNet50Ops checks per-op figures computed by hand: the first
// convolution (64×3×7×7 weights + 64 bias, stride 2 onto 32×64×112×112)
// and the classifier (2048×1000 + 1000, batch 32).
func TestInspectResNet50Ops(t *testing.T) {
	r, _ := inspect(t, filepath.Join(modelDir, "resnet50.onnx"))
	want := map[string]struct {
		shape       []int64
		macs, param int64
	}{
		"/conv1/Conv": {[]int64{32, 64, 112, 112}, 32 * 64 * 112 * 112 * 3 * 7 * 7, 64*3*7*7 + 64},
		"/fc/Gemm":    {[]int64{32, 1000}, 32 * 2048 * 1000, 2048*1000 + 1000},
	}
	found := 0
	for _, op := range r.Ops {
		w, ok := want[op.Name]
		if !ok {
			continue
		}
		found++
		if !slices.Equal(op.Outputs[0].Shape, w.shape) || op.MACs != w.macs || op.Params != w.param {
			t.Errorf("%s: shape %v, %d MACs, %d params; want %v, %d, %d", op.Name, op.Outputs[0].Shape, op.MACs, op.Params, w.shape, w.macs, w.param)
		}
	}
	if found != len(want) {
		t.Errorf("found %d of the ops %v", found, want)
	}
	if r.Totals.ParamBytes != 4*r.Totals.Params {
		t.Errorf("param_bytes %d, want 4 × %d (float32)", r.Totals.ParamBytes, r.Totals.Params)
	}
}

// TestInspectDimFlags checks that the ways of binding a dynamic batch
// agree on real models.
func TestInspectDimFlags(t *testing.T) {
	bert := filepath.Join(modelDir, "bert_base.onnx")
	gpt2 := filepath.Join(modelDir, "gpt2_small.onnx")
	cases := []struct {
		name     string
		a, b     []string
		batchDim int64
	}{
		{"bert --batch", []string{bert, "--dim", "batch=16"}, []string{bert, "--batch", "16"}, 16},
		{"bert --shape", []string{bert, "--dim", "batch=16"}, []string{bert, "--shape", "ids=16,128"}, 16},
		{"gpt2 --batch", []string{gpt2, "--dim", "batch=8"}, []string{gpt2, "--batch", "8"}, 8},
		{"gpt2 --shape", []string{gpt2, "--dim", "batch=8"}, []string{gpt2, "--shape", "ids=8,1024"}, 8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, outA, _ := invoke(t, append([]string{"inspect", "-o", "json"}, tc.a...)...)
			code, outB, stderr := invoke(t, append([]string{"inspect", "-o", "json"}, tc.b...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if outA != outB {
				t.Errorf("%v and %v give different reports", tc.a[1:], tc.b[1:])
			}
			r, _ := inspect(t, tc.b...)
			if s := r.Ops[len(r.Ops)-1].Outputs[0].Shape; len(s) == 0 || s[0] != tc.batchDim {
				t.Errorf("last op output %v, want batch %d", s, tc.batchDim)
			}
		})
	}
	// Another batch scales the MACs linearly (everything is per sample).
	r8, _ := inspect(t, bert, "--batch", "8")
	if want := inspectModels[4].macs / 2; r8.Totals.MACs != float64(want) {
		t.Errorf("bert --batch 8: MACs %.0f, want %d", r8.Totals.MACs, want)
	}
}

func TestInspectBadInput(t *testing.T) {
	bert := filepath.Join(modelDir, "bert_base.onnx")
	resnet := filepath.Join(modelDir, "resnet50.onnx")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"missing file", []string{"inspect", "nope.onnx"}, "nope.onnx"},
		{"unbound dim", []string{"inspect", bert}, "--dim batch=N"},
		{"bad output", []string{"inspect", resnet, "-o", "yaml"}, `-o "yaml": want table or json`},
		{"bad dim", []string{"inspect", bert, "--dim", "batch"}, "--dim"},
		{"zero batch", []string{"inspect", bert, "--batch", "-1"}, "--batch -1"},
		{"bad shape", []string{"inspect", bert, "--shape", "ids=16,x"}, "--shape"},
		{"no such input", []string{"inspect", bert, "--shape", "tokens=16,128"}, `no input named "tokens"`},
		{"bad loop trips", []string{"inspect", resnet, "--loop-trips", "-3"}, "--loop-trips -3"},
		{"bad if branch", []string{"inspect", resnet, "--if-branch", "both"}, `--if-branch "both"`},
		{"no model", []string{"inspect"}, "accepts 1 arg"},
		// 1e10 tokens through GPT-2 XL: the output head alone is 1.6e18
		// FLOPs. (3e9 tokens inspect: their sum, 1.06e19 FLOPs, once
		// printed -7886245180909551568 and is now summed in float64.)
		{"work past 2^60", []string{"inspect", filepath.Join(modelDir, "gpt2_xl.onnx"), "--dim", "batch=10000000"},
			`op "/head/MatMul" (MatMul, output 10000000x1024x50257): its FLOPs reach 2^60 (1.15e18), beyond any op of a real model's step; bind a smaller batch or dimension`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := invoke(t, tc.args...)
			if code != exitInvalid {
				t.Errorf("exit %d, want %d", code, exitInvalid)
			}
			if !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr %q, want one line containing %q", stderr, tc.want)
			}
			if stdout != "" {
				t.Errorf("stdout %q", stdout)
			}
		})
	}
}

// Small models written with the generated protobuf types.

func vi(name string, dt onnxpb.TensorProto_DataType, dims ...int64) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(dt)), Shape: shape}}}}
}

func out(names ...string) []*onnxpb.ValueInfoProto {
	var vs []*onnxpb.ValueInfoProto
	for _, n := range names {
		vs = append(vs, &onnxpb.ValueInfoProto{Name: proto.String(n)})
	}
	return vs
}

func nd(op string, ins, outs []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{OpType: proto.String(op), Input: ins, Output: outs, Attribute: attrs}
}

func weight(name string, dims ...int64) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Dims: dims,
		DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(),
		ExternalData: []*onnxpb.StringStringEntryProto{{Key: proto.String("location"), Value: proto.String("absent.bin")}}}
}

func graphAttr(name string, g *onnxpb.GraphProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_GRAPH.Enum(), G: g}
}

// writeModel writes a model of graph g (opset 17 plus example.com) and
// returns its path.
func writeModel(t *testing.T, g *onnxpb.GraphProto) string {
	t.Helper()
	m := &onnxpb.ModelProto{IrVersion: proto.Int64(8), Graph: g, OpsetImport: []*onnxpb.OperatorSetIdProto{
		{Domain: proto.String(""), Version: proto.Int64(17)}, {Domain: proto.String("example.com"), Version: proto.Int64(1)}}}
	data, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestInspectSmall checks every figure of a model small enough to count
// by hand, with an op type opplace does not know.
func TestInspectSmall(t *testing.T) {
	mystery := nd("Mystery", []string{"z"}, []string{"m"})
	mystery.Domain = proto.String("example.com")
	path := writeModel(t, &onnxpb.GraphProto{Name: proto.String("small"),
		Input:       []*onnxpb.ValueInfoProto{vi("x", onnxpb.TensorProto_FLOAT, 2, 3)},
		Initializer: []*onnxpb.TensorProto{weight("w", 3, 4), weight("b", 4)},
		Node: []*onnxpb.NodeProto{
			nd("MatMul", []string{"x", "w"}, []string{"y"}),
			nd("Add", []string{"y", "b"}, []string{"z"}),
			nd("MatMul", []string{"x", "w"}, []string{"y2"}), // w shared
			mystery,
			nd("Relu", []string{"m"}, []string{"r"}),
		},
		Output: out("z", "y2", "r"),
	})
	r, stderr := inspect(t, path)
	type opWant struct {
		name   string
		shape  []int64
		macs   int64
		params int64
	}
	want := []opWant{{"MatMul_0", []int64{2, 4}, 24, 12}, {"Add_1", []int64{2, 4}, 0, 4},
		{"MatMul_2", []int64{2, 4}, 24, 12}, {"Mystery_3", nil, 0, 0}, {"Relu_4", nil, 0, 0}}
	var got []opWant
	for _, op := range r.Ops {
		got = append(got, opWant{op.Name, op.Outputs[0].Shape, op.MACs, op.Params})
	}
	if !slices.EqualFunc(got, want, func(a, b opWant) bool {
		return a.name == b.name && slices.Equal(a.shape, b.shape) && (a.shape == nil) == (b.shape == nil) &&
			a.macs == b.macs && a.params == b.params
	}) {
		t.Errorf("ops %v, want %v", got, want)
	}
	// w (12) and b (4) once each; three 2×4 float32 outputs are known.
	if tt := r.Totals; tt.Params != 16 || tt.ParamBytes != 64 || tt.MACs != 48 || tt.ActivationBytes != 3*8*4 || tt.Ops != 5 {
		t.Errorf("totals %+v", tt)
	}
	if !slices.Equal(r.UnknownShapes, []string{"Mystery_3", "Relu_4"}) || !slices.Equal(r.UnknownOps, []string{"example.com:Mystery"}) {
		t.Errorf("unknown shapes %v, unknown ops %v", r.UnknownShapes, r.UnknownOps)
	}
	if !strings.Contains(stderr, "warning: unknown operator Mystery") {
		t.Errorf("stderr %q", stderr)
	}

	code, table, _ := invoke(t, "inspect", path)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, line := range []string{
		"MatMul_0   MatMul               2x4      24        12\n",
		"Mystery_3  example.com:Mystery  ?        0 (est.)  0\n",
		"params       16 (64 B)",
		"unknown shapes: 2 ops (Mystery_3, Relu_4); unknown op types: 1 type (example.com:Mystery)",
	} {
		if !strings.Contains(table, line) {
			t.Errorf("table lacks %q:\n%s", line, table)
		}
	}
	_, summary, _ := invoke(t, "inspect", path, "--summary")
	if strings.Contains(summary, "MatMul_0") || !strings.Contains(summary, "unknown shapes: 2 ops") {
		t.Errorf("--summary output:\n%s", summary)
	}
}

// TestInspectControlFlowFlags drives --loop-trips and --if-branch through
// the CLI: a Loop whose trip count is a graph input (its body one
// 4×8·8×8 MatMul, 256 MACs) and an If whose condition is a graph input
// (then: that MatMul, 4×8; else: a Transpose, 8×4).
func TestInspectControlFlowFlags(t *testing.T) {
	const mm = 4 * 8 * 8
	body := &onnxpb.GraphProto{Name: proto.String("body"),
		Input: []*onnxpb.ValueInfoProto{vi("i", onnxpb.TensorProto_INT64), vi("c", onnxpb.TensorProto_BOOL), vi("acc", onnxpb.TensorProto_FLOAT)},
		Node: []*onnxpb.NodeProto{
			nd("Identity", []string{"c"}, []string{"c2"}),
			nd("MatMul", []string{"acc", "w"}, []string{"acc2"}),
		},
		Output: out("c2", "acc2", "acc2")}
	then := &onnxpb.GraphProto{Name: proto.String("then"), Node: []*onnxpb.NodeProto{nd("MatMul", []string{"x", "w"}, []string{"t"})}, Output: out("t")}
	els := &onnxpb.GraphProto{Name: proto.String("else"), Node: []*onnxpb.NodeProto{nd("Transpose", []string{"x"}, []string{"e"})}, Output: out("e")}
	path := writeModel(t, &onnxpb.GraphProto{Name: proto.String("cf"),
		Input: []*onnxpb.ValueInfoProto{vi("x", onnxpb.TensorProto_FLOAT, 4, 8), vi("trips", onnxpb.TensorProto_INT64),
			vi("go", onnxpb.TensorProto_BOOL), vi("cond", onnxpb.TensorProto_BOOL)},
		Initializer: []*onnxpb.TensorProto{weight("w", 8, 8)},
		Node: []*onnxpb.NodeProto{
			nd("Loop", []string{"trips", "go", "x"}, []string{"final", "stacked"}, graphAttr("body", body)),
			nd("If", []string{"cond"}, []string{"y"}, graphAttr("then_branch", then), graphAttr("else_branch", els)),
		},
		Output: out("final", "stacked", "y"),
	})
	cases := []struct {
		name     string
		flags    []string
		stacked  []int64 // nil: unknown
		loopMACs int64
		y        []int64
		ifMACs   int64
		warnings []string
	}{
		{"defaults", nil, nil, mm, []int64{4, 8}, mm, []string{
			`1 If node(s) have a condition that is not a constant (first: "If_1"): shaped and costed as the branch with more FLOPs (--if-branch max); choose with --if-branch then|else|max`,
			`1 Loop node(s) have no constant trip count (first: "Loop_0"): one iteration counted (cost estimated) and scan outputs left unshaped; set the count with --loop-trips N`}},
		{"trips and else", []string{"--loop-trips", "12", "--if-branch", "else"}, []int64{12, 4, 8}, 12 * mm, []int64{8, 4}, 0, []string{
			`1 If node(s) have a condition that is not a constant (first: "If_1"): shaped and costed as the else branch (--if-branch else); choose with --if-branch then|else|max`,
			`1 Loop node(s) have no constant trip count (first: "Loop_0"): counted as 12 iterations (--loop-trips 12)`}},
		{"then", []string{"--loop-trips", "2", "--if-branch", "then"}, []int64{2, 4, 8}, 2 * mm, []int64{4, 8}, mm, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, stderr := inspect(t, append([]string{path}, tc.flags...)...)
			loop, ifOp := r.Ops[0], r.Ops[1]
			if s := loop.Outputs[1].Shape; !slices.Equal(s, tc.stacked) || (s == nil) != (tc.stacked == nil) || loop.MACs != tc.loopMACs {
				t.Errorf("Loop: stacked %v, %d MACs; want %v, %d", s, loop.MACs, tc.stacked, tc.loopMACs)
			}
			if s := ifOp.Outputs[0].Shape; !slices.Equal(s, tc.y) || ifOp.MACs != tc.ifMACs {
				t.Errorf("If: y %v, %d MACs; want %v, %d", s, ifOp.MACs, tc.y, tc.ifMACs)
			}
			if tc.warnings != nil && !slices.Equal(r.Warnings, tc.warnings) {
				t.Errorf("warnings %q, want %q", r.Warnings, tc.warnings)
			}
			if len(r.Warnings) != 2 || strings.Count(stderr, "warning: ") != 2 {
				t.Errorf("want two warnings, one per control-flow op, also on stderr: %q", stderr)
			}
		})
	}
}

package onnx

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

const boolType = int32(onnxpb.TensorProto_BOOL)

func boolConst(name string, v bool) *onnxpb.NodeProto {
	x := int32(0)
	if v {
		x = 1
	}
	return &onnxpb.NodeProto{OpType: proto.String("Constant"), Output: strs(name), Attribute: []*onnxpb.AttributeProto{
		aTensor("value", &onnxpb.TensorProto{DataType: proto.Int32(boolType), Int32Data: []int32{x}})}}
}

// ifModel is x (4×8) → If(cond) with a MatMul then-branch (4×8, 256 MACs)
// and a Transpose else-branch (8×4, free). cond is a graph input, or a
// Constant when constCond is "true" or "false".
func ifModel(constCond string) *modelBuilder {
	then := &onnxpb.GraphProto{Name: proto.String("then"),
		Node:   []*onnxpb.NodeProto{{OpType: proto.String("MatMul"), Input: strs("x", "w"), Output: strs("t")}},
		Output: []*onnxpb.ValueInfoProto{{Name: proto.String("t")}}}
	els := &onnxpb.GraphProto{Name: proto.String("else"),
		Node:   []*onnxpb.NodeProto{{OpType: proto.String("Transpose"), Input: strs("x"), Output: strs("e")}},
		Output: []*onnxpb.ValueInfoProto{{Name: proto.String("e")}}}
	b := newModel(17).input("x", f32, 4, 8).weight("w", 8, 8)
	if constCond == "" {
		b.input("cond", boolType)
	} else {
		b.m.Graph.Node = append(b.m.Graph.Node, boolConst("cond", constCond == "true"))
	}
	return b.node("If", strs("cond"), strs("y"), aGraph("then_branch", then), aGraph("else_branch", els)).output("y")
}

// loopModel is a Loop over a 4×8 accumulator whose body costs one 4×8·8×8
// MatMul (256 MACs) and emits a 4×8 scan output per iteration. trip is
// the constant M, or -1 for M read from a graph input.
func loopModel(trip int64) *modelBuilder {
	body := &onnxpb.GraphProto{Name: proto.String("body"),
		Input: []*onnxpb.ValueInfoProto{valueInfo("i", i64), valueInfo("c", boolType), valueInfo("acc", f32)},
		Node: []*onnxpb.NodeProto{
			{OpType: proto.String("Identity"), Input: strs("c"), Output: strs("c2")},
			{OpType: proto.String("MatMul"), Input: strs("acc", "w"), Output: strs("acc2")},
			{OpType: proto.String("Relu"), Input: strs("acc2"), Output: strs("scan")},
		},
		Output: []*onnxpb.ValueInfoProto{{Name: proto.String("c2")}, {Name: proto.String("acc2")}, {Name: proto.String("scan")}}}
	b := newModel(17).input("x", f32, 4, 8).weight("w", 8, 8)
	if trip < 0 {
		b.input("trip", i64)
	} else {
		b.ints("trip", nil, trip)
	}
	b.m.Graph.Node = append(b.m.Graph.Node, boolConst("true", true))
	return b.node("Loop", strs("trip", "true", "x"), strs("final", "stacked"), aGraph("body", body)).
		output("final").output("stacked")
}

func TestControlFlowOptions(t *testing.T) {
	const mm = 4 * 8 * 8
	cases := []struct {
		name      string
		model     *modelBuilder
		opts      Options
		op        string // the control-flow op checked
		shapes    map[string]string
		macs      int64
		estimated bool
		warning   string // a substring of the one warning; "" for none
	}{
		{name: "if default max", model: ifModel(""), op: "If", shapes: map[string]string{"y": "4x8"}, macs: mm,
			warning: `1 If node(s) have a condition that is not a constant (first: "If_0"): shaped and costed as the branch with more FLOPs (Options.IfBranch = "max"); choose with Options.IfBranch = "then"|"else"|"max"`},
		{name: "if max explicit", model: ifModel(""), opts: Options{IfBranch: IfMax}, op: "If", shapes: map[string]string{"y": "4x8"}, macs: mm,
			warning: `Options.IfBranch = "max"`},
		{name: "if then", model: ifModel(""), opts: Options{IfBranch: IfThen}, op: "If", shapes: map[string]string{"y": "4x8"}, macs: mm,
			warning: `the then branch (Options.IfBranch = "then")`},
		{name: "if else", model: ifModel(""), opts: Options{IfBranch: IfElse}, op: "If", shapes: map[string]string{"y": "8x4"}, macs: 0,
			warning: `the else branch (Options.IfBranch = "else")`},
		{name: "if constant false beats flag", model: ifModel("false"), opts: Options{IfBranch: IfThen}, op: "If",
			shapes: map[string]string{"y": "8x4"}, macs: 0,
			warning: `Options.IfBranch = "then": the model has no If whose condition is not a constant`},
		{name: "if constant true", model: ifModel("true"), op: "If", shapes: map[string]string{"y": "4x8"}, macs: mm},
		{name: "loop constant", model: loopModel(5), op: "Loop", shapes: map[string]string{"final": "4x8", "stacked": "5x4x8"}, macs: 5 * mm},
		{name: "loop constant ignores flag", model: loopModel(5), opts: Options{LoopTrips: 3}, op: "Loop",
			shapes: map[string]string{"stacked": "5x4x8"}, macs: 5 * mm,
			warning: "Options.LoopTrips = 3: the model has no Loop without a constant trip count"},
		{name: "loop dynamic default", model: loopModel(-1), op: "Loop", shapes: map[string]string{"final": "4x8", "stacked": "?"},
			macs: mm, estimated: true,
			warning: `1 Loop node(s) have no constant trip count (first: "Loop_1"): one iteration counted (cost estimated) and scan outputs left unshaped; set the count with Options.LoopTrips = N`},
		{name: "loop dynamic flag", model: loopModel(-1), opts: Options{LoopTrips: 7}, op: "Loop",
			shapes: map[string]string{"final": "4x8", "stacked": "7x4x8"}, macs: 7 * mm,
			warning: "counted as 7 iterations (Options.LoopTrips = 7)"},
		{name: "loop while sentinel", model: loopModel(math.MaxInt64), opts: Options{LoopTrips: 3}, op: "Loop",
			shapes: map[string]string{"stacked": "3x4x8"}, macs: 3 * mm, warning: "counted as 3 iterations"},
		{name: "loop trip count past 2^31", model: loopModel(3_000_000_000), op: "Loop", shapes: map[string]string{"final": "4x8", "stacked": "?"},
			macs: mm, estimated: true,
			warning: `1 Loop node(s) have a constant trip count too large to plan for (first: "Loop_1", trip count M = 3000000000, at least 2^31-1: a while loop's run-until-the-condition-fails sentinel, not a count): one iteration counted`},
		{name: "loop zero trips", model: loopModel(0), op: "Loop", shapes: map[string]string{"stacked": "0x4x8"}, macs: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode(tc.model.bytes(t), "cf.onnx", tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			g := m.Graph
			for name, want := range tc.shapes {
				id, _ := g.TensorByName(name)
				if s := g.Tensor(id).ShapeString(); s != want {
					t.Errorf("%s = %s, want %s", name, s, want)
				}
			}
			i := slices.IndexFunc(g.Ops, func(o graph.Op) bool { return o.Type == tc.op })
			w := g.Ops[i].Work
			if w.MACs != tc.macs || w.Estimated != tc.estimated {
				t.Errorf("%s work = %+v, want %d MACs, estimated %v", tc.op, w, tc.macs, tc.estimated)
			}
			var got []string
			for _, s := range m.Warnings {
				if !strings.Contains(s, "unknown shape") {
					got = append(got, s)
				}
			}
			switch {
			case tc.warning == "" && len(got) > 0:
				t.Errorf("warnings %q, want none", got)
			case tc.warning != "" && (len(got) != 1 || !strings.Contains(got[0], tc.warning)):
				t.Errorf("warnings %q, want one containing %q", got, tc.warning)
			}
		})
	}
}

func TestControlFlowBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{LoopTrips: -1}, "the loop trip count -1 must be positive"},
		{Options{IfBranch: "both"}, `the If branch "both" is not then, else or max`},
	} {
		_, err := Decode(loopModel(5).bytes(t), "cf.onnx", tc.opts)
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want an *InputError containing %q", tc.opts, err, tc.want)
		}
	}
}

// sileroIf is a miniature of Silero VAD v5's sample-rate dispatch: x is a
// 1×4×2 signal and sr a scalar graph input; the outer If_0 branches on
// sr == 16000, its then branch ends in a decoder Squeeze of the last
// axis (size 2 for these inputs, so it cannot be the branch taken), and
// its else branch holds an inner If_1 on sr == 8000 whose else branch
// fails the same way. innerThenFails makes the inner then branch fail
// too, so no branch of If_0 can be shaped.
func sileroIf(innerThenFails bool) *modelBuilder {
	squeeze := func(name, out string) *onnxpb.GraphProto {
		return &onnxpb.GraphProto{Name: proto.String(name),
			Initializer: []*onnxpb.TensorProto{intTensor(name+"_axes", []int64{1}, -1)},
			Node: []*onnxpb.NodeProto{
				{OpType: proto.String("MatMul"), Name: proto.String(name + "/decoder/MatMul"), Input: strs("x", "w"), Output: strs(name + "_mm")},
				{OpType: proto.String("Squeeze"), Name: proto.String(name + "/decoder/Squeeze"), Input: strs(name+"_mm", name+"_axes"), Output: strs(out)},
			},
			Output: []*onnxpb.ValueInfoProto{{Name: proto.String(out)}}}
	}
	reduce := &onnxpb.GraphProto{Name: proto.String("inner_then"),
		Node: []*onnxpb.NodeProto{
			{OpType: proto.String("Relu"), Name: proto.String("inner_then/Relu"), Input: strs("x"), Output: strs("r")},
			{OpType: proto.String("ReduceSum"), Name: proto.String("inner_then/ReduceSum"), Input: strs("r"), Output: strs("rs"),
				Attribute: []*onnxpb.AttributeProto{aInt("keepdims", 0)}},
		},
		Output: []*onnxpb.ValueInfoProto{{Name: proto.String("rs")}}}
	innerThen := reduce
	if innerThenFails {
		innerThen = squeeze("inner_then", "rs")
	}
	inner := &onnxpb.GraphProto{Name: proto.String("outer_else"),
		Node: []*onnxpb.NodeProto{
			{OpType: proto.String("Equal"), Input: strs("sr", "c8000"), Output: strs("is8k")},
			{OpType: proto.String("If"), Name: proto.String("If_1"), Input: strs("is8k"), Output: strs("e"),
				Attribute: []*onnxpb.AttributeProto{aGraph("then_branch", innerThen), aGraph("else_branch", squeeze("inner_else", "ie"))}},
		},
		Output: []*onnxpb.ValueInfoProto{{Name: proto.String("e")}}}
	b := newModel(16).input("x", f32, 1, 4, 2).input("sr", i64).weight("w", 2, 2).
		ints("c16000", nil, 16000).ints("c8000", nil, 8000)
	b.node("Equal", strs("sr", "c16000"), strs("is16k"))
	b.node("If", strs("is16k"), strs("y"), aGraph("then_branch", squeeze("outer_then", "t")), aGraph("else_branch", inner))
	b.m.Graph.Node[len(b.m.Graph.Node)-1].Name = proto.String("If_0")
	return b.output("y")
}

// TestIfUnshapeableBranch checks that an If whose condition is not a
// constant takes the branch that can be shaped when the other cannot,
// with a warning naming the node, the branch dropped and why, whatever
// IfBranch asks; and that it fails, naming both errors, only when no
// branch can be shaped.
func TestIfUnshapeableBranch(t *testing.T) {
	cases := []struct {
		name     string
		model    *modelBuilder
		opts     Options
		y        string
		warnings []string
		err      []string
	}{
		{name: "nested, default", model: sileroIf(false), y: "scalar", warnings: []string{
			`If node "If_0": the then branch cannot be shaped for these inputs (node "outer_then/decoder/Squeeze" (Squeeze): cannot squeeze axis -1 of size 2), so it cannot be the branch taken; shaped and costed as the else branch`,
			`If node "If_1": the else branch cannot be shaped for these inputs (node "inner_else/decoder/Squeeze" (Squeeze)`,
		}},
		{name: "option names the dropped branch", model: sileroIf(false), opts: Options{IfBranch: IfThen}, y: "scalar",
			warnings: []string{`If node "If_0": the then branch cannot be shaped`}},
		{name: "no branch", model: sileroIf(true), err: []string{
			`node "If_0" (If): neither branch can be shaped for these inputs: then branch: subgraph "then_branch": node "outer_then/decoder/Squeeze"`,
			`else branch: subgraph "else_branch": node "If_1" (If): neither branch can be shaped`,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode(tc.model.bytes(t), "silero.onnx", tc.opts)
			if tc.err != nil {
				var ie *InputError
				if !errors.As(err, &ie) {
					t.Fatalf("error %v, want an *InputError", err)
				}
				for _, want := range tc.err {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q lacks %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			id, _ := m.Graph.TensorByName("y")
			if s := m.Graph.Tensor(id).ShapeString(); s != tc.y {
				t.Errorf("y = %s, want %s", s, tc.y)
			}
			for _, want := range tc.warnings {
				if !slices.ContainsFunc(m.Warnings, func(w string) bool { return strings.Contains(w, want) }) {
					t.Errorf("warnings %q lack %q", m.Warnings, want)
				}
			}
			for _, w := range m.Warnings {
				if strings.Contains(w, "Options.IfBranch") {
					t.Errorf("warning %q: the branch was not chosen by the option", w)
				}
			}
		})
	}
}

// TestIfConstantDeadBranch checks that an If whose condition folds is
// not failed by the branch it never takes.
func TestIfConstantDeadBranch(t *testing.T) {
	b := sileroIf(false)
	// Replace sr by the constant 8000: If_0 takes else, If_1 then.
	b.m.Graph.Input = b.m.Graph.Input[:1]
	b.ints("sr", nil, 8000)
	m, err := Decode(b.bytes(t), "silero.onnx", Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range m.Warnings {
		if strings.Contains(w, "If") {
			t.Errorf("warning %q for Ifs with constant conditions", w)
		}
	}
}

// TestLoopNegativeTrips: a constant M below zero runs no iteration (a
// runtime loops while the iteration number is below M); the warning
// names the Loop and M rather than calling M not a constant.
func TestLoopNegativeTrips(t *testing.T) {
	b := loopModel(5)
	for _, in := range b.m.Graph.Initializer {
		if in.GetName() == "trip" {
			in.Int64Data = []int64{-5}
		}
	}
	m, err := Decode(b.bytes(t), "cf.onnx", Options{})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := m.Graph.TensorByName("stacked")
	if s := m.Graph.Tensor(id).ShapeString(); s != "0x4x8" {
		t.Errorf("stacked = %s, want 0x4x8", s)
	}
	want := `Loop node "Loop_1": trip count M = -5 is negative, so the loop runs no iteration`
	if !slices.ContainsFunc(m.Warnings, func(w string) bool { return strings.Contains(w, want) }) {
		t.Errorf("warnings %q, want one containing %q", m.Warnings, want)
	}
}

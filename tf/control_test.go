package tf

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/internal/importopt"
)

// Builders for TensorFlow 1 control flow, named as tf.while_loop and
// tf.cond name their nodes.

// after makes a node text depend on control inputs (how TF1 keeps a loop
// body's constants in its frame).
func after(node string, deps ...string) string {
	var b strings.Builder
	for _, d := range deps {
		fmt.Fprintf(&b, "input: %q ", "^"+d)
	}
	return strings.Replace(node, "node { ", "node { "+b.String(), 1)
}

func enter(name, x, frame string) string {
	return nd(name, "Enter", in(x), aS("frame_name", frame), aB("is_constant"))
}

// counter is the loop variable p+"i" of frame p+"while_context": it starts
// at constant init, steps by step and is compared with limit (a tensor of
// the enclosing frame, brought in by an Enter) with cmp. It defines
// p+"Identity" (the counter in the body) and p+"LoopCond".
func counter(p, init, limit, cmp string, step int64) string {
	f := p + "while_context"
	return ci(p+"init", nil, mustInt(init)) +
		nd(p+"Enter", "Enter", in(p+"init"), aS("frame_name", f)) +
		nd(p+"Merge", "Merge", in(p+"Enter", p+"NextIteration")) +
		enter(p+"limit", limit, f) +
		nd(p+"Less", cmp, operands(cmp, p+"Merge", p+"limit")) +
		nd(p+"LoopCond", "LoopCond", in(p+"Less")) +
		nd(p+"Switch", "Switch", in(p+"Merge", p+"LoopCond")) +
		nd(p+"Identity", "Identity", in(p+"Switch:1")) +
		after(ci(p+"step", nil, step), p+"Identity") +
		nd(p+"add", "AddV2", in(p+"Identity", p+"step")) +
		nd(p+"NextIteration", "NextIteration", in(p+"add")) +
		nd(p+"Exit", "Exit", in(p+"Switch"))
}

// operands puts the counter first for Less and LessEqual (i < n), the
// limit first for Greater and GreaterEqual (n > i).
func operands(cmp, counter, limit string) []string {
	if strings.HasPrefix(cmp, "Greater") {
		return in(limit, counter)
	}
	return in(counter, limit)
}

func mustInt(s string) int64 {
	var v int64
	fmt.Sscan(s, &v)
	return v
}

// carried is loop variable name of frame p: it enters with x, is body(v)
// in the body (body names the NextIteration's input) and leaves as
// p+name+"/Exit".
func carried(p, name, x, next string) string {
	q := p + name + "/"
	return nd(q+"Enter", "Enter", in(x), aS("frame_name", p+"while_context")) +
		nd(q+"Merge", "Merge", in(q+"Enter", q+"NextIteration")) +
		nd(q+"Switch", "Switch", in(q+"Merge", p+"LoopCond")) +
		nd(q+"Identity", "Identity", in(q+"Switch:1")) +
		nd(q+"NextIteration", "NextIteration", in(next)) +
		nd(q+"Exit", "Exit", in(q+"Switch"))
}

// whileLoop is x (4×8) multiplied by w (8×8) five times in a while loop
// counting i from 0 while i < limit (a Const, or a Placeholder when
// limit < 0): 256 MACs per iteration.
func whileLoop(limit int64) string { return whileCmp(limit, "Less") }

func whileCmp(limit int64, cmp string) string {
	g := ph("x", 4, 8) + cf("w", 8, 8)
	if limit < 0 {
		g += `node { name: "n" op: "Placeholder" attr { key: "dtype" value { type: DT_INT32 } } attr { key: "shape" value { shape { } } } }
`
	} else {
		g += ci("n", nil, limit)
	}
	return g + counter("while/", "0", "n", cmp, 1) +
		carried("while/", "x", "x", "while/MatMul") +
		enter("while/w", "w", "while/while_context") +
		nd("while/MatMul", "MatMul", in("while/x/Identity", "while/w")) +
		nd("out", "Relu", in("while/x/Exit"))
}

// nestedLoops runs an inner loop of 4 iterations (j <= 3) inside an outer
// one of 3 (i < 3): 12 MatMuls of 256 MACs. The inner counter's initial
// value is a constant of the root frame, as TF.js writes it.
func nestedLoops() string {
	return ph("x", 4, 8) + cf("w", 8, 8) + ci("n", nil, 3) + ci("m", nil, 3) +
		counter("o/", "0", "n", "Less", 1) +
		carried("o/", "x", "x", "o/i/x/Exit") +
		enter("o/m", "m", "o/while_context") +
		counter("o/i/", "0", "o/m", "LessEqual", 1) +
		carried("o/i/", "x", "o/x/Identity", "o/i/MatMul") +
		enter("o/i/w", "o/w", "o/i/while_context") + enter("o/w", "w", "o/while_context") +
		nd("o/i/MatMul", "MatMul", in("o/i/x/Identity", "o/i/w")) +
		nd("out", "Relu", in("o/x/Exit"))
}

// mapFn is tf.map_fn(lambda r: matmul([r], w), elems) over a 6×3 elems
// with a 3×5 w, as TF 1 builds it: TensorArrays scattered and gathered
// around a loop bounded both by the element count and
// maximum_iterations. 15 MACs per element.
func mapFn() string {
	f := "map/while/while_context"
	return ph("elems", 6, 3) + cf("w", 3, 5) +
		nd("map/Shape", "Shape", in("elems")) +
		ci("c0", d(1), 0) + ci("c1", d(1), 1) +
		nd("map/n", "StridedSlice", in("map/Shape", "c0", "c1", "c1"), aI("shrink_axis_mask", 1)) +
		ci("zero", nil, 0) + ci("one", nil, 1) +
		nd("map/TensorArray", "TensorArrayV3", in("map/n"), aT("dtype", "DT_FLOAT")) +
		nd("map/TensorArray_1", "TensorArrayV3", in("map/n"), aT("dtype", "DT_FLOAT")) +
		nd("map/range", "Range", in("zero", "map/n", "one")) +
		nd("map/scatter", "TensorArrayScatterV3", in("map/TensorArray", "map/range", "elems", "map/TensorArray:1")) +
		// iteration counter (maximum_iterations) and element index
		counter("map/while/", "0", "map/n", "Less", 1) +
		ci("map/while/i/init", nil, 0) +
		nd("map/while/i/Enter", "Enter", in("map/while/i/init"), aS("frame_name", f)) +
		nd("map/while/i/Merge", "Merge", in("map/while/i/Enter", "map/while/i/NextIteration")) +
		nd("map/while/Less_1", "Less", in("map/while/i/Merge", "map/while/limit")) +
		nd("map/while/and", "LogicalAnd", in("map/while/Less", "map/while/Less_1")) +
		nd("map/while/i/Switch", "Switch", in("map/while/i/Merge", "map/while/LoopCond")) +
		nd("map/while/i/Identity", "Identity", in("map/while/i/Switch:1")) +
		nd("map/while/i/add", "AddV2", in("map/while/i/Identity", "map/while/step")) +
		nd("map/while/i/NextIteration", "NextIteration", in("map/while/i/add")) +
		nd("map/while/i/Exit", "Exit", in("map/while/i/Switch")) +
		carried("map/while/", "acc", "map/TensorArray_1:1", "map/while/write") +
		enter("map/while/ta_in", "map/TensorArray", f) + enter("map/while/flow_in", "map/scatter", f) +
		enter("map/while/ta_out", "map/TensorArray_1", f) + enter("map/while/w", "w", f) +
		nd("map/while/read", "TensorArrayReadV3", in("map/while/ta_in", "map/while/i/Identity", "map/while/flow_in"), aT("dtype", "DT_FLOAT")) +
		after(ci("map/while/axis", nil, 0), "map/while/Identity") +
		nd("map/while/row", "ExpandDims", in("map/while/read", "map/while/axis")) +
		nd("map/while/MatMul", "MatMul", in("map/while/row", "map/while/w")) +
		nd("map/while/write", "TensorArrayWriteV3", in("map/while/ta_out", "map/while/i/Identity", "map/while/MatMul", "map/while/acc/Identity")) +
		nd("map/size", "TensorArraySizeV3", in("map/TensorArray_1", "map/while/acc/Exit")) +
		nd("map/range_1", "Range", in("zero", "map/size", "one")) +
		nd("map/stack", "TensorArrayGatherV3", in("map/TensorArray_1", "map/range_1", "map/while/acc/Exit"), aT("dtype", "DT_FLOAT"))
}

// tfCond is tf.cond(p, lambda: matmul(x, w), lambda: relu(x)) on a 4×8 x:
// the true side costs 256 MACs, the false side 32 FLOPs. p is a
// Placeholder, or a Const when pred is "true" or "false".
func tfCond(pred string) string {
	g := ph("x", 4, 8) + cf("w", 8, 8)
	if pred == "" {
		g += `node { name: "p" op: "Placeholder" attr { key: "dtype" value { type: DT_BOOL } } attr { key: "shape" value { shape { } } } }
`
	} else {
		g += fmt.Sprintf(`node { name: "p" op: "Const" attr { key: "dtype" value { type: DT_BOOL } } attr { key: "value" value { tensor { dtype: DT_BOOL tensor_shape { } bool_val: %s } } } }
`, pred)
	}
	return g + nd("cond/Switch", "Switch", in("p", "p")) +
		nd("cond/switch_t", "Identity", in("cond/Switch:1")) +
		nd("cond/pred_id", "Identity", in("p")) +
		nd("cond/MatMul/Switch", "Switch", in("x", "cond/pred_id")) +
		nd("cond/MatMul", "MatMul", in("cond/MatMul/Switch:1", "w")) +
		nd("cond/Relu/Switch", "Switch", in("x", "cond/pred_id")) +
		nd("cond/Relu", "Relu", in("cond/Relu/Switch")) +
		nd("cond/Merge", "Merge", in("cond/Relu", "cond/MatMul")) +
		nd("y", "Identity", in("cond/Merge"))
}

func TestControlFlow(t *testing.T) {
	const mm = 4 * 8 * 8
	cases := []struct {
		name     string
		graph    string
		opts     importopt.Options
		macs     map[string]int64 // op → MACs
		flops    map[string]int64 // op → FLOPs
		shapes   map[string]string
		est      string // an op whose cost must be marked estimated
		warning  string
		noOutput []string // tensors that must not be graph outputs
	}{
		{name: "counted while loop", graph: whileLoop(5), macs: map[string]int64{"while/MatMul": 5 * mm},
			shapes:   map[string]string{"out": "4x8", "while/x/Exit": "4x8", "while/Merge:1": "scalar"},
			noOutput: []string{"while/NextIteration", "while/x/NextIteration", "while/Merge:1", "while/x/Switch"}},
		{name: "n > i", graph: whileCmp(5, "Greater"), macs: map[string]int64{"while/MatMul": 5 * mm}},
		{name: "n >= i", graph: whileCmp(5, "GreaterEqual"), macs: map[string]int64{"while/MatMul": 6 * mm}},
		{name: "zero trips", graph: whileLoop(0), macs: map[string]int64{"while/MatMul": 0}},
		{name: "dynamic trips", graph: whileLoop(-1), macs: map[string]int64{"while/MatMul": mm}, est: "while/MatMul",
			warning: `1 while loop(s) have no constant trip count (first: frame "while/while_context"): one iteration counted (cost estimated); set the count with Options.Import.LoopTrips = N`},
		{name: "trips at INT32_MAX", graph: whileLoop(math.MaxInt32), macs: map[string]int64{"while/MatMul": mm}, est: "while/MatMul",
			warning: `1 while loop(s) have a constant trip count too large to plan for (first: frame "while/while_context", 2147483647 trips, at least 2^31-1: a run-until-the-condition-fails sentinel, not a count): one iteration counted (cost estimated)`},
		{name: "dynamic trips, option", graph: whileLoop(-1), opts: importopt.Options{LoopTrips: 7}, macs: map[string]int64{"while/MatMul": 7 * mm},
			warning: "counted as 7 iterations (Options.Import.LoopTrips = 7)"},
		{name: "constant trips beat the option", graph: whileLoop(5), opts: importopt.Options{LoopTrips: 7}, macs: map[string]int64{"while/MatMul": 5 * mm}},
		{name: "nested loops", graph: nestedLoops(), macs: map[string]int64{"o/i/MatMul": 3 * 4 * mm},
			shapes: map[string]string{"out": "4x8"}},
		{name: "map_fn", graph: mapFn(), macs: map[string]int64{"map/while/MatMul": 6 * 15},
			shapes: map[string]string{"map/while/read": "3", "map/while/MatMul": "1x5", "map/stack": "6x1x5"}},
		{name: "cond default max", graph: tfCond(""), macs: map[string]int64{"cond/MatMul": mm}, flops: map[string]int64{"cond/Relu": 0},
			shapes:  map[string]string{"y": "4x8"},
			warning: `1 cond(s) have a predicate that is not a constant (first: "p"): costed as the branch with more FLOPs (Options.Import.IfBranch = "max"); choose with Options.Import.IfBranch = "then"|"else"|"max"`},
		{name: "cond else", graph: tfCond(""), opts: importopt.Options{IfBranch: importopt.IfElse},
			macs: map[string]int64{"cond/MatMul": 0}, flops: map[string]int64{"cond/Relu": 32}, warning: `the else branch (Options.Import.IfBranch = "else")`},
		{name: "cond constant false", graph: tfCond("false"), opts: importopt.Options{IfBranch: importopt.IfThen},
			macs: map[string]int64{"cond/MatMul": 0}, flops: map[string]int64{"cond/Relu": 32}},
		{name: "cond constant true", graph: tfCond("true"), macs: map[string]int64{"cond/MatMul": mm}, flops: map[string]int64{"cond/Relu": 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode([]byte(tc.graph), "cf.pbtxt", Options{Import: tc.opts})
			if err != nil {
				t.Fatal(err)
			}
			g := m.Graph
			work := func(name string) (int64, int64, bool) {
				id, ok := g.OpByName(name)
				if !ok {
					t.Fatalf("no op %q", name)
				}
				w := g.Op(id).Work
				return w.MACs, w.FLOPs, w.Estimated
			}
			for name, want := range tc.macs {
				if got, _, _ := work(name); got != want {
					t.Errorf("%s: %d MACs, want %d", name, got, want)
				}
			}
			for name, want := range tc.flops {
				if _, got, _ := work(name); got != want {
					t.Errorf("%s: %d FLOPs, want %d", name, got, want)
				}
			}
			if tc.est != "" {
				if _, _, est := work(tc.est); !est {
					t.Errorf("%s: cost not marked estimated", tc.est)
				}
			}
			for name, want := range tc.shapes {
				id, ok := g.TensorByName(name)
				if !ok {
					t.Fatalf("no tensor %q", name)
				}
				if got := g.Tensor(id).ShapeString(); got != want {
					t.Errorf("%s: shape %s, want %s", name, got, want)
				}
			}
			for _, name := range tc.noOutput {
				id, _ := g.TensorByName(name)
				if slices.Contains(g.Outputs, id) {
					t.Errorf("%s is a graph output", name)
				}
			}
			var flow []string
			for _, w := range m.Warnings {
				if strings.Contains(w, "loop") || strings.Contains(w, "cond") || strings.Contains(w, "unknown") {
					flow = append(flow, w)
				}
			}
			switch {
			case tc.warning == "" && len(flow) > 0:
				t.Errorf("warnings %q, want none", flow)
			case tc.warning != "" && (len(flow) != 1 || !strings.Contains(flow[0], tc.warning)):
				t.Errorf("warnings %q, want one containing %q", flow, tc.warning)
			}
		})
	}
}

// TestControlFlowErrors checks malformed control flow is an input error
// naming the node.
func TestControlFlowErrors(t *testing.T) {
	for _, tc := range []struct{ name, graph, want string }{
		{"exit without enter", ph("x", 2) + nd("e", "Exit", in("x")), `node "e" (Exit) leaves a while loop it is not in`},
		{"back edge not into a Merge", ph("x", 2) + nd("a", "Add", in("x", "n")) + nd("n", "NextIteration", in("a")),
			`the graph has a cycle through node "a" (Add) (a while loop's only cycle is NextIteration feeding its Merge)`},
	} {
		_, err := Decode([]byte(tc.graph), "cf.pbtxt", Options{})
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want an *InputError containing %q", tc.name, err, tc.want)
		}
	}
}

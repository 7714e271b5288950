package tf

import (
	"fmt"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

func init() {
	for k, ops := range map[int64][]string{
		0: {"Identity", "StopGradient", "Snapshot", "PreventGradient", "CheckNumerics", "ZerosLike", "OnesLike",
			"DebugIdentity", "Print", "PrintV2"},
		1: {"Relu", "Relu6", "LeakyRelu", "Abs", "Neg", "Square", "Floor", "Ceil", "Round", "Rint", "Sign",
			"Reciprocal", "Inv", "LogicalNot", "Cumsum", "Cumprod", "Invert"},
		4: {"Sigmoid", "Tanh", "Exp", "Expm1", "Log", "Log1p", "Sqrt", "Rsqrt", "Softplus", "Softsign", "Erf",
			"Erfc", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
			"Elu", "Selu", "Gelu", "Swish", "Mish", "HardSwish", "Digamma", "Lgamma"},
		5: {"Softmax", "LogSoftmax"},
	} {
		register(&opDef{shape: inferSame(graph.Undefined), cost: perOut(k), same: true}, ops...)
	}
	register(&opDef{shape: inferSame(graph.Bool), cost: perOut(1), same: true}, "IsNan", "IsInf", "IsFinite")
	register(&opDef{shape: inferCast, cost: perOut(1), same: true}, "Cast")
	register(&opDef{shape: inferBinary(false), cost: perOut(1), bcast: true},
		"Add", "AddV2", "Sub", "Mul", "RealDiv", "Div", "DivNoNan", "FloorDiv", "FloorMod", "TruncateDiv",
		"TruncateMod", "Mod", "Maximum", "Minimum", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Prelu", "MulNoNan")
	register(&opDef{shape: inferBinary(false), cost: perOut(2), bcast: true}, "SquaredDifference", "BiasAddGrad")
	register(&opDef{shape: inferBinary(false), cost: perOut(4), bcast: true}, "Pow", "Atan2", "Xdivy", "Xlogy")
	register(&opDef{shape: inferBinary(true), cost: perOut(1), bcast: true},
		"Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual", "LogicalAnd", "LogicalOr")
	register(&opDef{shape: inferBinary(false), cost: func(n *node) {
		n.work.FLOPs = shapes.MulSat(int64(max(len(n.in)-1, 1)), n.outElems(0))
	}, bcast: true}, "AddN", "AccumulateNV2")
	register(&opDef{shape: inferSelect, cost: perOut(1), bcast: true}, "Select", "SelectV2")
	register(&opDef{shape: inferBinary(false), cost: perOut(2), bcast: true}, "ClipByValue")
	register(&opDef{shape: inferBiasAdd, cost: perOut(1), same: true}, "BiasAdd", "BiasAddV1")
}

// inferSame gives output 0 input 0's shape (and dtype, unless out says
// otherwise), keeping known contents for pure copies.
func inferSame(out graph.DType) func(n *node) error {
	return func(n *node) error {
		x := n.input(0)
		if x == nil {
			return fmt.Errorf("input 0 is missing")
		}
		dt := out
		if dt == graph.Undefined {
			dt = n.dt()
		}
		v := &value{dtype: dt, shape: shapes.Clone(x.shape), ranked: x.ranked}
		if x.hasInts() && (n.op == "Identity" || n.op == "StopGradient" || n.op == "Snapshot") {
			v.ints = shapes.Clone(x.ints)
		}
		if x.hasInts() && n.op == "Neg" {
			v.ints = make([]int64, len(x.ints))
			for i, a := range x.ints {
				v.ints[i] = -a
			}
		}
		return n.setValue(0, v)
	}
}

func inferCast(n *node) error {
	x := n.input(0)
	if x == nil {
		return fmt.Errorf("input 0 is missing")
	}
	dt := n.attrType("DstT")
	if dt == graph.Undefined {
		dt = x.dtype
	}
	v := &value{dtype: dt, shape: shapes.Clone(x.shape), ranked: x.ranked}
	if x.hasInts() && isIntType(dt) {
		v.ints = shapes.Clone(x.ints)
	}
	return n.setValue(0, v)
}

func inferBiasAdd(n *node) error {
	x := n.input(0)
	if x == nil || n.input(1) == nil {
		return fmt.Errorf("BiasAdd needs a value and a bias")
	}
	if b := n.input(1); x.known() && b.known() {
		axis := x.rank() - 1
		if n.channelsFirst() {
			axis = 1
		}
		if b.rank() != 1 || axis < 0 || x.shape[axis] != b.shape[0] {
			return fmt.Errorf("bias of shape %s does not match the channels of %s", b, x)
		}
	}
	return n.setValue(0, &value{dtype: n.dt(), shape: shapes.Clone(x.shape), ranked: x.ranked})
}

// broadcastAll merges ranked shapes; unranked inputs make it unknown.
func broadcastAll(vals []*value) (*value, error) {
	var out []int64
	for i, v := range vals {
		if v == nil || !v.ranked {
			return nil, nil
		}
		if i == 0 {
			out = shapes.Clone(v.shape)
			continue
		}
		var err error
		if out, err = broadcast(out, v.shape); err != nil {
			return nil, err
		}
	}
	return &value{shape: out, ranked: true}, nil
}

func inferBinary(boolOut bool) func(n *node) error {
	return func(n *node) error {
		if len(n.in) < 2 && n.op != "AddN" && n.op != "AccumulateNV2" {
			return fmt.Errorf("needs two inputs, has %d", len(n.in))
		}
		v, err := broadcastAll(n.in)
		if err != nil || v == nil {
			return err
		}
		v.dtype = n.dt()
		if boolOut {
			v.dtype = graph.Bool
		}
		if len(n.in) == 2 {
			foldBinary(n.op, n.in[0], n.in[1], v)
		}
		return n.setValue(0, v)
	}
}

func inferSelect(n *node) error {
	if len(n.in) != 3 {
		return fmt.Errorf("needs three inputs, has %d", len(n.in))
	}
	in := n.in
	if n.op == "Select" && in[0].rank() == 1 && in[1].rank() > 1 {
		in = in[1:] // a vector condition picks rows
	}
	v, err := broadcastAll(in)
	if err != nil || v == nil {
		return err
	}
	v.dtype = n.input(1).dtype
	return n.setValue(0, v)
}

// foldBinary computes integer results for small known operands: the
// arithmetic of shape computations.
func foldBinary(op string, a, b, out *value) {
	if !a.hasInts() || !b.hasInts() || !out.known() || shapes.Prod(out.shape) > maxFold {
		return
	}
	n := shapes.Prod(out.shape)
	res := make([]int64, n)
	for i := int64(0); i < n; i++ {
		x := a.ints[shapes.BroadcastIndex(i, out.shape, a.shape)]
		y := b.ints[shapes.BroadcastIndex(i, out.shape, b.shape)]
		switch op {
		case "Add", "AddV2":
			res[i] = x + y
		case "Sub":
			res[i] = x - y
		case "Mul":
			res[i] = x * y
		case "FloorDiv", "Div", "RealDiv", "TruncateDiv":
			if y == 0 {
				return
			}
			q := x / y
			if (x%y != 0) && ((x < 0) != (y < 0)) && op == "FloorDiv" {
				q--
			}
			res[i] = q
		case "FloorMod", "Mod":
			if y == 0 {
				return
			}
			m := x % y
			if m != 0 && (m < 0) != (y < 0) {
				m += y
			}
			res[i] = m
		case "Maximum":
			res[i] = max(x, y)
		case "Minimum":
			res[i] = min(x, y)
		case "Equal":
			res[i] = boolInt(x == y)
		case "NotEqual":
			res[i] = boolInt(x != y)
		case "Less":
			res[i] = boolInt(x < y)
		case "LessEqual":
			res[i] = boolInt(x <= y)
		case "Greater":
			res[i] = boolInt(x > y)
		case "GreaterEqual":
			res[i] = boolInt(x >= y)
		default:
			return
		}
	}
	if isIntType(out.dtype) {
		out.ints = res
	}
}

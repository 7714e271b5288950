package onnx

import (
	"fmt"
	"math"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

// Elementwise ops. FLOP convention: one FLOP per output element for
// arithmetic and comparisons, four for transcendental functions (exp,
// log, tanh, erf, ...), none for Identity and pure data movement.

var cheapUnary = []string{"Relu", "Neg", "Abs", "Reciprocal", "Floor", "Ceil", "Round", "Sign",
	"LeakyRelu", "ThresholdedRelu", "HardSigmoid", "HardSwish", "Shrink", "Not", "BitwiseNot", "Clip",
	"Sqrt"}

var costlyUnary = []string{"Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sin", "Cos", "Tan", "Asin",
	"Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Softplus", "Softsign", "Elu", "Selu",
	"Mish", "Gelu", "Celu"}

func init() {
	register("", inferUnary(1), cheapUnary...)
	register("", inferUnary(4), costlyUnary...)
	register("", inferUnary(0), "Identity")
	register("", inferPredicate, "IsNaN", "IsInf")
	register("", inferBinary(false), "Add", "Sub", "Mul", "Div", "Pow", "Mod", "BitShift",
		"BitwiseAnd", "BitwiseOr", "BitwiseXor", "PRelu")
	register("", inferBinary(true), "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
		"And", "Or", "Xor")
	register("", inferVariadic, "Max", "Min", "Sum", "Mean")
	register("", inferWhere, "Where")
	register("", inferCast, "Cast", "CastLike")
	register("", inferDropout, "Dropout")
}

// unaryFold evaluates the value-preserving unary ops used in shape
// arithmetic.
var unaryFold = map[string]func(float64) float64{
	"Identity": func(x float64) float64 { return x },
	"Neg":      func(x float64) float64 { return -x },
	"Abs":      math.Abs,
	"Floor":    math.Floor,
	"Ceil":     math.Ceil,
	"Round":    math.RoundToEven,
	"Sqrt":     math.Sqrt,
	"Relu":     func(x float64) float64 { return math.Max(x, 0) },
	"Sign": func(x float64) float64 {
		switch {
		case x > 0:
			return 1
		case x < 0:
			return -1
		}
		return 0
	},
	"Not": func(x float64) float64 {
		if x == 0 {
			return 1
		}
		return 0
	},
	"Reciprocal": func(x float64) float64 { return 1 / x },
	"Exp":        math.Exp,
	"Log":        math.Log,
}

func inferUnary(cost int64) inferFunc {
	return func(n *node) error {
		x, err := n.need(0)
		if err != nil {
			return err
		}
		out := &value{dtype: x.dtype, shape: shapes.Clone(x.shape), known: true}
		if f, ok := unaryFold[n.op]; ok {
			if nums, ok := x.numbers(); ok {
				res := make([]float64, len(nums))
				for i, v := range nums {
					res[i] = f(v)
				}
				setNumbers(out, res)
			}
		}
		if err := n.setValue(0, out); err != nil {
			return err
		}
		n.flops(shapes.MulSat(cost, x.elems()))
		return nil
	}
}

// setNumbers stores computed contents in v's representation.
func setNumbers(v *value, nums []float64) {
	if isIntType(v.dtype) {
		ints := make([]int64, len(nums))
		for i, f := range nums {
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return
			}
			ints[i] = int64(f)
		}
		if v.dtype == graph.Bool {
			for i := range ints {
				if ints[i] != 0 {
					ints[i] = 1
				}
			}
		}
		v.ints = ints
		return
	}
	v.floats = nums
}

func inferPredicate(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	n.flops(x.elems())
	return n.set(0, graph.Bool, shapes.Clone(x.shape))
}

// binaryFold computes one element of a binary op on integers; ok is false
// for undefined results (division by zero).
func binaryInt(op string, a, b int64) (int64, bool) {
	switch op {
	case "Add":
		return a + b, true
	case "Sub":
		return a - b, true
	case "Mul":
		return a * b, true
	case "Div":
		if b == 0 {
			return 0, false
		}
		return a / b, true
	case "Mod":
		if b == 0 {
			return 0, false
		}
		m := a % b
		if m != 0 && (m < 0) != (b < 0) {
			m += b
		}
		return m, true
	case "Pow":
		if b < 0 || b > 62 {
			return 0, false
		}
		r := int64(1)
		for range b {
			r *= a
		}
		return r, true
	case "Max":
		return max(a, b), true
	case "Min":
		return min(a, b), true
	case "Sum":
		return a + b, true
	case "BitwiseAnd":
		return a & b, true
	case "BitwiseOr":
		return a | b, true
	case "BitwiseXor":
		return a ^ b, true
	}
	if r, ok := compare(op, float64(a), float64(b)); ok {
		return r, true
	}
	return 0, false
}

func binaryFloat(op string, a, b float64) (float64, bool) {
	switch op {
	case "Add", "Sum":
		return a + b, true
	case "Sub":
		return a - b, true
	case "Mul":
		return a * b, true
	case "Div":
		return a / b, true
	case "Pow":
		return math.Pow(a, b), true
	case "Mod":
		return math.Mod(a, b), true
	case "Max":
		return math.Max(a, b), true
	case "Min":
		return math.Min(a, b), true
	}
	if r, ok := compare(op, a, b); ok {
		return float64(r), true
	}
	return 0, false
}

func compare(op string, a, b float64) (int64, bool) {
	var r bool
	switch op {
	case "Equal":
		r = a == b
	case "Less":
		r = a < b
	case "Greater":
		r = a > b
	case "LessOrEqual":
		r = a <= b
	case "GreaterOrEqual":
		r = a >= b
	case "And":
		r = a != 0 && b != 0
	case "Or":
		r = a != 0 || b != 0
	case "Xor":
		r = (a != 0) != (b != 0)
	default:
		return 0, false
	}
	if r {
		return 1, true
	}
	return 0, true
}

// foldBinary evaluates op over the broadcast of a and b into out.
func foldBinary(op string, a, b, out *value) {
	if out.elems() > maxFold {
		return
	}
	n := out.elems()
	if a.hasInts() && b.hasInts() {
		res := make([]int64, n)
		for i := range n {
			r, ok := binaryInt(op, a.ints[shapes.BroadcastIndex(i, out.shape, a.shape)], b.ints[shapes.BroadcastIndex(i, out.shape, b.shape)])
			if !ok {
				return
			}
			res[i] = r
		}
		if isIntType(out.dtype) {
			out.ints = res
		} else {
			out.floats = make([]float64, n)
			for i, r := range res {
				out.floats[i] = float64(r)
			}
		}
		return
	}
	an, ok1 := a.numbers()
	bn, ok2 := b.numbers()
	if !ok1 || !ok2 {
		return
	}
	res := make([]float64, n)
	for i := range n {
		r, ok := binaryFloat(op, an[shapes.BroadcastIndex(i, out.shape, a.shape)], bn[shapes.BroadcastIndex(i, out.shape, b.shape)])
		if !ok {
			return
		}
		res[i] = r
	}
	setNumbers(out, res)
}

func inferBinary(boolOut bool) inferFunc {
	return func(n *node) error {
		a, err := n.need(0)
		if err != nil {
			return err
		}
		b, err := n.need(1)
		if err != nil {
			return err
		}
		shape, err := broadcast(a.shape, b.shape)
		if err != nil {
			return err
		}
		dt := a.dtype
		if boolOut {
			dt = graph.Bool
		}
		out := &value{dtype: dt, shape: shape, known: true}
		foldBinary(n.op, a, b, out)
		if err := n.setValue(0, out); err != nil {
			return err
		}
		cost := int64(1)
		if n.op == "Pow" {
			cost = 4
		}
		n.flops(shapes.MulSat(cost, out.elems()))
		return nil
	}
}

func inferVariadic(n *node) error {
	if len(n.in) == 0 {
		return fmt.Errorf("%s needs at least one input", n.op)
	}
	acc, err := n.need(0)
	if err != nil {
		return err
	}
	for i := 1; i < len(n.in); i++ {
		b, err := n.need(i)
		if err != nil {
			return err
		}
		shape, err := broadcast(acc.shape, b.shape)
		if err != nil {
			return err
		}
		next := &value{dtype: acc.dtype, shape: shape, known: true}
		op := n.op
		if op == "Mean" {
			op = "Sum"
		}
		foldBinary(op, acc, b, next)
		acc = next
	}
	if n.op == "Mean" && len(n.in) > 1 {
		acc.ints, acc.floats = nil, nil
	}
	out := &value{dtype: acc.dtype, shape: acc.shape, known: true, ints: acc.ints, floats: acc.floats}
	if err := n.setValue(0, out); err != nil {
		return err
	}
	n.flops(shapes.MulSat(int64(max(len(n.in)-1, 1)), out.elems()))
	return nil
}

func inferWhere(n *node) error {
	cond, err := n.need(0)
	if err != nil {
		return err
	}
	x, err := n.need(1)
	if err != nil {
		return err
	}
	y, err := n.need(2)
	if err != nil {
		return err
	}
	s, err := broadcast(cond.shape, x.shape)
	if err != nil {
		return err
	}
	if s, err = broadcast(s, y.shape); err != nil {
		return err
	}
	out := &value{dtype: x.dtype, shape: s, known: true}
	if shapes.Prod(s) <= maxFold && cond.hasInts() {
		xn, ok1 := x.numbers()
		yn, ok2 := y.numbers()
		if ok1 && ok2 {
			res := make([]float64, shapes.Prod(s))
			for i := range res {
				if cond.ints[shapes.BroadcastIndex(int64(i), s, cond.shape)] != 0 {
					res[i] = xn[shapes.BroadcastIndex(int64(i), s, x.shape)]
				} else {
					res[i] = yn[shapes.BroadcastIndex(int64(i), s, y.shape)]
				}
			}
			setNumbers(out, res)
		}
	}
	if err := n.setValue(0, out); err != nil {
		return err
	}
	n.flops(out.elems())
	return nil
}

func inferCast(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	var dt graph.DType
	if n.op == "CastLike" {
		t, err := n.need(1)
		if err != nil {
			return err
		}
		dt = t.dtype
	} else {
		if !n.attrs.Has("to") {
			return fmt.Errorf("Cast has no 'to' attribute")
		}
		dt = graph.DType(n.attrs.Int("to", 0))
	}
	out := &value{dtype: dt, shape: shapes.Clone(x.shape), known: true}
	if nums, ok := x.numbers(); ok && dt != graph.String {
		setNumbers(out, nums)
	}
	if err := n.setValue(0, out); err != nil {
		return err
	}
	n.flops(0)
	return nil
}

func inferDropout(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	if err := n.setValue(0, &value{dtype: x.dtype, shape: shapes.Clone(x.shape), known: true, ints: x.ints, floats: x.floats}); err != nil {
		return err
	}
	if err := n.set(1, graph.Bool, shapes.Clone(x.shape)); err != nil {
		return err
	}
	n.flops(x.elems())
	return nil
}

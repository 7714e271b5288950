package onnx

import (
	"fmt"
	"math"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

// Reductions cost one FLOP per input element (two for the squared and
// log-sum-exp forms). ReduceSum took its axes as an attribute before
// opset 13, the other reductions before opset 18.

func init() {
	for _, op := range []string{"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
		"ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"} {
		register("", inferReduce, op)
	}
	register("", inferArgReduce, "ArgMax", "ArgMin")
}

func inferReduce(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	since := int64(18)
	if n.op == "ReduceSum" {
		since = 13
	}
	axes, present, err := n.axesArg(since, 1)
	if err != nil {
		return err
	}
	keep := n.attrs.Int("keepdims", 1) != 0
	r := x.rank()
	red := make([]bool, r)
	if !present || len(axes) == 0 {
		if n.attrs.Int("noop_with_empty_axes", 0) != 0 && n.opset >= since {
			res := sameData(x, shapes.Clone(x.shape))
			return n.setValue(0, res)
		}
		for i := range red {
			red[i] = true
		}
	}
	for _, a := range axes {
		i, err := shapes.NormAxis(a, r)
		if err != nil {
			return err
		}
		red[i] = true
	}
	out := []int64{}
	for i, d := range x.shape {
		switch {
		case !red[i]:
			out = append(out, d)
		case keep:
			out = append(out, 1)
		}
	}
	res := &value{dtype: x.dtype, shape: out, known: true}
	if nums, ok := x.numbers(); ok {
		foldReduce(n.op, x, nums, red, res)
	}
	cost := int64(1)
	switch n.op {
	case "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp":
		cost = 2
	}
	n.flops(shapes.MulSat(cost, x.elems()))
	return n.setValue(0, res)
}

// foldReduce evaluates the exact reductions (sum, prod, min, max) used in
// shape arithmetic.
func foldReduce(op string, x *value, nums []float64, red []bool, res *value) {
	var init float64
	var f func(a, b float64) float64
	switch op {
	case "ReduceSum":
		f = func(a, b float64) float64 { return a + b }
	case "ReduceProd":
		init, f = 1, func(a, b float64) float64 { return a * b }
	case "ReduceMax":
		init, f = math.Inf(-1), math.Max
	case "ReduceMin":
		init, f = math.Inf(1), math.Min
	default:
		return
	}
	// Index of each input element in the reduced (keepdims) layout.
	kshape := shapes.Clone(x.shape)
	for i := range kshape {
		if red[i] {
			kshape[i] = 1
		}
	}
	acc := make([]float64, shapes.Prod(kshape))
	for i := range acc {
		acc[i] = init
	}
	ks := strides(kshape)
	for i, v := range nums {
		r, j := int64(i), int64(0)
		for d := len(x.shape) - 1; d >= 0; d-- {
			c := r % x.shape[d]
			r /= x.shape[d]
			if !red[d] {
				j += c * ks[d]
			}
		}
		acc[j] = f(acc[j], v)
	}
	setNumbers(res, acc)
}

func inferArgReduce(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	if x.rank() == 0 {
		return fmt.Errorf("%s of a scalar", n.op)
	}
	axis, err := shapes.NormAxis(n.attrs.Int("axis", 0), x.rank())
	if err != nil {
		return err
	}
	out := shapes.Clone(x.shape)
	if n.attrs.Int("keepdims", 1) != 0 {
		out[axis] = 1
	} else {
		out = append(out[:axis], out[axis+1:]...)
	}
	n.flops(x.elems())
	return n.set(0, graph.Int64, out)
}

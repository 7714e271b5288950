package tf

import (
	"fmt"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

func init() {
	register(&opDef{shape: inferReduce, cost: costPerInput}, "Mean", "Sum", "Max", "Min", "Prod", "All", "Any", "EuclideanNorm")
	register(&opDef{shape: inferArgMax, cost: costPerInput}, "ArgMax", "ArgMin")
	register(&opDef{shape: inferTopK, cost: func(n *node) {
		k := int64(1)
		if v, err := n.ints(1); err == nil {
			k = v[0]
		}
		n.work.FLOPs = shapes.MulSat(log2Ceil(k+1), n.in[0].elems())
	}}, "TopKV2")
}

// costPerInput: one FLOP per input element.
func costPerInput(n *node) { n.work.FLOPs = n.in[0].elems() }

func inferReduce(n *node) error {
	x := n.input(0)
	if x == nil || !x.ranked {
		return errPartial
	}
	keep := n.attrBool("keep_dims")
	r := len(x.shape)
	axes, err := n.ints(1)
	if err != nil {
		idx := n.input(1)
		switch {
		case keep:
			return n.setValue(0, partial(n.dt(), r))
		case idx != nil && idx.known() && idx.rank() == 0:
			return n.setValue(0, partial(n.dt(), r-1))
		case idx != nil && idx.known() && idx.rank() == 1 && idx.shape[0] <= int64(r):
			return n.setValue(0, partial(n.dt(), r-int(idx.shape[0])))
		}
		return errPartial
	}
	drop := make([]bool, r)
	for _, a := range axes {
		ax, err := shapes.NormAxis(a, r)
		if err != nil {
			return err
		}
		drop[ax] = true
	}
	var out []int64
	for i, d := range x.shape {
		switch {
		case !drop[i]:
			out = append(out, d)
		case keep:
			out = append(out, 1)
		}
	}
	if out == nil {
		out = []int64{}
	}
	v := &value{dtype: n.dt(), shape: out, ranked: true}
	// Fold reductions of small 1-D integer tensors (Prod of a Shape).
	if x.hasInts() && r == 1 && drop[0] {
		acc := x.ints[0]
		for _, e := range x.ints[1:] {
			switch n.op {
			case "Sum":
				acc += e
			case "Prod":
				acc *= e
			case "Max":
				acc = max(acc, e)
			case "Min":
				acc = min(acc, e)
			default:
				acc = 0
			}
		}
		if len(x.ints) > 0 && (n.op == "Sum" || n.op == "Prod" || n.op == "Max" || n.op == "Min") {
			v.ints = []int64{acc}
		}
	}
	return n.setValue(0, v)
}

func inferArgMax(n *node) error {
	x := n.input(0)
	if x == nil || !x.ranked {
		return errPartial
	}
	dt := n.attrType("output_type")
	if dt == graph.Undefined {
		dt = graph.Int64
	}
	r := len(x.shape)
	a, err := n.ints(1)
	if err != nil {
		return n.setValue(0, partial(dt, r-1))
	}
	ax, err := shapes.NormAxis(a[0], r)
	if err != nil {
		return err
	}
	out := append(shapes.Clone(x.shape[:ax]), x.shape[ax+1:]...)
	return n.setValue(0, &value{dtype: dt, shape: out, ranked: true})
}

func inferTopK(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	k, err := n.ints(1)
	if err != nil {
		return err
	}
	r := len(x.shape)
	if r == 0 || k[0] < 0 || k[0] > x.shape[r-1] {
		return fmt.Errorf("k=%d is out of range for %s", k[0], x)
	}
	out := shapes.Clone(x.shape)
	out[r-1] = k[0]
	if err := n.set(0, n.dt(), out); err != nil {
		return err
	}
	return n.set(1, graph.Int32, shapes.Clone(out))
}

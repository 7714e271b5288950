package onnx

import (
	"fmt"
	"slices"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

// Data-movement and indexing ops that keep or derive shapes simply.

func init() {
	register("", inferSameShape(0), "Trilu", "ReverseSequence", "Scatter", "ScatterElements",
		"ScatterND")
	register("", inferSameShape(1), "CumSum")
	register("", inferGatherElements, "GatherElements")
	register("", inferGatherND, "GatherND")
	register("", inferDepthToSpace, "DepthToSpace")
	register("", inferSpaceToDepth, "SpaceToDepth")
	register("", inferOneHot, "OneHot")
	register("", inferTopK, "TopK")
	register("", inferEyeLike, "EyeLike")
	register("", inferNonZero, "NonZero")
	register("", inferCompress, "Compress")
	register("", inferDataDependent, "Unique", "NonMaxSuppression")
	register("", inferRandom, "RandomNormal", "RandomUniform")
	register("", inferRandomLike, "RandomNormalLike", "RandomUniformLike", "Bernoulli")
	register("", inferMultinomial, "Multinomial")
}

func inferGatherElements(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	idx, err := n.need(1)
	if err != nil {
		return err
	}
	if idx.rank() != x.rank() {
		return fmt.Errorf("indices rank %d differs from data rank %d", idx.rank(), x.rank())
	}
	return n.set(0, x.dtype, shapes.Clone(idx.shape))
}

func inferGatherND(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	idx, err := n.need(1)
	if err != nil {
		return err
	}
	b := int(n.attrs.Int("batch_dims", 0))
	if idx.rank() < 1 || b < 0 || b >= min(idx.rank(), x.rank()) {
		return fmt.Errorf("indices %v and batch_dims %d do not fit data %v", idx.shape, b, x.shape)
	}
	last := int(idx.shape[idx.rank()-1])
	if b+last > x.rank() {
		return fmt.Errorf("indices %v index past the rank of data %v", idx.shape, x.shape)
	}
	out := slices.Concat(idx.shape[:idx.rank()-1], x.shape[b+last:])
	return n.set(0, x.dtype, out)
}

func inferDepthToSpace(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	b := n.attrs.Int("blocksize", 0)
	if x.rank() != 4 || b <= 0 || x.shape[1]%(b*b) != 0 {
		return fmt.Errorf("blocksize %d does not fit input %v", b, x.shape)
	}
	return n.set(0, x.dtype, []int64{x.shape[0], x.shape[1] / (b * b), x.shape[2] * b, x.shape[3] * b})
}

func inferSpaceToDepth(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	b := n.attrs.Int("blocksize", 0)
	if x.rank() != 4 || b <= 0 || x.shape[2]%b != 0 || x.shape[3]%b != 0 {
		return fmt.Errorf("blocksize %d does not fit input %v", b, x.shape)
	}
	return n.set(0, x.dtype, []int64{x.shape[0], x.shape[1] * b * b, x.shape[2] / b, x.shape[3] / b})
}

func inferOneHot(n *node) error {
	idx, err := n.need(0)
	if err != nil {
		return err
	}
	dv, err := n.need(1)
	if err != nil {
		return err
	}
	vals, err := n.need(2)
	if err != nil {
		return err
	}
	d, ok := dv.intsOf()
	if !ok || len(d) != 1 {
		return errNeedValue
	}
	r := idx.rank() + 1
	axis, err := shapes.NormAxis(n.attrs.Int("axis", -1), r)
	if err != nil {
		return err
	}
	out := slices.Concat(idx.shape[:axis], []int64{d[0]}, idx.shape[axis:])
	return n.set(0, vals.dtype, out)
}

func inferTopK(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	var k int64
	if n.opset < 10 {
		k = n.attrs.Int("k", 0)
	} else {
		kv, ok := n.ints(1)
		if !ok || len(kv) != 1 {
			return errNeedValue
		}
		k = kv[0]
	}
	axis, err := shapes.NormAxis(n.attrs.Int("axis", -1), x.rank())
	if err != nil {
		return err
	}
	if k < 0 || k > x.shape[axis] {
		return fmt.Errorf("k=%d is out of range for axis %d of size %d", k, axis, x.shape[axis])
	}
	out := shapes.Clone(x.shape)
	out[axis] = k
	if err := n.set(0, x.dtype, out); err != nil {
		return err
	}
	n.flops(x.elems())
	return n.set(1, graph.Int64, shapes.Clone(out))
}

func inferEyeLike(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	dt := x.dtype
	if n.attrs.Has("dtype") {
		dt = graph.DType(n.attrs.Int("dtype", 1))
	}
	return n.set(0, dt, shapes.Clone(x.shape))
}

func inferNonZero(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	nums, ok := x.numbers()
	if !ok {
		return errNeedValue
	}
	var cnt int64
	for _, v := range nums {
		if v != 0 {
			cnt++
		}
	}
	n.flops(x.elems())
	return n.set(0, graph.Int64, []int64{int64(x.rank()), cnt})
}

func inferCompress(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	cond, ok := n.ints(1)
	if !ok {
		return errNeedValue
	}
	var cnt int64
	for _, v := range cond {
		if v != 0 {
			cnt++
		}
	}
	if !n.attrs.Has("axis") {
		return n.set(0, x.dtype, []int64{cnt})
	}
	axis, err := shapes.NormAxis(n.attrs.Int("axis", 0), x.rank())
	if err != nil {
		return err
	}
	out := shapes.Clone(x.shape)
	out[axis] = min(cnt, out[axis])
	return n.set(0, x.dtype, out)
}

// inferDataDependent covers ops whose output sizes depend on tensor
// contents that placement cannot know; declared shapes are used if any.
func inferDataDependent(n *node) error { return errNeedValue }

func inferRandom(n *node) error {
	shape := n.attrs.Ints("shape")
	if shape == nil {
		return fmt.Errorf("%s has no shape", n.op)
	}
	dt := graph.DType(n.attrs.Int("dtype", int64(graph.Float32)))
	n.flops(shapes.MulSat(4, shapes.Prod(shape)))
	return n.set(0, dt, shapes.Clone(shape))
}

func inferRandomLike(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	dt := x.dtype
	if n.attrs.Has("dtype") {
		dt = graph.DType(n.attrs.Int("dtype", 1))
	}
	n.flops(shapes.MulSat(4, x.elems()))
	return n.set(0, dt, shapes.Clone(x.shape))
}

func inferMultinomial(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	if x.rank() != 2 {
		return fmt.Errorf("input %v must be 2-D", x.shape)
	}
	dt := graph.DType(n.attrs.Int("dtype", int64(graph.Int32)))
	return n.set(0, dt, []int64{x.shape[0], n.attrs.Int("sample_size", 1)})
}

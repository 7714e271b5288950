package onnx

import (
	"fmt"
	"math"
	"slices"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

// Shape-manipulation ops: they move data without arithmetic (0 FLOPs) and
// fold their contents when the input's are known, which is how PyTorch's
// run-time reshape targets become constants here.

func init() {
	register("", inferShape, "Shape")
	register("", inferSize, "Size")
	register("", inferReshape, "Reshape")
	register("", inferFlatten, "Flatten")
	register("", inferSqueeze, "Squeeze")
	register("", inferUnsqueeze, "Unsqueeze")
	register("", inferConcat, "Concat")
	register("", inferGather, "Gather")
	register("", inferTranspose, "Transpose")
	register("", inferSlice, "Slice")
	register("", inferSplit, "Split")
	register("", inferExpand, "Expand")
	register("", inferTile, "Tile")
	register("", inferConstantOfShape, "ConstantOfShape")
	register("", inferConstant, "Constant")
	register("", inferRange, "Range")
}

// strides returns row-major strides of s.
func strides(s []int64) []int64 {
	st := make([]int64, len(s))
	k := int64(1)
	for i := len(s) - 1; i >= 0; i-- {
		st[i] = k
		k *= s[i]
	}
	return st
}

// gatherFold builds out's contents from src by mapping each output
// coordinate to a source flat index (or -1 when it cannot).
func gatherFold(src, out *value, index func(coord []int64) int64) {
	n := out.elems()
	if n < 0 || n > maxFold || checkShape(out.shape) != nil || !(src.hasInts() || src.hasFloats()) {
		return
	}
	coord := make([]int64, len(out.shape))
	var ints []int64
	var floats []float64
	if src.hasInts() {
		ints = make([]int64, n)
	} else {
		floats = make([]float64, n)
	}
	for i := range n {
		r := i
		for d := len(out.shape) - 1; d >= 0; d-- {
			coord[d] = r % out.shape[d]
			r /= out.shape[d]
		}
		j := index(coord)
		if j < 0 || j >= src.elems() {
			return
		}
		if ints != nil {
			ints[i] = src.ints[j]
		} else {
			floats[i] = src.floats[j]
		}
	}
	out.ints, out.floats = ints, floats
}

// sameData returns a value with x's contents under a new shape.
func sameData(x *value, shape []int64) *value {
	return &value{dtype: x.dtype, shape: shape, known: true, ints: x.ints, floats: x.floats}
}

func inferShape(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	r := int64(x.rank())
	start, end := n.attrs.Int("start", 0), n.attrs.Int("end", r)
	clamp := func(a int64) int64 {
		if a < 0 {
			a += r
		}
		return min(max(a, 0), r)
	}
	start, end = clamp(start), clamp(end)
	if end < start {
		end = start
	}
	return n.setValue(0, shapeValue(x.shape[start:end]))
}

func inferSize(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	return n.setInts(0, graph.Int64, []int64{}, []int64{x.elems()})
}

func inferReshape(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	var target []int64
	if n.opset < 5 {
		target = n.attrs.Ints("shape")
	} else {
		var ok bool
		if target, ok = n.ints(1); !ok {
			return errNeedValue
		}
	}
	allowZero := n.attrs.Int("allowzero", 0) != 0
	out := make([]int64, len(target))
	infer := -1
	known := int64(1)
	for i, d := range target {
		switch {
		case d == 0 && !allowZero:
			if i >= x.rank() {
				return fmt.Errorf("shape %v copies axis %d of a rank-%d input", target, i, x.rank())
			}
			out[i] = x.shape[i]
		case d == -1:
			if infer >= 0 {
				return fmt.Errorf("shape %v has more than one -1", target)
			}
			infer = i
			continue
		case d < 0:
			return fmt.Errorf("shape %v has a negative dimension", target)
		default:
			out[i] = d
		}
		known = shapes.MulSat(known, out[i])
	}
	total := x.elems()
	if infer >= 0 {
		if known == 0 || total%known != 0 {
			return fmt.Errorf("cannot reshape %v (%d elements) to %v", x.shape, total, target)
		}
		out[infer] = total / known
	} else if shapes.Prod(out) != total {
		return fmt.Errorf("cannot reshape %v (%d elements) to %v", x.shape, total, target)
	}
	return n.setValue(0, sameData(x, out))
}

func inferFlatten(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	a := n.attrs.Int("axis", 1)
	if a < 0 {
		a += int64(x.rank())
	}
	if a < 0 || a > int64(x.rank()) {
		return fmt.Errorf("axis %d is out of range for rank %d", n.attrs.Int("axis", 1), x.rank())
	}
	return n.setValue(0, sameData(x, []int64{shapes.Prod(x.shape[:a]), shapes.Prod(x.shape[a:])}))
}

// axesArg reads an axes list from the attribute (before opset version
// since) or from input idx (from then on); present reports whether any
// was given.
func (n *node) axesArg(since int64, idx int) (axes []int64, present bool, err error) {
	if n.opset < since {
		if n.attrs.Has("axes") {
			return n.attrs.Ints("axes"), true, nil
		}
		return nil, false, nil
	}
	if n.input(idx) == nil {
		return nil, false, nil
	}
	a, ok := n.ints(idx)
	if !ok {
		return nil, false, errNeedValue
	}
	return a, true, nil
}

func inferSqueeze(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	axes, present, err := n.axesArg(13, 1)
	if err != nil {
		return err
	}
	drop := make([]bool, x.rank())
	if !present {
		for i, d := range x.shape {
			drop[i] = d == 1
		}
	}
	for _, a := range axes {
		i, err := shapes.NormAxis(a, x.rank())
		if err != nil {
			return err
		}
		if x.shape[i] != 1 {
			return fmt.Errorf("cannot squeeze axis %d of size %d", a, x.shape[i])
		}
		drop[i] = true
	}
	out := []int64{}
	for i, d := range x.shape {
		if !drop[i] {
			out = append(out, d)
		}
	}
	return n.setValue(0, sameData(x, out))
}

func inferUnsqueeze(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	axes, present, err := n.axesArg(13, 1)
	if err != nil {
		return err
	}
	if !present {
		return fmt.Errorf("Unsqueeze has no axes")
	}
	r := x.rank() + len(axes)
	ins := make([]bool, r)
	for _, a := range axes {
		i, err := shapes.NormAxis(a, r)
		if err != nil {
			return err
		}
		if ins[i] {
			return fmt.Errorf("axis %d is repeated", a)
		}
		ins[i] = true
	}
	out := make([]int64, 0, r)
	j := 0
	for i := range r {
		if ins[i] {
			out = append(out, 1)
		} else {
			out = append(out, x.shape[j])
			j++
		}
	}
	return n.setValue(0, sameData(x, out))
}

func inferConcat(n *node) error {
	var vals []*value
	for _, v := range n.in {
		if v != nil {
			vals = append(vals, v)
		}
	}
	if len(vals) == 0 {
		return fmt.Errorf("Concat has no inputs")
	}
	r := vals[0].rank()
	axis, err := shapes.NormAxis(n.attrs.Int("axis", 0), max(r, 1))
	if err != nil {
		return err
	}
	if r == 0 {
		return fmt.Errorf("cannot concatenate scalars")
	}
	out := shapes.Clone(vals[0].shape)
	for _, v := range vals[1:] {
		if v.rank() != r {
			return fmt.Errorf("inputs have ranks %d and %d", r, v.rank())
		}
		for i := range r {
			if i == axis {
				out[i] = shapes.AddSat(out[i], v.shape[i])
			} else if v.shape[i] != out[i] {
				return fmt.Errorf("input shapes %v and %v differ off the concatenation axis %d", vals[0].shape, v.shape, axis)
			}
		}
	}
	res := &value{dtype: vals[0].dtype, shape: out, known: true}
	if shapes.Prod(out) <= maxFold {
		outer := shapes.Prod(out[:axis])
		allInts, allNums := true, true
		for _, v := range vals {
			allInts = allInts && v.hasInts()
			allNums = allNums && (v.hasInts() || v.hasFloats())
		}
		if allNums {
			var ints []int64
			var floats []float64
			for o := range outer {
				for _, v := range vals {
					inner := shapes.Prod(v.shape[axis:])
					if allInts {
						ints = append(ints, v.ints[o*inner:(o+1)*inner]...)
					} else {
						nums, _ := v.numbers()
						floats = append(floats, nums[o*inner:(o+1)*inner]...)
					}
				}
			}
			if allInts {
				res.ints = ints
			} else {
				setNumbers(res, floats)
			}
		}
	}
	return n.setValue(0, res)
}

func inferGather(n *node) error {
	data, err := n.need(0)
	if err != nil {
		return err
	}
	idx, err := n.need(1)
	if err != nil {
		return err
	}
	if data.rank() == 0 {
		return fmt.Errorf("cannot gather from a scalar")
	}
	axis, err := shapes.NormAxis(n.attrs.Int("axis", 0), data.rank())
	if err != nil {
		return err
	}
	out := slices.Concat(data.shape[:axis], idx.shape, data.shape[axis+1:])
	res := &value{dtype: data.dtype, shape: out, known: true}
	if ii, ok := idx.intsOf(); ok {
		st := strides(data.shape)
		ir := idx.rank()
		ist := strides(idx.shape)
		gatherFold(data, res, func(c []int64) int64 {
			var flat int64
			for d := 0; d < axis; d++ {
				flat += c[d] * st[d]
			}
			var k int64
			for d := range ir {
				k += c[axis+d] * ist[d]
			}
			j := ii[k]
			if j < 0 {
				j += data.shape[axis]
			}
			if j < 0 || j >= data.shape[axis] {
				return -1
			}
			flat += j * st[axis]
			for d := axis + 1; d < data.rank(); d++ {
				flat += c[d+ir-1] * st[d]
			}
			return flat
		})
	}
	return n.setValue(0, res)
}

func inferTranspose(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	r := x.rank()
	perm := n.attrs.Ints("perm")
	if perm == nil {
		perm = make([]int64, r)
		for i := range perm {
			perm[i] = int64(r - 1 - i)
		}
	}
	if len(perm) != r {
		return fmt.Errorf("perm %v does not match rank %d", perm, r)
	}
	seen := make([]bool, r)
	out := make([]int64, r)
	p := make([]int, r)
	for i, a := range perm {
		j, err := shapes.NormAxis(a, r)
		if err != nil || seen[j] {
			return fmt.Errorf("perm %v is not a permutation", perm)
		}
		seen[j] = true
		out[i] = x.shape[j]
		p[i] = j
	}
	res := &value{dtype: x.dtype, shape: out, known: true}
	st := strides(x.shape)
	gatherFold(x, res, func(c []int64) int64 {
		var flat int64
		for i, j := range p {
			flat += c[i] * st[j]
		}
		return flat
	})
	return n.setValue(0, res)
}

func inferSlice(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	var starts, ends, axes, steps []int64
	if n.opset < 10 {
		starts, ends, axes = n.attrs.Ints("starts"), n.attrs.Ints("ends"), n.attrs.Ints("axes")
	} else {
		var ok bool
		if starts, ok = n.ints(1); !ok {
			return errNeedValue
		}
		if ends, ok = n.ints(2); !ok {
			return errNeedValue
		}
		if n.input(3) != nil {
			if axes, ok = n.ints(3); !ok {
				return errNeedValue
			}
		}
		if n.input(4) != nil {
			if steps, ok = n.ints(4); !ok {
				return errNeedValue
			}
		}
	}
	if len(starts) != len(ends) {
		return fmt.Errorf("starts %v and ends %v differ in length", starts, ends)
	}
	if axes == nil {
		axes = make([]int64, len(starts))
		for i := range axes {
			axes[i] = int64(i)
		}
	}
	if len(axes) != len(starts) || (steps != nil && len(steps) != len(starts)) {
		return fmt.Errorf("starts, ends, axes and steps differ in length")
	}
	r := x.rank()
	out := shapes.Clone(x.shape)
	begin := make([]int64, r)
	step := make([]int64, r)
	for i := range step {
		step[i] = 1
	}
	for i, a := range axes {
		ax, err := shapes.NormAxis(a, r)
		if err != nil {
			return err
		}
		st := int64(1)
		if steps != nil {
			st = steps[i]
		}
		if st == 0 {
			return fmt.Errorf("slice step is zero")
		}
		b, e, cnt := sliceRange(starts[i], ends[i], st, x.shape[ax])
		out[ax], begin[ax], step[ax] = cnt, b, st
		_ = e
	}
	res := &value{dtype: x.dtype, shape: out, known: true}
	xs := strides(x.shape)
	gatherFold(x, res, func(c []int64) int64 {
		var flat int64
		for d := range r {
			flat += (begin[d] + c[d]*step[d]) * xs[d]
		}
		return flat
	})
	return n.setValue(0, res)
}

// sliceRange clamps start and end as ONNX's Slice does and returns the
// first index, the end and the element count along an axis of size dim.
func sliceRange(start, end, step, dim int64) (int64, int64, int64) {
	norm := func(v int64) int64 {
		if v < 0 {
			v += dim
		}
		return v
	}
	start, end = norm(start), norm(end)
	if step > 0 {
		start = min(max(start, 0), dim)
		end = min(max(end, 0), dim)
		if end <= start {
			return start, end, 0
		}
		return start, end, (end - start + step - 1) / step
	}
	start = min(max(start, -1), dim-1)
	end = min(max(end, -1), dim-1)
	if start <= end {
		return start, end, 0
	}
	return start, end, (start - end - step - 1) / (-step)
}

func inferSplit(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	axis, err := shapes.NormAxis(n.attrs.Int("axis", 0), x.rank())
	if err != nil {
		return err
	}
	var split []int64
	if n.opset < 13 {
		split = n.attrs.Ints("split")
		if split == nil && n.input(1) != nil { // opset 1 took split as an input
			var ok bool
			if split, ok = n.ints(1); !ok {
				return errNeedValue
			}
		}
	} else if n.input(1) != nil {
		var ok bool
		if split, ok = n.ints(1); !ok {
			return errNeedValue
		}
	}
	dim := x.shape[axis]
	k := len(n.out)
	if split == nil {
		if no := n.attrs.Int("num_outputs", 0); no > 0 {
			if no > int64(len(n.out)) {
				return fmt.Errorf("num_outputs %d exceeds the node's %d outputs", no, len(n.out))
			}
			k = int(no)
		}
		if k == 0 {
			return fmt.Errorf("Split has no outputs")
		}
		chunk := (dim + int64(k) - 1) / int64(k)
		if n.opset < 18 && dim%int64(k) != 0 {
			return fmt.Errorf("axis %d of size %d does not split evenly into %d outputs", axis, dim, k)
		}
		for i := range k {
			split = append(split, max(min(chunk, dim-int64(i)*chunk), 0))
		}
	}
	var total int64
	for _, s := range split {
		if s < 0 {
			return fmt.Errorf("split %v has a negative size", split)
		}
		total += s
	}
	if total != dim {
		return fmt.Errorf("split %v does not sum to axis %d's size %d", split, axis, dim)
	}
	if len(split) < len(n.out) {
		return fmt.Errorf("split %v gives %d outputs, the node has %d", split, len(split), len(n.out))
	}
	var off int64
	for i, s := range split {
		shape := shapes.Clone(x.shape)
		shape[axis] = s
		res := &value{dtype: x.dtype, shape: shape, known: true}
		xs, o := strides(x.shape), off
		gatherFold(x, res, func(c []int64) int64 {
			var flat int64
			for d := range c {
				cd := c[d]
				if d == axis {
					cd += o
				}
				flat += cd * xs[d]
			}
			return flat
		})
		if err := n.setValue(i, res); err != nil {
			return err
		}
		off += s
	}
	return nil
}

// broadcastFold fills out (a broadcast of x) with x's contents.
func broadcastFold(x, out *value) {
	gatherFold(x, out, func(c []int64) int64 {
		var flat, stride int64 = 0, 1
		off := len(out.shape) - x.rank()
		for d := x.rank() - 1; d >= 0; d-- {
			if x.shape[d] != 1 {
				flat += c[d+off] * stride
			}
			stride *= x.shape[d]
		}
		return flat
	})
}

func inferExpand(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	shape, ok := n.ints(1)
	if !ok {
		return errNeedValue
	}
	if err := checkShape(shape); err != nil {
		return fmt.Errorf("target shape: %v", err)
	}
	out, err := broadcast(x.shape, shape)
	if err != nil {
		return err
	}
	res := &value{dtype: x.dtype, shape: out, known: true}
	broadcastFold(x, res)
	return n.setValue(0, res)
}

func inferTile(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	reps, ok := n.ints(1)
	if !ok {
		return errNeedValue
	}
	if len(reps) != x.rank() {
		return fmt.Errorf("repeats %v do not match rank %d", reps, x.rank())
	}
	out := make([]int64, x.rank())
	for i, r := range reps {
		if r < 0 {
			return fmt.Errorf("repeats %v has a negative entry", reps)
		}
		out[i] = shapes.MulSat(x.shape[i], r)
	}
	res := &value{dtype: x.dtype, shape: out, known: true}
	xs := strides(x.shape)
	gatherFold(x, res, func(c []int64) int64 {
		var flat int64
		for d := range c {
			flat += (c[d] % x.shape[d]) * xs[d]
		}
		return flat
	})
	return n.setValue(0, res)
}

func inferConstantOfShape(n *node) error {
	shape, ok := n.ints(0)
	if !ok {
		return errNeedValue
	}
	dt := graph.Float32
	fill := &value{dtype: dt, shape: []int64{1}, known: true, floats: []float64{0}}
	if a, ok := n.attrs["value"]; ok && a.Tensor != nil {
		dt = a.Tensor.DType
		fill = &value{dtype: dt, shape: a.Tensor.Shape, known: true}
		if a.TensorInts != nil {
			fill.ints = a.TensorInts
		}
	}
	if err := checkShape(shape); err != nil {
		return err
	}
	res := &value{dtype: dt, shape: shapes.Clone(shape), known: true}
	if fill.hasInts() || fill.hasFloats() {
		gatherFold(fill, res, func([]int64) int64 { return 0 })
	}
	return n.setValue(0, res)
}

func inferConstant(n *node) error {
	a := n.attrs
	switch {
	case a.Has("value"), a.Has("sparse_value"):
		at := a["value"]
		if !a.Has("value") {
			at = a["sparse_value"]
		}
		if at.Tensor == nil {
			return fmt.Errorf("Constant value is not a tensor")
		}
		v := n.constTensor(at)
		return n.setValue(0, v)
	case a.Has("value_int"):
		return n.setInts(0, graph.Int64, []int64{}, []int64{a.Int("value_int", 0)})
	case a.Has("value_ints"):
		is := a.Ints("value_ints")
		return n.setInts(0, graph.Int64, []int64{int64(len(is))}, shapes.Clone(is))
	case a.Has("value_float"):
		return n.setValue(0, &value{dtype: graph.Float32, shape: []int64{}, known: true,
			floats: []float64{a.Float("value_float", 0)}})
	case a.Has("value_floats"):
		fs := a["value_floats"].Floats
		return n.setValue(0, &value{dtype: graph.Float32, shape: []int64{int64(len(fs))}, known: true, floats: clone64(fs)})
	case a.Has("value_string"):
		return n.set(0, graph.String, []int64{})
	case a.Has("value_strings"):
		return n.set(0, graph.String, []int64{int64(len(a["value_strings"].Strings))})
	}
	return fmt.Errorf("Constant has no value attribute")
}

// constTensor returns the value of a tensor attribute, with the contents
// read at import when they were inline.
func (n *node) constTensor(at graph.Attr) *value {
	t := at.Tensor
	v := &value{dtype: t.DType, shape: shapes.Clone(t.Shape), known: true}
	if at.TensorInts != nil {
		v.ints = shapes.Clone(at.TensorInts)
	} else if f := n.c.constFloats[t]; f != nil {
		v.floats = f
	}
	return v
}

func inferRange(n *node) error {
	var nums [3]float64
	for i := range 3 {
		v, err := n.need(i)
		if err != nil {
			return err
		}
		x, ok := v.numbers()
		if !ok || len(x) != 1 {
			return errNeedValue
		}
		nums[i] = x[0]
	}
	start, limit, delta := nums[0], nums[1], nums[2]
	if delta == 0 {
		return fmt.Errorf("Range delta is zero")
	}
	cnt := int64(0)
	if c := (limit - start) / delta; c > 0 {
		if c > float64(shapes.MaxElements) {
			return fmt.Errorf("Range of %g elements is too large", c)
		}
		cnt = int64(math.Ceil(c))
	}
	dt := n.in[0].dtype
	res := &value{dtype: dt, shape: []int64{cnt}, known: true}
	if cnt <= maxFold {
		f := make([]float64, cnt)
		for i := range f {
			f[i] = start + float64(i)*delta
		}
		setNumbers(res, f)
	}
	n.flops(cnt)
	return n.setValue(0, res)
}

package tf

import (
	"fmt"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

func init() {
	register(&opDef{shape: inferReshape}, "Reshape")
	register(&opDef{shape: inferSqueeze}, "Squeeze")
	register(&opDef{shape: inferExpandDims}, "ExpandDims")
	register(&opDef{shape: inferShape}, "Shape", "Size", "Rank")
	register(&opDef{shape: inferTranspose}, "Transpose")
	register(&opDef{shape: inferConcat}, "ConcatV2", "Concat")
	register(&opDef{shape: inferPack}, "Pack")
	register(&opDef{shape: inferUnpack}, "Unpack")
	register(&opDef{shape: inferFill}, "Fill")
	register(&opDef{shape: inferRange}, "Range")
	register(&opDef{shape: inferTile}, "Tile")
	register(&opDef{shape: inferBroadcastTo}, "BroadcastTo")
	register(&opDef{shape: inferSlice}, "Slice")
	register(&opDef{shape: inferStridedSlice}, "StridedSlice")
	register(&opDef{shape: inferPad}, "Pad", "PadV2", "MirrorPad")
	register(&opDef{shape: inferGather}, "GatherV2", "Gather")
	register(&opDef{shape: inferGatherNd}, "GatherNd")
	register(&opDef{shape: inferSplit}, "Split", "SplitV")
	register(&opDef{shape: inferOneHot, cost: perOut(1)}, "OneHot")
	register(&opDef{shape: inferIdentityN}, "IdentityN")
	register(&opDef{shape: inferPlaceholderWithDefault}, "PlaceholderWithDefault", "EnsureShape")
	register(&opDef{shape: func(*node) error { return nil }}, "NoOp")
}

// outType is the index type an op's out_type attribute names (default
// int32).
func (n *node) outType(attr string) graph.DType {
	if dt := n.attrType(attr); dt != graph.Undefined {
		return dt
	}
	return graph.Int32
}

func inferReshape(n *node) error {
	x := n.input(0)
	t := n.input(1)
	if x == nil || t == nil {
		return fmt.Errorf("needs a tensor and a shape")
	}
	target, err := n.ints(1)
	if err != nil {
		// The target's values are missing (a TF.js model without its
		// weights): its length is the rank, and the count is kept.
		if t.known() && t.rank() == 1 {
			if t.shape[0] == 1 && x.numElems() > 0 {
				return n.set(0, n.dt(), []int64{x.numElems()}) // flattening: the only rank-1 shape
			}
			if t.shape[0] > maxRank {
				return fmt.Errorf("shape has %d dimensions, more than any real tensor", t.shape[0])
			}
			v := partial(n.dt(), int(t.shape[0]))
			v.count = x.numElems()
			return n.setValue(0, v)
		}
		return errPartial
	}
	out := shapes.Clone(target)
	infer := -1
	known := int64(1)
	for i, d := range out {
		switch {
		case d == -1 && infer < 0:
			infer = i
		case d < 0:
			return fmt.Errorf("shape %v has a bad dimension %d", target, d)
		default:
			known = shapes.MulSat(known, d)
		}
	}
	if infer >= 0 {
		if x.numElems() == 0 {
			out[infer] = unknownDim
			return n.setValue(0, &value{dtype: n.dt(), shape: out, ranked: true})
		}
		if known == 0 || x.numElems()%known != 0 {
			return fmt.Errorf("cannot reshape %s (%d elements) to %v", x, x.numElems(), target)
		}
		out[infer] = x.numElems() / known
	} else if x.numElems() > 0 && x.numElems() != known {
		return fmt.Errorf("cannot reshape %s (%d elements) to %v (%d elements)", x, x.numElems(), target, known)
	}
	v := &value{dtype: n.dt(), shape: out, ranked: true}
	if x.hasInts() {
		v.ints = shapes.Clone(x.ints)
	}
	return n.setValue(0, v)
}

func inferSqueeze(n *node) error {
	x := n.input(0)
	if x == nil || !x.ranked {
		return errPartial
	}
	dims := n.attrInts("squeeze_dims")
	if len(dims) == 0 {
		dims = n.attrInts("axis")
	}
	drop := make([]bool, len(x.shape))
	if len(dims) == 0 {
		if !x.known() {
			return errPartial
		}
		for i, d := range x.shape {
			drop[i] = d == 1
		}
	}
	for _, a := range dims {
		ax, err := shapes.NormAxis(a, len(x.shape))
		if err != nil {
			return err
		}
		if d := x.shape[ax]; d >= 0 && d != 1 {
			return fmt.Errorf("cannot squeeze axis %d of %s: its size is %d", ax, x, d)
		}
		drop[ax] = true
	}
	var out []int64
	for i, d := range x.shape {
		if !drop[i] {
			if d < 0 && dims != nil {
				d = unknownDim
			}
			out = append(out, d)
		} else if d < 0 {
			// a squeezed axis is 1 by definition
		}
	}
	v := &value{dtype: n.dt(), shape: out, ranked: true}
	if v.shape == nil {
		v.shape = []int64{}
	}
	if x.hasInts() {
		v.ints = shapes.Clone(x.ints)
	}
	return n.setValue(0, v)
}

func inferExpandDims(n *node) error {
	x := n.input(0)
	if x == nil || !x.ranked {
		return errPartial
	}
	dim, err := n.ints(1)
	if err != nil {
		return n.setValue(0, partial(n.dt(), len(x.shape)+1))
	}
	if len(dim) != 1 {
		return fmt.Errorf("dim must be a single axis, got %v", dim)
	}
	ax, err := shapes.NormAxis(dim[0], len(x.shape)+1)
	if err != nil {
		return err
	}
	out := append(append(shapes.Clone(x.shape[:ax]), 1), x.shape[ax:]...)
	v := &value{dtype: n.dt(), shape: out, ranked: true}
	if x.hasInts() {
		v.ints = shapes.Clone(x.ints)
	}
	return n.setValue(0, v)
}

func inferShape(n *node) error {
	x := n.input(0)
	if x == nil {
		return fmt.Errorf("input 0 is missing")
	}
	dt := n.outType("out_type")
	switch n.op {
	case "Rank":
		if !x.ranked {
			return n.setValue(0, &value{dtype: graph.Int32, shape: []int64{}, ranked: true})
		}
		return n.setInts(0, graph.Int32, []int64{}, []int64{int64(len(x.shape))})
	case "Size":
		if !x.known() {
			return n.setValue(0, &value{dtype: dt, shape: []int64{}, ranked: true})
		}
		return n.setInts(0, dt, []int64{}, []int64{x.elems()})
	}
	if !x.ranked {
		return n.setValue(0, partial(dt, 1))
	}
	if !x.known() {
		return n.set(0, dt, []int64{int64(len(x.shape))})
	}
	return n.setInts(0, dt, []int64{int64(len(x.shape))}, x.shape)
}

func inferTranspose(n *node) error {
	x := n.input(0)
	if x == nil || !x.ranked {
		return errPartial
	}
	perm, err := n.ints(1)
	if err != nil {
		return n.setValue(0, partial(n.dt(), len(x.shape)))
	}
	if len(perm) != len(x.shape) {
		return fmt.Errorf("perm %v does not match rank %d", perm, len(x.shape))
	}
	out := make([]int64, len(perm))
	seen := make([]bool, len(perm))
	for i, p := range perm {
		ax, err := shapes.NormAxis(p, len(perm))
		if err != nil || seen[ax] {
			return fmt.Errorf("perm %v is not a permutation", perm)
		}
		seen[ax] = true
		out[i] = x.shape[ax]
	}
	return n.setValue(0, &value{dtype: n.dt(), shape: out, ranked: true})
}

func inferConcat(n *node) error {
	if len(n.in) < 2 {
		return fmt.Errorf("needs values and an axis")
	}
	axisIn, vals := len(n.in)-1, n.in[:len(n.in)-1]
	if n.op == "Concat" {
		axisIn, vals = 0, n.in[1:]
	}
	rank := -1
	for _, v := range vals {
		if v.ranked {
			if rank >= 0 && len(v.shape) != rank {
				return fmt.Errorf("inputs have different ranks (%d and %d)", rank, len(v.shape))
			}
			rank = len(v.shape)
		}
	}
	if rank < 0 {
		return errPartial
	}
	dt := n.dt()
	axv, err := n.ints(axisIn)
	if err != nil || len(axv) != 1 {
		return n.setValue(0, partial(dt, rank))
	}
	axis, err := shapes.NormAxis(axv[0], rank)
	if err != nil {
		return err
	}
	out := partial(dt, rank).shape
	var sum int64
	var ints []int64
	for i, v := range vals {
		if !v.ranked {
			sum = unknownDim
			ints = nil
			continue
		}
		for k, d := range v.shape {
			if k == axis || d < 0 {
				continue
			}
			if out[k] >= 0 && out[k] != d {
				return fmt.Errorf("input %d has shape %s, which differs off the concatenation axis", i, v)
			}
			out[k] = d
		}
		if sum >= 0 && v.shape[axis] >= 0 {
			sum += v.shape[axis]
		} else {
			sum = unknownDim
		}
		if rank == 1 && v.hasInts() && (i == 0 || ints != nil) {
			ints = append(ints, v.ints...)
		} else {
			ints = nil
		}
	}
	out[axis] = sum
	res := &value{dtype: dt, shape: out, ranked: true}
	if res.known() && int64(len(ints)) == shapes.Prod(out) {
		res.ints = ints
	}
	return n.setValue(0, res)
}

func inferPack(n *node) error {
	if len(n.in) == 0 {
		return fmt.Errorf("needs at least one input")
	}
	// Every input has one shape: merge what each says of it.
	base := &value{}
	for i, v := range n.in {
		m, ok := meet(base, &value{shape: v.shape, ranked: v.ranked})
		if !ok {
			return fmt.Errorf("input %d has shape %s, unlike the others (%s)", i, v, base)
		}
		base = m
	}
	if !base.ranked {
		return errPartial
	}
	r := len(base.shape) + 1
	ax, err := shapes.NormAxis(n.attrInt("axis", 0), r)
	if err != nil {
		return err
	}
	out := append(append(shapes.Clone(base.shape[:ax]), int64(len(n.in))), base.shape[ax:]...)
	v := &value{dtype: n.dt(), shape: out, ranked: true}
	if len(base.shape) == 0 {
		var ints []int64
		for _, in := range n.in {
			if !in.hasInts() {
				ints = nil
				break
			}
			ints = append(ints, in.ints[0])
		}
		if len(ints) == len(n.in) {
			v.ints = ints
		}
	}
	return n.setValue(0, v)
}

func inferUnpack(n *node) error {
	x := n.input(0)
	if x == nil || !x.ranked {
		return errPartial
	}
	ax, err := shapes.NormAxis(n.attrInt("axis", 0), len(x.shape))
	if err != nil {
		return err
	}
	if num := int64(len(n.out)); x.shape[ax] >= 0 && x.shape[ax] != num {
		return fmt.Errorf("axis %d of %s has size %d, not num=%d", ax, x, x.shape[ax], num)
	}
	out := append(shapes.Clone(x.shape[:ax]), x.shape[ax+1:]...)
	for i := range n.out {
		v := &value{dtype: n.dt(), shape: shapes.Clone(out), ranked: true}
		if x.hasInts() && len(x.shape) == 1 {
			v.ints = []int64{x.ints[i]}
		}
		if err := n.setValue(i, v); err != nil {
			return err
		}
	}
	return nil
}

func inferFill(n *node) error {
	dims, err := n.ints(0)
	if err != nil {
		return err
	}
	dt := n.dt()
	if v := n.input(1); v != nil && v.dtype != graph.Undefined {
		dt = v.dtype
	}
	out := shapes.Clone(dims)
	if err := checkShape(out); err != nil {
		return fmt.Errorf("dims: %v", err)
	}
	if v := n.input(1); v.hasInts() && shapes.Prod(out) <= maxFold {
		ints := make([]int64, shapes.Prod(out))
		for i := range ints {
			ints[i] = v.ints[0]
		}
		return n.setInts(0, dt, out, ints)
	}
	return n.set(0, dt, out)
}

func inferRange(n *node) error {
	start, err := n.ints(0)
	if err != nil {
		return err
	}
	limit, err := n.ints(1)
	if err != nil {
		return err
	}
	delta, err := n.ints(2)
	if err != nil {
		return err
	}
	if delta[0] == 0 {
		return fmt.Errorf("delta is zero")
	}
	cnt := max(ceilDivSigned(limit[0]-start[0], delta[0]), 0)
	dt := n.attrType("Tidx")
	if dt == graph.Undefined {
		dt = graph.Int32
	}
	if cnt <= maxFold {
		ints := make([]int64, cnt)
		for i := range ints {
			ints[i] = start[0] + int64(i)*delta[0]
		}
		return n.setInts(0, dt, []int64{cnt}, ints)
	}
	return n.set(0, dt, []int64{cnt})
}

func ceilDivSigned(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) == (b < 0) {
		q++
	}
	return q
}

func inferTile(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	m, err := n.ints(1)
	if err != nil {
		return err
	}
	if len(m) != len(x.shape) {
		return fmt.Errorf("multiples %v do not match rank %d", m, len(x.shape))
	}
	out := shapes.Clone(x.shape)
	for i := range out {
		out[i] = shapes.MulSat(out[i], m[i])
	}
	return n.set(0, n.dt(), out)
}

func inferBroadcastTo(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	s, err := n.ints(1)
	if err != nil {
		return err
	}
	out, err := broadcast(x.shape, s)
	if err != nil {
		return err
	}
	return n.set(0, n.dt(), out)
}

func inferSlice(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	begin, err := n.ints(1)
	if err != nil {
		return err
	}
	size, err := n.ints(2)
	if err != nil {
		return err
	}
	if len(begin) != len(x.shape) || len(size) != len(x.shape) {
		return fmt.Errorf("begin %v and size %v must have one entry per axis of %s", begin, size, x)
	}
	out := make([]int64, len(size))
	for i := range size {
		if begin[i] < 0 || begin[i] > x.shape[i] {
			return fmt.Errorf("begin %d is out of range for axis %d of %s", begin[i], i, x)
		}
		out[i] = size[i]
		if size[i] == -1 {
			out[i] = x.shape[i] - begin[i]
		}
		if out[i] < 0 || begin[i]+out[i] > x.shape[i] {
			return fmt.Errorf("slice of size %d at %d exceeds axis %d of %s", size[i], begin[i], i, x)
		}
	}
	v := &value{dtype: n.dt(), shape: out, ranked: true}
	if x.hasInts() && len(x.shape) == 1 {
		v.ints = shapes.Clone(x.ints[begin[0] : begin[0]+out[0]])
	}
	return n.setValue(0, v)
}

func inferPad(n *node) error {
	x := n.input(0)
	if x == nil || !x.ranked {
		return errPartial
	}
	pads, err := n.ints(1)
	if err != nil {
		return n.setValue(0, partial(n.dt(), len(x.shape)))
	}
	if len(pads) != 2*len(x.shape) {
		return fmt.Errorf("paddings hold %d values, want %d for %s", len(pads), 2*len(x.shape), x)
	}
	out := shapes.Clone(x.shape)
	for i := range out {
		b, a := pads[2*i], pads[2*i+1]
		if b < 0 || a < 0 {
			return fmt.Errorf("negative padding %d,%d on axis %d", b, a, i)
		}
		if n.op == "MirrorPad" && out[i] >= 0 {
			lim := out[i]
			if n.attrString("mode", "REFLECT") == "REFLECT" {
				lim--
			}
			if b > lim || a > lim {
				return fmt.Errorf("mirror padding %d,%d is too large for axis %d of size %d", b, a, i, out[i])
			}
		}
		if out[i] >= 0 {
			out[i] += b + a
		}
	}
	return n.setValue(0, &value{dtype: n.dt(), shape: out, ranked: true})
}

func inferGather(n *node) error {
	p, err := n.need(0)
	if err != nil {
		return err
	}
	idx, err := n.need(1)
	if err != nil {
		return err
	}
	axis := int64(0)
	if n.op == "GatherV2" {
		a, err := n.ints(2)
		if err != nil {
			return err
		}
		axis = a[0]
	}
	ax, err := shapes.NormAxis(axis, len(p.shape))
	if err != nil {
		return err
	}
	bd := int(n.attrInt("batch_dims", 0))
	if bd < 0 {
		bd += len(idx.shape)
	}
	if bd > ax || bd > len(idx.shape) {
		return fmt.Errorf("batch_dims %d exceeds the axis %d or the indices' rank", bd, ax)
	}
	out := append(append(shapes.Clone(p.shape[:ax]), idx.shape[bd:]...), p.shape[ax+1:]...)
	v := &value{dtype: p.dtype, shape: out, ranked: true}
	if p.hasInts() && idx.hasInts() && len(p.shape) == 1 {
		for _, i := range idx.ints {
			if i < 0 {
				i += p.shape[0]
			}
			if i < 0 || i >= p.shape[0] {
				return fmt.Errorf("index %d is out of range for %s", i, p)
			}
			v.ints = append(v.ints, p.ints[i])
		}
	}
	return n.setValue(0, v)
}

func inferGatherNd(n *node) error {
	p := n.input(0)
	idx := n.input(1)
	if p == nil || idx == nil || !p.ranked || !idx.ranked || len(idx.shape) == 0 {
		return errPartial
	}
	q := idx.shape[len(idx.shape)-1]
	if q < 0 {
		return errPartial
	}
	if q > int64(len(p.shape)) {
		return fmt.Errorf("indices %s index %d axes of params %s", idx, q, p)
	}
	out := append(shapes.Clone(idx.shape[:len(idx.shape)-1]), p.shape[q:]...)
	return n.setValue(0, &value{dtype: p.dtype, shape: out, ranked: true})
}

func inferSplit(n *node) error {
	var x *value
	var axv []int64
	var err error
	if n.op == "Split" {
		if axv, err = n.ints(0); err != nil {
			return err
		}
		x = n.input(1)
	} else {
		if axv, err = n.ints(2); err != nil {
			return err
		}
		x = n.input(0)
	}
	if x == nil || !x.known() {
		return errPartial
	}
	ax, err := shapes.NormAxis(axv[0], len(x.shape))
	if err != nil {
		return err
	}
	num := int64(len(n.out))
	sizes := make([]int64, num)
	if n.op == "Split" {
		if num == 0 || x.shape[ax]%num != 0 {
			return fmt.Errorf("axis %d of %s does not split evenly into %d", ax, x, num)
		}
		for i := range sizes {
			sizes[i] = x.shape[ax] / num
		}
	} else {
		s, err := n.ints(1)
		if err != nil {
			return err
		}
		if int64(len(s)) != num {
			return fmt.Errorf("size_splits %v has %d entries, num_split is %d", s, len(s), num)
		}
		rest, infer := x.shape[ax], -1
		for i, d := range s {
			if d == -1 && infer < 0 {
				infer = i
				continue
			}
			if d < 0 {
				return fmt.Errorf("size_splits %v has a bad size", s)
			}
			sizes[i] = d
			rest -= d
		}
		if infer >= 0 {
			sizes[infer] = rest
		} else if rest != 0 {
			return fmt.Errorf("size_splits %v do not add up to %d", s, x.shape[ax])
		}
		if rest < 0 {
			return fmt.Errorf("size_splits %v exceed %d", s, x.shape[ax])
		}
	}
	for i, sz := range sizes {
		out := shapes.Clone(x.shape)
		out[ax] = sz
		if err := n.set(i, n.dt(), out); err != nil {
			return err
		}
	}
	return nil
}

func inferOneHot(n *node) error {
	idx, err := n.need(0)
	if err != nil {
		return err
	}
	depth, err := n.ints(1)
	if err != nil {
		return err
	}
	ax := n.attrInt("axis", -1)
	r := len(idx.shape) + 1
	a, err := shapes.NormAxis(ax, r)
	if err != nil {
		return err
	}
	out := append(append(shapes.Clone(idx.shape[:a]), depth[0]), idx.shape[a:]...)
	dt := graph.Float32
	if v := n.input(2); v != nil && v.dtype != graph.Undefined {
		dt = v.dtype
	}
	return n.set(0, dt, out)
}

func inferIdentityN(n *node) error {
	for i, v := range n.in {
		if err := n.setValue(i, &value{dtype: v.dtype, shape: shapes.Clone(v.shape), ranked: v.ranked, ints: v.ints}); err != nil {
			return err
		}
	}
	return nil
}

func inferPlaceholderWithDefault(n *node) error {
	if dims, ranked := shapeOf(n.attr("shape").GetShape()); ranked && n.attr("shape") != nil {
		v := &value{dtype: n.dt(), shape: dims, ranked: true}
		if x := n.input(0); x != nil && x.known() && compatible(x.shape, v) {
			v.shape = shapes.Clone(x.shape)
		}
		return n.setValue(0, v)
	}
	return inferSame(graph.Undefined)(n)
}

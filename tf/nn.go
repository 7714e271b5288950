package tf

import (
	"fmt"
	"math/bits"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
)

func init() {
	register(&opDef{shape: inferConv, cost: costConv}, "Conv2D", "_FusedConv2D", "Conv3D",
		"DepthwiseConv2dNative", "FusedDepthwiseConv2dNative")
	register(&opDef{shape: inferConvBackpropInput, cost: costConvBackpropInput}, "Conv2DBackpropInput", "Conv3DBackpropInputV2")
	register(&opDef{shape: inferPool, cost: costPool}, "MaxPool", "AvgPool", "MaxPoolV2", "MaxPool3D", "AvgPool3D")
	register(&opDef{shape: inferBatchNorm, cost: costBatchNorm}, "FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "_FusedBatchNormEx")
	register(&opDef{shape: inferMatMul, cost: costMatMul}, "MatMul", "_FusedMatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
	register(&opDef{shape: inferResize, cost: costResize}, "ResizeBilinear", "ResizeNearestNeighbor", "ResizeBicubic", "ResizeArea")
	register(&opDef{shape: inferSame(graph.Undefined), cost: func(n *node) {
		n.work.FLOPs = shapes.MulSat(2*(2*n.attrInt("depth_radius", 5)+1)+4, n.outElems(0))
	}, same: true}, "LRN")
	register(&opDef{shape: inferDepthSpace}, "DepthToSpace", "SpaceToDepth")
}

// isDepthwise reports whether op is a depthwise convolution.
func isDepthwise(op string) bool {
	return op == "DepthwiseConv2dNative" || op == "FusedDepthwiseConv2dNative"
}

// layout returns the batch axis, channel axis and spatial axes of a
// rank-r tensor in the op's data format.
func (n *node) layout(r int) (c int, spatial []int) {
	if n.channelsFirst() {
		for i := 2; i < r; i++ {
			spatial = append(spatial, i)
		}
		return 1, spatial
	}
	for i := 1; i < r-1; i++ {
		spatial = append(spatial, i)
	}
	return r - 1, spatial
}

// window computes one spatial output size; -1 when in is unknown.
func window(in, k, stride, dil int64, padding string, before, after int64) (int64, error) {
	if in < 0 {
		return unknownDim, nil
	}
	if stride <= 0 || dil <= 0 || k <= 0 {
		return 0, fmt.Errorf("bad window: kernel %d, stride %d, dilation %d", k, stride, dil)
	}
	eff := (k-1)*dil + 1
	var out int64
	switch padding {
	case "SAME":
		out = ceilDiv(in, stride)
	case "VALID":
		if in < eff {
			return 0, fmt.Errorf("input size %d is smaller than the window %d (VALID padding)", in, eff)
		}
		out = (in-eff)/stride + 1
	case "EXPLICIT":
		p := in + before + after
		if p < eff {
			return 0, fmt.Errorf("padded input size %d is smaller than the window %d", p, eff)
		}
		out = (p-eff)/stride + 1
	default:
		return 0, fmt.Errorf("unknown padding %q (want SAME, VALID or EXPLICIT)", padding)
	}
	return out, nil
}

// attrPerAxis reads a per-axis attribute (strides, dilations, ksize) of
// length r, defaulting to all ones.
func (n *node) attrPerAxis(name string, r int) ([]int64, error) {
	v := n.attrInts(name)
	if len(v) == 0 {
		v = make([]int64, r)
		for i := range v {
			v[i] = 1
		}
		return v, nil
	}
	if len(v) != r {
		return nil, fmt.Errorf("attribute %s has %d entries, the input has rank %d", name, len(v), r)
	}
	return v, nil
}

// spatialOut computes the output's spatial sizes of a windowed op.
func (n *node) spatialOut(x *value, kernel []int64, strides, dil []int64) ([]int64, error) {
	_, sp := n.layout(len(x.shape))
	padding := n.attrString("padding", "VALID")
	explicit := n.attrInts("explicit_paddings")
	out := make([]int64, len(sp))
	for i, ax := range sp {
		var before, after int64
		if padding == "EXPLICIT" {
			if len(explicit) != 2*len(x.shape) {
				return nil, fmt.Errorf("explicit_paddings has %d entries, want %d", len(explicit), 2*len(x.shape))
			}
			before, after = explicit[2*ax], explicit[2*ax+1]
		}
		o, err := window(x.shape[ax], kernel[i], strides[ax], dil[ax], padding, before, after)
		if err != nil {
			return nil, fmt.Errorf("axis %d: %v", ax, err)
		}
		out[i] = o
	}
	return out, nil
}

func inferConv(n *node) error {
	x, w := n.input(0), n.input(1)
	if x == nil || w == nil {
		return fmt.Errorf("needs an input and a filter")
	}
	if !x.ranked || !w.known() {
		return errPartial
	}
	r := len(x.shape)
	if r < 3 || w.rank() != r {
		return fmt.Errorf("input %s and filter %s: want a rank-%d filter for a rank-%d input", x, w, r, r)
	}
	cax, sp := n.layout(r)
	strides, err := n.attrPerAxis("strides", r)
	if err != nil {
		return err
	}
	dil, err := n.attrPerAxis("dilations", r)
	if err != nil {
		return err
	}
	kernel := w.shape[:len(sp)]
	cin, cout := w.shape[r-2], w.shape[r-1]
	if isDepthwise(n.op) {
		cout = cin * w.shape[r-1]
	}
	if c := x.shape[cax]; c >= 0 {
		if isDepthwise(n.op) && c != cin || !isDepthwise(n.op) && (cin == 0 || c%cin != 0) {
			return fmt.Errorf("input %s has %d channels, the filter %s expects %d", x, c, w, cin)
		}
	}
	spOut, err := n.spatialOut(x, kernel, strides, dil)
	if err != nil {
		return err
	}
	out := shapes.Clone(x.shape)
	out[cax] = cout
	for i, ax := range sp {
		out[ax] = spOut[i]
	}
	return n.setValue(0, &value{dtype: n.dt(), shape: out, ranked: true})
}

// fusedExtra is the per-output-element FLOPs of the ops fused into a
// _Fused* op (fused_ops attribute).
func (n *node) fusedExtra() int64 {
	var k int64
	for _, f := range n.attrStrings("fused_ops") {
		switch f {
		case "BiasAdd", "Add", "Relu", "Relu6", "LeakyRelu", "Prelu", "AddV2":
			k++
		case "FusedBatchNorm":
			k += 4
		default: // Elu, Sigmoid, Tanh, Swish, GeluExact...
			k += 4
		}
	}
	return k
}

// costConv: N·∏out_spatial·Cout·∏kernel·Cin_per_group MACs (depthwise:
// N·∏out_spatial·C·multiplier·∏kernel), plus fused epilogues.
func costConv(n *node) {
	w := n.in[1]
	out := n.out[0]
	r := len(w.shape)
	perOutput := shapes.Prod(w.shape[:r-2])
	if !isDepthwise(n.op) {
		perOutput = shapes.MulSat(perOutput, w.shape[r-2])
	}
	n.macs(shapes.MulSat(out.elems(), perOutput), shapes.MulSat(n.fusedExtra(), out.elems()))
}

func inferConvBackpropInput(n *node) error {
	sizes, err := n.ints(0)
	if err != nil {
		return err
	}
	w := n.input(1)
	if w == nil || !w.known() {
		return errPartial
	}
	if len(sizes) != w.rank() {
		return fmt.Errorf("input_sizes %v does not match the filter %s", sizes, w)
	}
	return n.set(0, n.dt(), shapes.Clone(sizes))
}

// costConvBackpropInput: every element of out_backprop scatters into a
// kernel window over the filter's input channels.
func costConvBackpropInput(n *node) {
	w, dy := n.in[1], n.input(2)
	if dy == nil {
		n.estimate()
		return
	}
	r := len(w.shape)
	n.macs(shapes.MulSat(dy.elems(), shapes.MulSat(shapes.Prod(w.shape[:r-2]), w.shape[r-2])), 0)
}

func inferPool(n *node) error {
	x, err := n.need(0)
	if err != nil {
		if n.input(0) != nil && n.input(0).ranked {
			err = nil
			x = n.input(0)
		} else {
			return err
		}
	}
	r := len(x.shape)
	ksize, strides := n.attrInts("ksize"), n.attrInts("strides")
	if n.op == "MaxPoolV2" {
		if ksize, err = n.ints(1); err != nil {
			return err
		}
		if strides, err = n.ints(2); err != nil {
			return err
		}
	}
	if len(ksize) != r || len(strides) != r {
		return fmt.Errorf("ksize %v and strides %v must have one entry per axis of %s", ksize, strides, x)
	}
	_, sp := n.layout(r)
	kernel := make([]int64, len(sp))
	for i, ax := range sp {
		kernel[i] = ksize[ax]
	}
	ones := make([]int64, r)
	for i := range ones {
		ones[i] = 1
	}
	spOut, err := n.spatialOut(x, kernel, strides, ones)
	if err != nil {
		return err
	}
	out := shapes.Clone(x.shape)
	for i, ax := range sp {
		out[ax] = spOut[i]
	}
	return n.setValue(0, &value{dtype: n.dt(), shape: out, ranked: true})
}

// costPool: one FLOP per window element per output.
func costPool(n *node) {
	k := int64(1)
	if ks, err := n.ints(1); err == nil && n.op == "MaxPoolV2" {
		k = shapes.Prod(ks)
	} else {
		k = shapes.Prod(n.attrInts("ksize"))
	}
	n.work.FLOPs = shapes.MulSat(k, n.outElems(0))
}

func inferBatchNorm(n *node) error {
	x := n.input(0)
	if x == nil {
		return fmt.Errorf("input 0 is missing")
	}
	if err := n.setValue(0, &value{dtype: n.dt(), shape: shapes.Clone(x.shape), ranked: x.ranked}); err != nil {
		return err
	}
	if !x.ranked || len(x.shape) < 2 {
		return nil
	}
	cax, _ := n.layout(len(x.shape))
	c := x.shape[cax]
	for i := 1; i < len(n.out); i++ {
		dt := n.attrType("U")
		if dt == graph.Undefined {
			dt = graph.Float32
		}
		if err := n.setValue(i, &value{dtype: dt, shape: []int64{c}, ranked: true}); err != nil {
			return err
		}
	}
	return nil
}

// costBatchNorm: 4 FLOPs per element in inference (scale and shift
// folded), 8 when it also computes batch statistics.
func costBatchNorm(n *node) {
	k := int64(4)
	if n.attrBool("is_training") {
		k = 8
	}
	if n.op == "_FusedBatchNormEx" {
		k++
	}
	n.work.FLOPs = shapes.MulSat(k, n.outElems(0))
}

func inferMatMul(n *node) error {
	a, err := n.need(0)
	if err != nil {
		return err
	}
	b, err := n.need(1)
	if err != nil {
		return err
	}
	ta, tb := n.attrBool("transpose_a"), n.attrBool("transpose_b")
	if n.op != "MatMul" && n.op != "_FusedMatMul" {
		ta, tb = n.attrBool("adj_x"), n.attrBool("adj_y")
	}
	if a.rank() < 2 || b.rank() < 2 {
		return fmt.Errorf("operands %s and %s must have rank 2 or more", a, b)
	}
	ra, rb := len(a.shape), len(b.shape)
	m, k := a.shape[ra-2], a.shape[ra-1]
	if ta {
		m, k = k, m
	}
	k2, nn := b.shape[rb-2], b.shape[rb-1]
	if tb {
		k2, nn = nn, k2
	}
	if k != k2 {
		return fmt.Errorf("inner dimensions of %s and %s differ (%d vs %d)", a, b, k, k2)
	}
	batch, err := broadcast(a.shape[:ra-2], b.shape[:rb-2])
	if err != nil {
		return err
	}
	if (n.op == "MatMul" || n.op == "_FusedMatMul") && (ra != 2 || rb != 2) {
		return fmt.Errorf("MatMul needs rank-2 operands, got %s and %s", a, b)
	}
	return n.set(0, n.dt(), append(batch, m, nn))
}

// costMatMul: batch·M·N·K MACs plus fused epilogues.
func costMatMul(n *node) {
	a := n.in[0]
	k := a.shape[len(a.shape)-1]
	if n.attrBool("transpose_a") || n.attrBool("adj_x") {
		k = a.shape[len(a.shape)-2]
	}
	out := n.outElems(0)
	n.macs(shapes.MulSat(out, k), shapes.MulSat(n.fusedExtra(), out))
}

func inferResize(n *node) error {
	x := n.input(0)
	if x == nil || !x.ranked {
		return errPartial
	}
	if x.rank() != 4 {
		return fmt.Errorf("images must have rank 4, got %s", x)
	}
	out := []int64{x.shape[0], unknownDim, unknownDim, x.shape[3]}
	if size, err := n.ints(1); err == nil {
		if len(size) != 2 || size[0] <= 0 || size[1] <= 0 {
			return fmt.Errorf("size %v must be two positive sizes", size)
		}
		out[1], out[2] = size[0], size[1]
	}
	dt := n.dt()
	if n.op != "ResizeNearestNeighbor" {
		dt = graph.Float32
	}
	return n.setValue(0, &value{dtype: dt, shape: out, ranked: true})
}

// costResize: per output element, 8 FLOPs to interpolate bilinearly
// (four taps), 32 bicubically (sixteen), 1 for nearest or area.
func costResize(n *node) {
	k := int64(1)
	switch n.op {
	case "ResizeBilinear":
		k = 8
	case "ResizeBicubic":
		k = 32
	}
	n.work.FLOPs = shapes.MulSat(k, n.outElems(0))
}

func inferDepthSpace(n *node) error {
	x, err := n.need(0)
	if err != nil {
		return err
	}
	b := n.attrInt("block_size", 0)
	if b < 2 || x.rank() != 4 {
		return fmt.Errorf("block_size %d and input %s: want a block of 2 or more and a rank-4 input", b, x)
	}
	cax, sp := n.layout(4)
	out := shapes.Clone(x.shape)
	if n.op == "DepthToSpace" {
		if out[cax]%(b*b) != 0 {
			return fmt.Errorf("channels %d are not divisible by block_size² %d", out[cax], b*b)
		}
		out[cax] /= b * b
		for _, ax := range sp {
			out[ax] *= b
		}
	} else {
		for _, ax := range sp {
			if out[ax]%b != 0 {
				return fmt.Errorf("axis %d size %d is not divisible by block_size %d", ax, out[ax], b)
			}
			out[ax] /= b
		}
		out[cax] *= b * b
	}
	return n.set(0, n.dt(), out)
}

// log2Ceil is ⌈log₂ x⌉ for x ≥ 1.
func log2Ceil(x int64) int64 {
	if x <= 1 {
		return 1
	}
	return int64(bits.Len64(uint64(x - 1)))
}

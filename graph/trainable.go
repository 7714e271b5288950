package graph

// Which stored tensors a training step trains. Exporters do not mark it:
// an ONNX file stores weights and buffers alike as initializers (or, in
// exports made for inference, as Constant nodes), a frozen TensorFlow
// graph stores both as Const. What marks a weight is how the model reads
// it, which is what Trainable decides, for every importer.

// StoredOp is the op type whose outputs are stored values, like
// initializers: an ONNX Constant node.
const StoredOp = "Constant"

// weightInputs lists, per op type, the input positions that hold a
// layer's learned weights: convolution filters and biases, Gemm's B and
// C, normalisation scales and shifts (not BatchNormalization's running
// mean and variance, which are statistics), embedding tables (Gather's
// data), recurrent layers' W, R and B, PReLU's slope; from(k) stands for
// every position from k on. MatMul-like ops are not listed:
// their weight is whichever operand is stored (matmulOps).
var weightInputs = map[string][]int{
	// ONNX and its com.microsoft contrib ops.
	"Conv": {1, 2}, "ConvTranspose": {1, 2}, "FusedConv": {1, 2}, "Gemm": {1, 2},
	"BatchNormalization": {1, 2}, "InstanceNormalization": {1, 2}, "LayerNormalization": {1, 2},
	"GroupNormalization": {1, 2}, "RMSNormalization": {1}, "SimplifiedLayerNormalization": {1},
	"SkipLayerNormalization": {2, 3, 4}, "SkipSimplifiedLayerNormalization": {2},
	"EmbedLayerNormalization": {2, 3, 4, 5, 6}, "Attention": {1, 2}, "BiasGelu": {1}, "FastGelu": {1},
	"Gather": {0}, "LSTM": {1, 2, 3}, "GRU": {1, 2, 3}, "RNN": {1, 2, 3}, "PRelu": {1},
	// Control flow reads the weights its bodies use as implicit inputs.
	"If": {from(0)}, "Loop": {from(0)}, "Scan": {from(0)},
	// TensorFlow.
	"Conv2D": {1}, "Conv3D": {1}, "DepthwiseConv2dNative": {1}, "Conv2DBackpropInput": {1},
	"BiasAdd": {1}, "FusedBatchNorm": {1, 2}, "FusedBatchNormV2": {1, 2}, "FusedBatchNormV3": {1, 2},
	"_FusedConv2D": {from(1)}, "FusedDepthwiseConv2dNative": {from(1)}, "_FusedMatMul": {from(1)},
	"GatherV2": {0}, "ResourceGather": {0}, "Prelu": {1},
}

// matmulOps multiply two operands; a stored one is the layer's weight
// (x·W, or W·x when only the first is stored), and one with neither
// stored computes from activations alone (attention's Q·Kᵀ and A·V).
var matmulOps = map[string]bool{
	"MatMul": true, "Gemm": true, "FusedMatMul": true, "Einsum": true,
	"BatchMatMul": true, "BatchMatMulV2": true, "BatchMatMulV3": true,
}

// carrierOps pass a stored value on unchanged in content (relabelled,
// transposed, sliced, cast, dequantised), so what reads their output
// reads the stored tensor: the value is carrierOps[type] (the data
// input's position), or -1 when every floating-point input is data
// (Concat, Pack).
var carrierOps = map[string]int{
	"Identity": 0, "Transpose": 0, "Reshape": 0, "Flatten": 0, "Squeeze": 0, "Unsqueeze": 0,
	"Cast": 0, "CastLike": 0, "Slice": 0, "Split": 0, "Expand": 0, "Tile": 0, "Dropout": 0,
	"DequantizeLinear": 0, "Concat": -1,
	// TensorFlow (Split's data is its second input).
	"ReadVariableOp": 0, "Snapshot": 0, "ExpandDims": 0, "StridedSlice": 0, "SplitV": 0,
	"ConcatV2": -1, "Pack": -1,
}

// affineOps combine a tensor with another elementwise: a stored operand
// of more than one element is a bias, a scale or a position embedding
// (trained) unless the other operand is an attention score (a mask).
var affineOps = map[string]bool{
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Sum": true, "Where": true,
	"AddV2": true, "RealDiv": true,
}

// scaleOps are the affineOps that scale: a trained scale is per channel
// (a norm's or LayerScale's gamma), while a stored table that varies
// along several axes (rotary embeddings' cos and sin) is a buffer.
var scaleOps = map[string]bool{"Mul": true, "Div": true, "RealDiv": true}

// perChannel reports whether t has at most one axis longer than 1.
func perChannel(t *Tensor) bool {
	long := 0
	for _, d := range t.Shape {
		if d > 1 {
			long++
		}
	}
	return long <= 1
}

// concatOps join tensors: a stored operand joined to activations is a
// learned token (a class token, prompt or register tokens).
var concatOps = map[string]bool{"Concat": true, "ConcatV2": true, "Pack": true}

// IsStored reports whether t holds a value stored in the model file: an
// initializer or constant (a resident tensor no op writes) or a
// Constant node's output.
func (g *Graph) IsStored(t TensorID) bool {
	tt := &g.Tensors[t]
	if tt.Producer == NoOp {
		return tt.Kind.IsResident()
	}
	p := &g.Ops[tt.Producer]
	return p.Type == StoredOp && len(p.Inputs) == 0
}

// Trainable reports, per tensor of g, whether a training step trains it:
// a floating-point stored tensor (IsStored) that the model reads as a
// weight, directly or through ops that only move it (carrierOps):
//
//   - in a weight input of a layer (weightInputs): a convolution's filter
//     and bias, Gemm's B and C, a normalisation's scale and shift, an
//     embedding table, a recurrent layer's weights;
//   - as the stored operand of a matrix product (matmulOps), the second
//     when both are (the first is then a state, an RNN's initial h);
//   - as an operand of more than one element of an elementwise sum or
//     difference with an activation (affineOps: a bias added after a
//     MatMul, a position embedding), or of a product or quotient when it
//     varies along one axis only (scaleOps: a decomposed norm's scale),
//     unless that activation is an attention score (the product of two
//     activations, through elementwise ops), which makes the tensor a
//     mask;
//   - joined to an activation (concatOps: a class token).
//
// Everything else is a buffer: integer and boolean tensors, single
// values (a GELU's 0.5 and √2, an epsilon, a scale), BatchNormalization's
// running statistics, masks, rotary tables, initial states, shape and
// index operands.
func Trainable(g *Graph) []bool {
	n := len(g.Tensors)
	// src[t] is a stored tensor that t carries unchanged (-1: none);
	// stored tensors one op joins (a Concat of weights) are one group of
	// stores, so reading the join reads them all. score marks attention
	// scores.
	src := make([]TensorID, n)
	stores := NewUnionFind[TensorID](n)
	score := make([]bool, n)
	for t := range g.Tensors {
		src[t] = -1
		if g.IsStored(TensorID(t)) {
			src[t] = TensorID(t)
		}
	}
	order, err := g.TopoOrder(g.BuildAdjacency())
	if err != nil {
		order = make([]OpID, len(g.Ops)) // a cycle: visit in file order
		for i := range order {
			order[i] = OpID(i)
		}
	}
	// reads records each weight read: the stored tensor read and whether
	// a single element counts (a layer's weight input) or not.
	type read struct {
		store   TensorID
		anySize bool
	}
	var reads []read
	mark := func(t TensorID, anySize bool) { reads = append(reads, read{src[t], anySize}) }
	for _, id := range order {
		op := &g.Ops[id]
		if op.Type == StoredOp && len(op.Inputs) == 0 {
			continue
		}
		if pos, ok := carrierOps[op.Type]; ok && carryOn(g, op, pos, src, stores) {
			continue
		}
		if pos, ok := weightInputs[op.Type]; ok {
			for i, in := range op.Inputs {
				if weightPosition(pos, i) && src[in] >= 0 {
					mark(in, true)
				}
			}
		}
		switch {
		case matmulOps[op.Type] && len(op.Inputs) >= 2:
			a, b := op.Inputs[0], op.Inputs[1]
			switch {
			case src[b] >= 0:
				mark(b, true) // a stored a beside it is a state (an RNN's zero h0)
			case src[a] >= 0:
				mark(a, true)
			default:
				for _, o := range op.Outputs {
					score[o] = g.Tensors[o].DType.IsFloat()
				}
			}
		case affineOps[op.Type]:
			masked := false
			for _, in := range op.Inputs {
				masked = masked || score[in]
			}
			for _, in := range op.Inputs {
				if src[in] >= 0 && !masked && readsActivation(g, op, in, src) &&
					(!scaleOps[op.Type] || perChannel(&g.Tensors[in])) {
					mark(in, false)
				}
			}
		case concatOps[op.Type]:
			for _, in := range op.Inputs {
				if src[in] >= 0 && readsActivation(g, op, in, src) {
					mark(in, false)
				}
			}
		}
		if IsElementwiseOp(op.Type) {
			for _, in := range op.Inputs {
				if score[in] {
					for _, o := range op.Outputs {
						score[o] = g.Tensors[o].DType.IsFloat()
					}
					break
				}
			}
		}
	}
	// Resolved once every join is known: a group read as a layer's
	// weight trains all its stores, one read otherwise those of more than
	// one element.
	asWeight, asOperand := make([]bool, n), make([]bool, n)
	for _, r := range reads {
		root := stores.Find(r.store)
		asWeight[root] = asWeight[root] || r.anySize
		asOperand[root] = true
	}
	train := make([]bool, n)
	for t := range g.Tensors {
		if src[t] != TensorID(t) {
			continue
		}
		tt, root := &g.Tensors[t], stores.Find(TensorID(t))
		train[t] = tt.DType.IsFloat() && (asWeight[root] || asOperand[root] && tt.Elements() > 1)
	}
	return train
}

// from(k) is a weightInputs entry for every input position from k on.
func from(k int) int { return -1 - k }

// weightPosition reports whether input i is one of pos (weightInputs).
func weightPosition(pos []int, i int) bool {
	for _, p := range pos {
		if p == i || p < 0 && i >= -1-p {
			return true
		}
	}
	return false
}

// carryOn records what a carrier op's outputs carry: the store of its
// data input (pos), or, when pos is -1 and every floating-point input
// carries one, the group joining theirs. It reports whether the op
// carried anything, so it reads nothing as a weight itself.
func carryOn(g *Graph, op *Op, pos int, src []TensorID, stores *UnionFind[TensorID]) bool {
	carried := TensorID(-1)
	switch {
	case pos >= 0:
		if op.Type == "Split" && len(op.Inputs) == 2 && !g.Tensors[op.Inputs[0]].DType.IsFloat() {
			pos = 1 // TensorFlow's Split(axis, value)
		}
		if pos >= len(op.Inputs) {
			return false
		}
		carried = src[op.Inputs[pos]]
	default:
		for _, in := range op.Inputs {
			if !g.Tensors[in].DType.IsFloat() {
				continue
			}
			if src[in] < 0 {
				return false
			}
			if carried < 0 {
				carried = src[in]
			} else {
				stores.Union(carried, src[in])
			}
		}
	}
	if carried < 0 {
		return false
	}
	for _, o := range op.Outputs {
		src[o] = carried
	}
	return true
}

// readsActivation reports whether op reads, beside in, a floating-point
// tensor that carries nothing stored.
func readsActivation(g *Graph, op *Op, in TensorID, src []TensorID) bool {
	for _, x := range op.Inputs {
		if x != in && src[x] < 0 && g.Tensors[x].DType.IsFloat() {
			return true
		}
	}
	return false
}

// MarkTrainable gives g's stored tensors the kind Trainable decides:
// Parameter when trained, Constant when a buffer. A Constant node whose
// output is trained is a weight stored as a node, as exports made for
// inference store them: it is replaced by a parameter tensor, like an
// initializer. MarkTrainable returns the graph (g itself when no node
// was replaced) and how many nodes were.
func MarkTrainable(g *Graph) (*Graph, int, error) {
	train := Trainable(g)
	drop := make([]bool, len(g.Ops))
	promoted := 0
	for t := range g.Tensors {
		tt := &g.Tensors[t]
		if !g.IsStored(TensorID(t)) {
			continue
		}
		if tt.Producer != NoOp {
			if train[t] && len(g.Ops[tt.Producer].Outputs) == 1 {
				drop[tt.Producer] = true
				promoted++
			}
			continue
		}
		tt.Kind = Constant
		if train[t] {
			tt.Kind = Parameter
		}
	}
	if promoted == 0 {
		return g, 0, nil
	}
	out := New(g.Name, len(g.Ops)-promoted, len(g.Tensors))
	for t := range g.Tensors {
		tt := g.Tensors[t]
		if p := tt.Producer; p != NoOp && drop[p] {
			tt.Kind = Parameter
		}
		if _, err := out.AddTensor(tt); err != nil {
			return nil, 0, err
		}
	}
	newID := make([]OpID, len(g.Ops))
	next := OpID(0)
	for i := range g.Ops {
		newID[i] = NoOp
		if !drop[i] {
			newID[i], next = next, next+1
		}
	}
	for i := range g.Ops {
		if drop[i] {
			continue
		}
		op := g.Ops[i]
		var deps []OpID
		for _, d := range op.ControlDeps {
			if newID[d] != NoOp {
				deps = append(deps, newID[d])
			}
		}
		op.ControlDeps = deps
		if _, err := out.AddOp(op); err != nil {
			return nil, 0, err
		}
	}
	out.Inputs = append([]TensorID(nil), g.Inputs...)
	out.Outputs = append([]TensorID(nil), g.Outputs...)
	return out, promoted, nil
}

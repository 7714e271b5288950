package shard

import (
	"fmt"
	"slices"

	"github.com/opplace/opplace/graph"
)

// strategy is one way a group runs a forward op: the layout each input
// must arrive in, the layout of each output, and whether the op's work is
// divided among the members.
type strategy struct {
	name string
	in   []Layout
	// grad is the layout of the gradient the op's gradient op writes for
	// each input: the input's own layout, except that an input every
	// member reads whole (R) while the work is divided yields a partial
	// gradient (Megatron's "f": the all-reduce in backward).
	grad  []Layout
	out   []Layout
	split float32
}

// finish fills grad from in and split.
func (s strategy) finish() strategy {
	s.grad = make([]Layout, len(s.in))
	for j, l := range s.in {
		if l == Replicated && s.split > 0 {
			s.grad[j] = Partial
		} else {
			s.grad[j] = l
		}
	}
	return s
}

// elementwise are the ops applied element by element with numpy
// broadcasting: any output axis can be split, an input follows along the
// aligned axis or, where it broadcasts, is read whole.
var elementwise = map[string]bool{
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Pow": true, "Erf": true, "Tanh": true,
	"Relu": true, "Gelu": true, "Sigmoid": true, "Sqrt": true, "Neg": true, "Exp": true, "Log": true,
	"Cast": true, "Identity": true, "Where": true, "Dropout": true, "Abs": true, "Clip": true,
	"LeakyRelu": true, "Elu": true, "Selu": true, "Softplus": true, "HardSigmoid": true,
	"HardSwish": true, "Not": true, "Equal": true, "Less": true, "Greater": true,
	"LessOrEqual": true, "GreaterOrEqual": true, "And": true, "Or": true, "Min": true, "Max": true,
	"Reciprocal": true, "Sin": true, "Cos": true, "Mod": true, "Floor": true, "Ceil": true,
	"Round": true, "Sign": true, "PRelu": true, "Mish": true, "FastGelu": true, "BiasGelu": true,
	"QuickGelu": true,
}

// reshapes only regroup dimensions: Reshape and its special cases.
var reshapes = map[string]bool{"Reshape": true, "Flatten": true, "Squeeze": true, "Unsqueeze": true}

// channelOps keep the channel axis (1) of an NCHW tensor independent.
var channelOps = map[string]bool{
	"MaxPool": true, "AveragePool": true, "GlobalAveragePool": true, "GlobalMaxPool": true,
	"BatchNormalization": true,
}

// reductions over the axes attribute (or a constant axes input).
var reductions = map[string]bool{
	"ReduceMean": true, "ReduceSum": true, "ReduceMax": true, "ReduceMin": true,
	"ReduceProd": true, "ReduceL2": true, "ReduceSumSquare": true,
}

// strategist enumerates the strategies of the forward ops of one graph
// for a group of t members.
type strategist struct {
	g     *graph.Graph
	t     int64
	batch int64
	// tokens offers matmuls and Gemms the token split (Options.Tokens).
	tokens bool
}

// splittable reports whether axis a of tensor x can be divided among t
// members: its size divides evenly, and it is not the batch axis of an
// activation (splitting the batch is data parallelism, sim's replicas,
// not tensor parallelism).
func (s *strategist) splittable(x graph.TensorID, a int) bool {
	tt := &s.g.Tensors[x]
	if !tt.ShapeKnown || a < 0 || a >= len(tt.Shape) {
		return false
	}
	d := tt.Shape[a]
	if d < s.t || d%s.t != 0 {
		return false
	}
	if a == 0 && len(tt.Shape) >= 2 && s.batch > 1 && d == s.batch && tt.Kind != graph.Parameter && !s.isWeight(x, 0) {
		return false
	}
	return true
}

// isWeight reports whether x is a trained parameter, possibly seen
// through the Transpose, Cast or Identity the exporters put between a
// parameter and its matmul.
func (s *strategist) isWeight(x graph.TensorID, depth int) bool {
	tt := &s.g.Tensors[x]
	if tt.Kind == graph.Parameter {
		return true
	}
	if tt.Producer == graph.NoOp || depth >= 3 {
		return false
	}
	op := &s.g.Ops[tt.Producer]
	switch op.Type {
	case "Transpose", "Cast", "Identity":
		return len(op.Inputs) > 0 && s.isWeight(op.Inputs[0], depth+1)
	}
	return false
}

func (s *strategist) rank(x graph.TensorID) int { return len(s.g.Tensors[x].Shape) }

func (s *strategist) shape(x graph.TensorID) []int64 { return s.g.Tensors[x].Shape }

// known reports whether every input and output of op has a known shape.
func (s *strategist) known(op *graph.Op) bool {
	for _, x := range op.Inputs {
		if !s.g.Tensors[x].ShapeKnown {
			return false
		}
	}
	for _, x := range op.Outputs {
		if !s.g.Tensors[x].ShapeKnown {
			return false
		}
	}
	return true
}

// replicated is the strategy every op has: inputs whole, outputs whole,
// work run by every member. Shape and Size read only dimensions, so they
// take their input in any layout.
func (s *strategist) replicated(op *graph.Op) strategy {
	st := strategy{name: "replicated", in: make([]Layout, len(op.Inputs)), out: make([]Layout, len(op.Outputs))}
	for j := range st.in {
		st.in[j] = Replicated
		if op.Type == "Shape" || op.Type == "Size" {
			st.in[j] = anyLayout
		}
	}
	for k := range st.out {
		st.out[k] = Replicated
	}
	return st.finish()
}

// strategies lists op's strategies, the replicated one first.
func (s *strategist) strategies(id graph.OpID) []strategy {
	op := &s.g.Ops[id]
	list := []strategy{s.replicated(op)}
	if len(op.Outputs) == 0 || !s.known(op) {
		return list
	}
	var more []strategy
	switch {
	case op.Type == "MatMul":
		more = s.matmul(op)
	case op.Type == "Gemm":
		more = s.gemm(op)
	case op.Type == "Conv":
		more = s.conv(op)
	case elementwise[op.Type]:
		more = s.elementwise(op)
	case op.Type == "Softmax" || op.Type == "LogSoftmax":
		more = s.normalise(op, int(op.Attrs.Int("axis", -1)))
	case op.Type == "LayerNormalization":
		more = s.normalise(op, int(op.Attrs.Int("axis", -1)))
	case channelOps[op.Type]:
		more = s.channel(op)
	case reductions[op.Type]:
		more = s.reduce(op)
	case reshapes[op.Type]:
		more = s.reshape(op)
	case op.Type == "Transpose":
		more = s.transpose(op)
	case op.Type == "Split":
		more = s.split(op)
	case op.Type == "Concat":
		more = s.concat(op)
	case op.Type == "Slice":
		more = s.slice(op)
	case op.Type == "Gather":
		more = s.gather(op)
	case op.Type == "Attention" && op.Domain == graph.AttentionDomain:
		more = s.attention(op)
	}
	for _, st := range more {
		list = append(list, st.finish())
	}
	return list
}

// uniform is a strategy with every input and output in layout l except
// those listed in ins (input index to layout).
func uniform(op *graph.Op, name string, split float32, outs []Layout, ins map[int]Layout) strategy {
	st := strategy{name: name, in: make([]Layout, len(op.Inputs)), out: outs, split: split}
	for j := range st.in {
		if l, ok := ins[j]; ok {
			st.in[j] = l
		} else {
			st.in[j] = Replicated
		}
	}
	return st
}

func repeat(l Layout, n int) []Layout {
	out := make([]Layout, n)
	for i := range out {
		out[i] = l
	}
	return out
}

// matmul: with a weight B, column (B split on its output dim, A whole,
// output split on its last axis) and row (A split on its last axis, B on
// its input dim, output a partial sum); of two activations, a shared
// batch-like axis (attention's heads) and the contracted axis. Either
// kind also has tokens: A split on its rows (a sequence's tokens; never
// the batch, see splittable), B read whole, the output split on its
// rows. B's gradient is then a partial sum (each member saw some tokens),
// reduced once per step for a weight and per run for an activation
// (attention's K and V, gathered whole in forward).
func (s *strategist) matmul(op *graph.Op) []strategy {
	if len(op.Inputs) != 2 {
		return nil
	}
	a, b, y := op.Inputs[0], op.Inputs[1], op.Outputs[0]
	ra, rb, ry := s.rank(a), s.rank(b), s.rank(y)
	if ra < 2 || rb < 2 {
		return nil
	}
	weight := s.isWeight(b, 0)
	col, row := "split-N", "contracted"
	if weight {
		col, row = "column", "row"
	}
	var list []strategy
	if s.splittable(b, rb-1) && s.splittable(y, ry-1) {
		list = append(list, uniform(op, col, 1, []Layout{Split(ry - 1)}, map[int]Layout{1: Split(rb - 1)}))
	}
	if s.splittable(a, ra-1) && s.splittable(b, rb-2) {
		list = append(list, uniform(op, row, 1, []Layout{Partial}, map[int]Layout{0: Split(ra - 1), 1: Split(rb - 2)}))
	}
	if s.tokens && s.splittable(a, ra-2) && s.splittable(y, ry-2) {
		list = append(list, uniform(op, "tokens", 1, []Layout{Split(ry - 2)}, map[int]Layout{0: Split(ra - 2)}))
	}
	for ax := 0; ax < ry-2; ax++ {
		if !s.splittable(y, ax) {
			continue
		}
		ins := map[int]Layout{}
		ok := true
		for j, x := range []graph.TensorID{a, b} {
			r := s.rank(x)
			xa := ax - (ry - r)
			if xa < 0 || xa >= r-2 || s.shape(x)[xa] == 1 {
				continue // broadcast: read whole
			}
			if s.shape(x)[xa] != s.shape(y)[ax] || !s.splittable(x, xa) {
				ok = false
				break
			}
			ins[j] = Split(xa)
		}
		if !ok || len(ins) == 0 {
			continue
		}
		name := fmt.Sprintf("batch:%d", ax)
		if ry == 4 && ax == 1 {
			name = "heads"
		}
		list = append(list, uniform(op, name, 1, []Layout{Split(ax)}, ins))
	}
	return list
}

// gemm: column (B split on N, a bias along N split with it), without a
// bias row (A and B split on K, output partial: a bias must be added
// once, after the all-reduce, which Gemm cannot do), and tokens (A split
// on M, B and a bias broadcast along M whole, output split on M).
func (s *strategist) gemm(op *graph.Op) []strategy {
	if len(op.Inputs) < 2 || s.rank(op.Inputs[0]) != 2 || s.rank(op.Inputs[1]) != 2 {
		return nil
	}
	ta, tb := op.Attrs.Int("transA", 0) != 0, op.Attrs.Int("transB", 0) != 0
	a, b, y := op.Inputs[0], op.Inputs[1], op.Outputs[0]
	nAxis, kbAxis, kaAxis := 1, 0, 1
	if tb {
		nAxis, kbAxis = 0, 1
	}
	if ta {
		kaAxis = 0
	}
	col, row := "split-N", "contracted"
	if s.isWeight(b, 0) {
		col, row = "column", "row"
	}
	var list []strategy
	if s.splittable(b, nAxis) && s.splittable(y, 1) {
		ins := map[int]Layout{1: Split(nAxis)}
		if len(op.Inputs) > 2 {
			c := op.Inputs[2]
			if rc := s.rank(c); rc >= 1 && s.shape(c)[rc-1] == s.shape(y)[1] {
				ins[2] = Split(rc - 1)
			}
		}
		list = append(list, uniform(op, col, 1, []Layout{Split(1)}, ins))
	}
	if len(op.Inputs) == 2 && s.splittable(a, kaAxis) && s.splittable(b, kbAxis) {
		list = append(list, uniform(op, row, 1, []Layout{Partial}, map[int]Layout{0: Split(kaAxis), 1: Split(kbAxis)}))
	}
	if s.tokens && s.splittable(a, 1-kaAxis) && s.splittable(y, 0) {
		ins := map[int]Layout{0: Split(1 - kaAxis)}
		if len(op.Inputs) > 2 {
			// A bias of M rows is split with them; one broadcast along
			// M is read whole.
			if c := op.Inputs[2]; s.rank(c) == 2 && s.shape(c)[0] == s.shape(y)[0] {
				if !s.splittable(c, 0) {
					return list
				}
				ins[2] = Split(0)
			}
		}
		list = append(list, uniform(op, "tokens", 1, []Layout{Split(0)}, ins))
	}
	return list
}

// conv: column over output channels (weight and bias split on axis 0,
// output on channels) and, without a bias, row over input channels
// (output partial). Grouped convolutions stay replicated.
func (s *strategist) conv(op *graph.Op) []strategy {
	if len(op.Inputs) < 2 || op.Attrs.Int("group", 1) != 1 {
		return nil
	}
	x, w, y := op.Inputs[0], op.Inputs[1], op.Outputs[0]
	var list []strategy
	if s.splittable(w, 0) && s.splittable(y, 1) {
		ins := map[int]Layout{1: Split(0)}
		if len(op.Inputs) > 2 {
			ins[2] = Split(0)
		}
		list = append(list, uniform(op, "column", 1, []Layout{Split(1)}, ins))
	}
	if len(op.Inputs) == 2 && s.splittable(x, 1) && s.splittable(w, 1) {
		list = append(list, uniform(op, "row", 1, []Layout{Partial}, map[int]Layout{0: Split(1), 1: Split(1)}))
	}
	return list
}

// elementwise splits any output axis; every input follows on its aligned
// axis unless it broadcasts there. A parameter operand is split with the
// activation (a column-parallel bias).
func (s *strategist) elementwise(op *graph.Op) []strategy {
	y := op.Outputs[0]
	ry := s.rank(y)
	for _, o := range op.Outputs[1:] {
		if !slices.Equal(s.shape(o), s.shape(y)) {
			return nil
		}
	}
	var list []strategy
	for ax := 0; ax < ry; ax++ {
		if !s.splittable(y, ax) {
			continue
		}
		ins := map[int]Layout{}
		for j, x := range op.Inputs {
			r := s.rank(x)
			xa := ax - (ry - r)
			if xa >= 0 && s.shape(x)[xa] == s.shape(y)[ax] {
				ins[j] = Split(xa)
			}
		}
		list = append(list, uniform(op, fmt.Sprintf("split:%d", ax), 1, repeat(Split(ax), len(op.Outputs)), ins))
	}
	return list
}

// normalise: softmax and layer normalisation are independent along the
// axes before the normalised ones; their scale and bias are read whole.
func (s *strategist) normalise(op *graph.Op, axis int) []strategy {
	x := op.Inputs[0]
	r := s.rank(x)
	if axis < 0 {
		axis += r
	}
	var list []strategy
	for ax := 0; ax < axis && ax < r; ax++ {
		if !s.splittable(x, ax) {
			continue
		}
		outs := make([]Layout, len(op.Outputs))
		for k, o := range op.Outputs {
			outs[k] = Replicated
			if s.rank(o) == r && s.shape(o)[ax] == s.shape(x)[ax] {
				outs[k] = Split(ax)
			}
		}
		list = append(list, uniform(op, fmt.Sprintf("split:%d", ax), 1, outs, map[int]Layout{0: Split(ax)}))
	}
	return list
}

// attention: a fused attention core (graph.FuseAttention) is independent
// per head and per query row. Split over heads (any leading axis of the
// scores but the batch), Q, K, V, the mask where it varies along that
// axis, and the output follow the axis; with tokens, Q and the output are
// split on their rows and K, V are read whole (their gradients partial
// sums), as the matmuls' token split does.
func (s *strategist) attention(op *graph.Op) []strategy {
	if len(op.Inputs) < 3 || len(op.Outputs) != 1 {
		return nil
	}
	y := op.Outputs[0]
	r := s.rank(y)
	for _, x := range op.Inputs[:3] {
		if s.rank(x) != r {
			return nil
		}
	}
	var list []strategy
	for ax := 0; ax < r-2; ax++ {
		ins := map[int]Layout{}
		ok := s.splittable(y, ax)
		for j, x := range op.Inputs {
			switch {
			case !ok:
			case j < 3 && s.splittable(x, ax):
				ins[j] = Split(ax)
			case j < 3:
				ok = false
			case s.rank(x) == r && s.shape(x)[ax] == s.shape(y)[ax] && s.splittable(x, ax):
				ins[j] = Split(ax) // a mask per head
			}
		}
		if ok {
			list = append(list, uniform(op, fmt.Sprintf("split:%d", ax), 1, []Layout{Split(ax)}, ins))
		}
	}
	if q := op.Inputs[0]; s.tokens && s.splittable(q, r-2) && s.splittable(y, r-2) {
		ins := map[int]Layout{0: Split(r - 2)}
		for j, x := range op.Inputs[3:] {
			if n := s.rank(x); n >= 2 && s.shape(x)[n-2] == s.shape(q)[r-2] && s.splittable(x, n-2) {
				ins[3+j] = Split(n - 2) // the mask's query rows
			}
		}
		list = append(list, uniform(op, "tokens", 1, []Layout{Split(r - 2)}, ins))
	}
	return list
}

// channel: pooling and batch normalisation are independent per channel.
func (s *strategist) channel(op *graph.Op) []strategy {
	x, y := op.Inputs[0], op.Outputs[0]
	if s.rank(x) < 2 || s.rank(y) < 2 || !s.splittable(x, 1) || !s.splittable(y, 1) {
		return nil
	}
	ins := map[int]Layout{0: Split(1)}
	for j, in := range op.Inputs[1:] {
		if s.rank(in) == 1 && s.shape(in)[0] == s.shape(x)[1] {
			ins[j+1] = Split(0)
		}
	}
	outs := make([]Layout, len(op.Outputs))
	for k, o := range op.Outputs {
		switch {
		case k == 0:
			outs[k] = Split(1)
		case s.rank(o) == 1 && s.shape(o)[0] == s.shape(x)[1]:
			outs[k] = Split(0)
		default:
			outs[k] = Replicated
		}
	}
	return []strategy{uniform(op, "channels", 1, outs, ins)}
}

// reduce: a kept axis maps through; ReduceSum over a split axis leaves a
// partial sum.
func (s *strategist) reduce(op *graph.Op) []strategy {
	x, y := op.Inputs[0], op.Outputs[0]
	r := s.rank(x)
	axes := op.Attrs.Ints("axes")
	if axes == nil && len(op.Inputs) > 1 {
		if p := s.g.Tensors[op.Inputs[1]].Producer; p != graph.NoOp && s.g.Ops[p].Type == "Constant" {
			axes = s.g.Ops[p].Attrs["value"].TensorInts
		}
	}
	if axes == nil {
		return nil // all axes, or unknown
	}
	keep := op.Attrs.Int("keepdims", 1) != 0
	reduced := make([]bool, r)
	for _, a := range axes {
		if a < 0 {
			a += int64(r)
		}
		if a < 0 || a >= int64(r) {
			return nil
		}
		reduced[a] = true
	}
	var list []strategy
	for ax := 0; ax < r; ax++ {
		if !s.splittable(x, ax) {
			continue
		}
		if reduced[ax] {
			if op.Type == "ReduceSum" {
				list = append(list, uniform(op, fmt.Sprintf("partial:%d", ax), 1, []Layout{Partial}, map[int]Layout{0: Split(ax)}))
			}
			continue
		}
		yax := ax
		if !keep {
			for b := 0; b < ax; b++ {
				if reduced[b] {
					yax--
				}
			}
		}
		if s.splittable(y, yax) {
			list = append(list, uniform(op, fmt.Sprintf("split:%d", ax), 1, []Layout{Split(yax)}, map[int]Layout{0: Split(ax)}))
		}
	}
	return list
}

// reshape maps a split axis through a reshape when it is the leading
// (non-unit) dimension of a group of dimensions the reshape merges or
// splits, and both sides divide by t: each member then holds one
// contiguous 1/t of the group.
func (s *strategist) reshape(op *graph.Op) []strategy {
	x, y := op.Inputs[0], op.Outputs[0]
	in, out := s.shape(x), s.shape(y)
	var list []strategy
	for _, m := range groupLeads(in, out) {
		if s.splittable(x, m[0]) && s.splittable(y, m[1]) {
			list = append(list, uniform(op, fmt.Sprintf("split:%d", m[1]), 1, []Layout{Split(m[1])}, map[int]Layout{0: Split(m[0])}))
		}
	}
	return list
}

// groupLeads pairs the leading non-unit axis of each group of input
// dimensions with that of the group of output dimensions of equal
// product it becomes.
func groupLeads(in, out []int64) [][2]int {
	var pairs [][2]int
	i, j := 0, 0
	for i < len(in) && j < len(out) {
		i0, j0 := i, j
		pi, pj := in[i], out[j]
		i++
		j++
		for pi != pj {
			if pi < pj {
				if i >= len(in) {
					return pairs
				}
				pi *= in[i]
				i++
			} else {
				if j >= len(out) {
					return pairs
				}
				pj *= out[j]
				j++
			}
		}
		li, lj := i0, j0
		for li < i-1 && in[li] == 1 {
			li++
		}
		for lj < j-1 && out[lj] == 1 {
			lj++
		}
		if in[li] > 1 {
			pairs = append(pairs, [2]int{li, lj})
		}
	}
	return pairs
}

// transpose permutes the split axis.
func (s *strategist) transpose(op *graph.Op) []strategy {
	x, y := op.Inputs[0], op.Outputs[0]
	r := s.rank(x)
	perm := op.Attrs.Ints("perm")
	if perm == nil {
		for k := r - 1; k >= 0; k-- {
			perm = append(perm, int64(k))
		}
	}
	if len(perm) != r {
		return nil
	}
	var list []strategy
	for j, p := range perm {
		if s.splittable(x, int(p)) && s.splittable(y, j) {
			list = append(list, uniform(op, fmt.Sprintf("split:%d", j), 1, []Layout{Split(j)}, map[int]Layout{0: Split(int(p))}))
		}
	}
	return list
}

// split: an axis other than the split one maps through; the split axis
// itself too when every piece divides by t (each member's shard of the
// input then holds 1/t of every piece, as Megatron lays out its fused
// QKV weight).
func (s *strategist) split(op *graph.Op) []strategy {
	x := op.Inputs[0]
	r := s.rank(x)
	axis := int(op.Attrs.Int("axis", 0))
	if axis < 0 {
		axis += r
	}
	var list []strategy
	for ax := 0; ax < r; ax++ {
		if !s.splittable(x, ax) {
			continue
		}
		ok := true
		for _, o := range op.Outputs {
			ok = ok && s.splittable(o, ax)
		}
		if ok {
			list = append(list, uniform(op, fmt.Sprintf("split:%d", ax), 1, repeat(Split(ax), len(op.Outputs)), map[int]Layout{0: Split(ax)}))
		}
	}
	return list
}

// concat: every input split on the same axis, each dividing by t.
func (s *strategist) concat(op *graph.Op) []strategy {
	y := op.Outputs[0]
	var list []strategy
	for ax := 0; ax < s.rank(y); ax++ {
		ins := map[int]Layout{}
		ok := s.splittable(y, ax)
		for j, x := range op.Inputs {
			ok = ok && s.rank(x) == s.rank(y) && s.splittable(x, ax)
			ins[j] = Split(ax)
		}
		if ok {
			list = append(list, uniform(op, fmt.Sprintf("split:%d", ax), 1, []Layout{Split(ax)}, ins))
		}
	}
	return list
}

// slice: an axis the slice leaves whole maps through.
func (s *strategist) slice(op *graph.Op) []strategy {
	x, y := op.Inputs[0], op.Outputs[0]
	if s.rank(x) != s.rank(y) {
		return nil
	}
	var list []strategy
	for ax := 0; ax < s.rank(x); ax++ {
		if s.shape(x)[ax] == s.shape(y)[ax] && s.splittable(x, ax) && s.splittable(y, ax) {
			list = append(list, uniform(op, fmt.Sprintf("split:%d", ax), 1, []Layout{Split(ax)}, map[int]Layout{0: Split(ax)}))
		}
	}
	return list
}

// gather: an axis of the data other than the gathered one maps through
// (an embedding table split on its hidden dimension).
func (s *strategist) gather(op *graph.Op) []strategy {
	if len(op.Inputs) != 2 {
		return nil
	}
	d, idx, y := op.Inputs[0], op.Inputs[1], op.Outputs[0]
	r := s.rank(d)
	axis := int(op.Attrs.Int("axis", 0))
	if axis < 0 {
		axis += r
	}
	var list []strategy
	for ax := 0; ax < r; ax++ {
		if ax == axis || !s.splittable(d, ax) {
			continue
		}
		yax := ax
		if ax > axis {
			yax = ax + s.rank(idx) - 1
		}
		if s.splittable(y, yax) {
			list = append(list, uniform(op, fmt.Sprintf("split:%d", yax), 1, []Layout{Split(yax)}, map[int]Layout{0: Split(ax)}))
		}
	}
	return list
}
